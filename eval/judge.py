"""The LLM judge: EgoServe's Rationality and Effectiveness ratings, and the ``judge`` content scorer.

Two rubric prompts (docs/protocols.md), each rated 1-5 at temperature 0 and answered in one strict line,
``Rationality: <n>`` or ``Effectiveness: <n>``. An answer without exactly that line (one value, 1-5)
is unparsable; the question is asked again, up to ``tries`` (3) times; a pair still unparsable is
counted and reported, never turned into a score.

Back ends (registry :data:`JUDGE_BACKENDS`): ``http``, an OpenAI-compatible chat-completions endpoint
(``base_url``, ``model``, the API key read from the environment variable named by ``key_env``,
never logged), and ``local``, a transformers causal LM from a folder (greedy decoding).

Answers are cached on disk (sqlite) under a key of back end, model, prompt and try number, so a
re-evaluation sends no request: a try that once gave a bad answer replays that same answer.

As a content scorer (``--content judge``), a pair's score is ``(Rationality - 1) / 4``;
an unparsable pair raises :class:`rewards.content.Unscorable`.

    python -m eval.score --protocol egoserve --gt holoassist_service_annotations.json --pred preds.json \\
        --content judge --judge-url http://127.0.0.1:8000/v1 --judge-model my-judge
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from rewards.content import TargetLike, Unscorable, register_content

RATIONALITY_PROMPT = """You are grading a proactive assistant that watches a first-person video and offers help.
Compare the assistant's message with the reference message written by an annotator for the same moment.

Reference service type: {gt_type}
Reference message: {gt_text}
Assistant service type: {pred_type}
Assistant message: {pred_text}

Rate Rationality from 1 to 5: does the assistant's message agree in meaning with the reference message
and offer the same type of service?
5 = same intent, same key facts, same service type; 4 = same intent, minor omissions;
3 = partly overlapping intent or a related service type; 2 = mostly different; 1 = unrelated or contradictory.

Answer with exactly one line and nothing else:
Rationality: <n>"""

EFFECTIVENESS_PROMPT = """You are grading a proactive assistant that watches a first-person video and offers help.

Situation (reference service type and message): {gt_type}: {gt_text}
Assistant message: {pred_text}

Rate Effectiveness from 1 to 5: is the assistant's message logical, actionable, helpful to the user at
this moment, and well framed (clear, concise, polite)?
5 = all four fully; 4 = one minor weakness; 3 = useful but vague or awkward;
2 = hardly actionable or poorly framed; 1 = illogical, unhelpful or harmful.

Answer with exactly one line and nothing else:
Effectiveness: <n>"""


def parse_rating(answer: str, field: str) -> int | None:
    """The rating in the answer's one ``<field>: <n>`` line (n in 1..5), or None.

    >>> parse_rating("Rationality: 4", "Rationality"), parse_rating("I think 4", "Rationality")
    (4, None)
    >>> parse_rating("Rationality: 4\\nRationality: 2", "Rationality") is None
    True
    """
    pattern = re.compile(rf"^{field}:\s*([1-5])$")
    values = {m.group(1) for line in answer.splitlines() if (m := pattern.match(line.strip()))}
    return int(values.pop()) if len(values) == 1 else None


class JudgeCache:
    """sqlite store of raw judge answers, keyed by a hash of (back end, model, prompt, try)."""

    def __init__(self, path: str | Path | None) -> None:
        self.path = Path(path) if path else None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(str(self.path) if self.path else ":memory:")
        self.db.execute("CREATE TABLE IF NOT EXISTS answers (key TEXT PRIMARY KEY, answer TEXT NOT NULL)")

    @staticmethod
    def key(backend: str, model: str, prompt: str, attempt: int) -> str:
        return hashlib.sha256(json.dumps([backend, model, prompt, attempt]).encode()).hexdigest()

    def get(self, key: str) -> str | None:
        row = self.db.execute("SELECT answer FROM answers WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]

    def put(self, key: str, answer: str) -> None:
        self.db.execute("INSERT OR REPLACE INTO answers VALUES (?, ?)", (key, answer))
        self.db.commit()


class HttpBackend:
    """An OpenAI-compatible ``POST {base_url}/chat/completions`` endpoint (stdlib HTTP)."""

    name = "http"

    def __init__(
        self,
        base_url: str,
        model: str,
        key_env: str = "JUDGE_API_KEY",
        timeout_s: float = 60.0,
        max_tokens: int = 16,
    ) -> None:
        if not base_url or not model:
            raise ValueError("the http judge needs base_url and model")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model, self.key_env, self.timeout_s, self.max_tokens = model, key_env, timeout_s, max_tokens
        self.requests_sent = 0

    def complete(self, prompt: str) -> str:
        body = {
            "model": self.model,
            "messages": [{"role": "user", "content": prompt}],
            "temperature": 0,
            "max_tokens": self.max_tokens,
        }
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.key_env)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        request = urllib.request.Request(
            self.url, data=json.dumps(body).encode(), headers=headers, method="POST"
        )
        self.requests_sent += 1
        with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
            data = json.loads(response.read().decode("utf-8"))
        return str(data["choices"][0]["message"]["content"])


class LocalBackend:
    """A transformers causal LM from a folder, greedy decoding of a few tokens."""

    name = "local"

    def __init__(self, model: str, device: str = "cpu", max_tokens: int = 16, **_: Any) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.model = model
        self.tokenizer = AutoTokenizer.from_pretrained(model)
        self.lm = AutoModelForCausalLM.from_pretrained(model).to(device).eval()
        self.device, self.max_tokens = device, max_tokens
        self.requests_sent = 0

    def complete(self, prompt: str) -> str:
        import torch

        if getattr(self.tokenizer, "chat_template", None):
            text = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
            )
        else:
            text = prompt + "\n"
        ids = self.tokenizer(text, return_tensors="pt").to(self.device)
        self.requests_sent += 1
        with torch.no_grad():
            out = self.lm.generate(**ids, do_sample=False, max_new_tokens=self.max_tokens)
        return self.tokenizer.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)


JUDGE_BACKENDS: dict[str, Callable[..., Any]] = {"http": HttpBackend, "local": LocalBackend}


class Judge:
    """Rates pairs with the two rubrics; counts requests, cache hits and unparsable answers."""

    def __init__(
        self,
        backend: str = "http",
        cache_path: str | Path | None = None,
        tries: int = 3,
        **backend_config: Any,
    ) -> None:
        if backend not in JUDGE_BACKENDS:
            raise KeyError(f"unknown judge back end {backend!r} (known: {sorted(JUDGE_BACKENDS)})")
        self.backend = JUDGE_BACKENDS[backend](**backend_config)
        self.cache = JudgeCache(cache_path)
        self.tries = tries
        self.unparsable = 0
        self.cache_hits = 0
        self.errors = 0

    @property
    def requests_sent(self) -> int:
        return self.backend.requests_sent

    def rate(self, prompt: str, field: str) -> int | None:
        """Ask up to ``tries`` times; the parsed rating or None (then counted as unparsable)."""
        for attempt in range(self.tries):
            key = JudgeCache.key(self.backend.name, self.backend.model, prompt, attempt)
            answer = self.cache.get(key)
            if answer is None:
                try:
                    answer = self.backend.complete(prompt)
                except (urllib.error.URLError, OSError, KeyError, IndexError, ValueError):
                    self.errors += 1  # a failed request is a used try; nothing is cached
                    continue
                self.cache.put(key, answer)
            else:
                self.cache_hits += 1
            rating = parse_rating(answer, field)
            if rating is not None:
                return rating
        self.unparsable += 1
        return None

    def rationality(self, gt_text: str, gt_type: str, pred_text: str, pred_type: str) -> int | None:
        return self.rate(
            RATIONALITY_PROMPT.format(
                gt_text=gt_text, gt_type=gt_type, pred_text=pred_text, pred_type=pred_type
            ),
            "Rationality",
        )

    def effectiveness(self, gt_text: str, gt_type: str, pred_text: str) -> int | None:
        return self.rate(
            EFFECTIVENESS_PROMPT.format(gt_text=gt_text, gt_type=gt_type, pred_text=pred_text),
            "Effectiveness",
        )

    def rate_pairs(self, pairs: Iterable[tuple[Any, Any]]) -> dict:
        """Mean Rationality, Effectiveness and their mean over pairs where both parse, plus counts.
        Each pair is (gt, prediction) with ``subtype`` and ``text`` attributes."""
        rs, es, bad = [], [], 0
        for gt, pred in pairs:
            r = self.rationality(gt.text, gt.subtype, pred.text, pred.subtype)
            e = self.effectiveness(gt.text, gt.subtype, pred.text)
            if r is None or e is None:
                bad += 1
                continue
            rs.append(r)
            es.append(e)
        mean_r = sum(rs) / len(rs) if rs else None
        mean_e = sum(es) / len(es) if es else None
        return {
            "rationality": mean_r,
            "effectiveness": mean_e,
            "mean": None if mean_r is None else (mean_r + mean_e) / 2,
            "pairs_rated": len(rs),
            "pairs_unparsable": bad,
            "requests": self.requests_sent,
            "cache_hits": self.cache_hits,
            "request_errors": self.errors,
        }


class JudgeScorer:
    """Content scorer ``(Rationality - 1) / 4``; unparsable pairs raise :class:`Unscorable`."""

    def __init__(self, judge: Judge) -> None:
        self.judge = judge

    def __call__(self, reply: str, target: TargetLike) -> float:
        kind = target.category or "proactive reply"
        r = self.judge.rationality(target.content, kind, reply, kind)
        if r is None:
            raise Unscorable("the judge's answer could not be parsed")
        return (r - 1) / 4


@register_content("judge")
def make_judge(**config: Any) -> JudgeScorer:
    return JudgeScorer(Judge(**config))


def config_from_args(args: Any) -> dict[str, Any]:
    """Judge config from ``eval.score``'s options (the key itself stays in the environment)."""
    backend = getattr(args, "judge_backend", "http")
    cache = getattr(args, "judge_cache", None) or str(
        Path.home() / ".cache" / "proactive_vlm" / "judge.sqlite"
    )
    config: dict[str, Any] = {
        "backend": backend,
        "cache_path": cache,
        "model": getattr(args, "judge_model", None),
    }
    if backend == "http":
        config.update(
            base_url=getattr(args, "judge_url", None), key_env=getattr(args, "judge_key_env", "JUDGE_API_KEY")
        )
    return config


def judge_matched_pairs(pairs: list, args: Any) -> dict:
    """Rate EgoServe's matched (gt, prediction) pairs with the judge configured on the command line."""
    return Judge(**config_from_args(args)).rate_pairs(pairs)
