"""The LLM judge: EgoServe's Rationality and Effectiveness ratings, and the ``judge`` content scorer.

Rated as the benchmark's official judge rates (docs/egoserve.md):

- the pairs are the matched (ground truth, prediction) pairs of the official matching; a pair whose
  ground-truth or predicted message is empty (after stripping) is not sent, it is counted under
  ``skipped_empty_message``;
- two prompts per pair (:data:`RATIONALITY_PROMPT`, :data:`EFFECTIVENESS_PROMPT`, this project's
  wording of the official rubric), each showing both service types (``main / sub``) and both
  messages, answered at temperature 0 with ``Rationality: <1-5>`` (or ``Effectiveness: <1-5>``)
  and a one-to-three sentence justification;
- the rating is the first ``<Name>: <integer>`` in the answer (any case), capped at 5; an answer
  without one is not asked again; a pair counts only when both ratings parse;
- Rationality, Effectiveness and their mean (``overall``) are plain means over the rated pairs,
  overall and per dataset, with ``n``.

A pair the judge could not rate (unparsable answer, failed request, endpoint down) is counted under
``unrated``, never turned into a score. Requests go through :class:`infra.chat_client.ChatClient`
(a total deadline per request, ``--judge-timeout``; retries for transient failures only; 401/403/404
stop the run with the status).

Back ends (registry :data:`JUDGE_BACKENDS`): ``http``, an OpenAI-compatible chat-completions endpoint
(``base_url``, ``model``, the API key read from the environment variable named by ``key_env``,
never logged), and ``local``, a transformers causal LM from a folder (greedy decoding). Answers are
cached on disk (sqlite) under a key of everything that decides the answer: the back end, its
endpoint (``http``: the URL; ``local``: the folder, with its files' sizes and times), the model, the
reply cap, :data:`CACHE_VERSION` and the prompt itself (so a change of rubric wording is a new key).
A re-evaluation against the same judge sends no request; another endpoint or model is asked afresh.
As a content scorer (``--content judge``), a pair's score is ``(Rationality - 1) / 4`` (at least 0);
an unrated pair raises :class:`metrics.content.Unscorable`.

    python -m eval.score --protocol egoserve --gt holoassist_service_annotations.json --pred preds/ \\
        --content judge --judge-url http://127.0.0.1:8000/v1 --judge-model my-judge --judge-timeout 30
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from infra.chat_client import ChatError, ChatFatal
from infra.registry import Registry
from metrics.content import TargetLike, Unscorable

_HEADER = """You rate a proactive assistant that watches a first-person video and offers help without being asked.
An annotator wrote the reference service for the same moment.

Reference service type: {gt_type}
Reference message: {gt_text}

Assistant service type: {pred_type}
Assistant message: {pred_text}
"""

RATIONALITY_PROMPT = (
    _HEADER
    + """
Rate RATIONALITY from 1 to 5: how close in meaning the assistant's service is to the reference.
Consider: do both answer the same situation and need; is the content consistent with the reference;
does the service type agree with the reference type; are the key pieces of information kept?
1 = unrelated to the reference or contradicting it
2 = a large mismatch in meaning; it serves a different need
3 = partly the same; some aspects right but key points missing
4 = mostly the same; small differences in meaning
5 = the same meaning as the reference

Reply in exactly two lines and nothing else:
Rationality: <1-5>
Justification: <one to three sentences>"""
)

EFFECTIVENESS_PROMPT = (
    _HEADER
    + """
Rate EFFECTIVENESS from 1 to 5: does the assistant's message, on its own, help the user in a logical way?
Consider: does it address the user's situation; is the advice or information actionable and useful;
is the reasoning behind it sound; does it help proactively in a meaningful way; are its tone and
framing right for an assistant that speaks up unasked?
1 = illogical or unhelpful; no real help
2 = poorly reasoned; the help is confusing or misguided
3 = somewhat helpful but its logic or actionability is unclear
4 = sound and helpful, with small issues
5 = excellent: clearly reasoned, actionable and truly helpful

Reply in exactly two lines and nothing else:
Effectiveness: <1-5>
Justification: <one to three sentences>"""
)

#: Bumped when the request or the answer's use changes in a way the prompt text does not show: old
#: cached answers are then not reused.
CACHE_VERSION = 2

#: How a dataset is named in the judge's per-dataset means (the official spellings).
DATASET_NAMES = {"egolife": "EgoLife", "holoassist": "HoloAssist", "captaincook4d": "CaptionCook4D"}


def parse_rating(answer: str | None, field: str) -> int | None:
    """The first ``<field>: <integer>`` in the answer (case-insensitive), capped at 5; None if none.

    >>> parse_rating("Rationality: 4\\nJustification: close.", "Rationality"), parse_rating("I think 4", "Rationality")
    (4, None)
    >>> parse_rating("rationality: 7", "Rationality"), parse_rating("**Rationality:** 4", "Rationality")
    (5, None)
    """
    m = re.search(rf"{field}:\s*(\d+)", answer or "", re.IGNORECASE)
    return min(int(m.group(1)), 5) if m else None


class JudgeCache:
    """sqlite store of raw judge answers, keyed by a hash of the back end's identity (its
    ``cache_identity()``: name, endpoint, model, settings) and the prompt."""

    def __init__(self, path: str | Path | None) -> None:
        self.path = Path(path) if path else None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(str(self.path) if self.path else ":memory:")
        self.db.execute("CREATE TABLE IF NOT EXISTS answers (key TEXT PRIMARY KEY, answer TEXT NOT NULL)")

    @staticmethod
    def key(identity: dict[str, Any], prompt: str) -> str:
        blob = json.dumps([CACHE_VERSION, identity, prompt], sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()

    def get(self, key: str) -> str | None:
        row = self.db.execute("SELECT answer FROM answers WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]

    def put(self, key: str, answer: str) -> None:
        self.db.execute("INSERT OR REPLACE INTO answers VALUES (?, ?)", (key, answer))
        self.db.commit()


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
        self.down = None

    def cache_identity(self) -> dict[str, Any]:
        """The model folder (resolved, with each file's name, size and modification time, so weights
        replaced in place are a new judge) or hub name, and the decoding cap."""
        folder = Path(self.model)
        files = []
        if folder.is_dir():
            folder = folder.resolve()
            files = [
                (f.name, f.stat().st_size, f.stat().st_mtime_ns)
                for f in sorted(folder.iterdir())
                if f.is_file()
            ]
        return {"backend": self.name, "model": str(folder), "files": files, "max_tokens": self.max_tokens}

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


#: The judge's back ends (``--judge-backend``): name -> class (``infra.registry``).
JUDGE_BACKENDS = Registry(
    "judge back end",
    {"http": "infra.chat_client:HttpBackend", "local": "benchmarks.scoring.judge:LocalBackend"},
)


class Judge:
    """Rates pairs with the two rubrics; counts requests, cache hits, failures and unparsable answers."""

    def __init__(
        self, backend: str = "http", cache_path: str | Path | None = None, **backend_config: Any
    ) -> None:
        if backend not in JUDGE_BACKENDS:
            raise KeyError(f"unknown judge back end {backend!r} (known: {sorted(JUDGE_BACKENDS)})")
        self.backend = JUDGE_BACKENDS.get(backend)(**backend_config)
        self.cache = JudgeCache(cache_path)
        self.identity = self.backend.cache_identity()
        self.unparsable = 0
        self.cache_hits = 0
        self.errors = 0

    @property
    def requests_sent(self) -> int:
        return self.backend.requests_sent

    def rate(self, prompt: str, field: str, parse: Callable[[str], int | None] | None = None) -> int | None:
        """The rating of one prompt, or None (a failed request or an unparsable answer, counted).
        ``parse`` reads the answer (default: the first ``<field>: <integer>``, :func:`parse_rating`).
        :class:`infra.chat_client.ChatFatal` (401/403/404) propagates."""
        key = JudgeCache.key(self.identity, prompt)
        answer = self.cache.get(key)
        if answer is None:
            try:
                answer = self.backend.complete(prompt)
            except ChatFatal:
                raise
            except ChatError:
                self.errors += 1
                return None
            self.cache.put(key, answer)
        else:
            self.cache_hits += 1
        rating = parse_rating(answer, field) if parse is None else parse(answer)
        if rating is None:
            self.unparsable += 1
        return rating

    def ratings(
        self, gt_text: str, gt_type: str, pred_text: str, pred_type: str
    ) -> tuple[int | None, int | None]:
        """(Rationality, Effectiveness) of one pair, Rationality asked first."""
        values = dict(gt_text=gt_text, gt_type=gt_type, pred_text=pred_text, pred_type=pred_type)
        return (
            self.rate(RATIONALITY_PROMPT.format(**values), "Rationality"),
            self.rate(EFFECTIVENESS_PROMPT.format(**values), "Effectiveness"),
        )

    def rate_pairs(self, pairs: Iterable[tuple[str, Any, Any]]) -> dict:
        """Means over ``(dataset, gt, prediction)`` pairs (events with ``text``, ``subtype`` and
        ``main_type``), overall and per dataset, and the counts (module docstring)."""
        rated: dict[str, list[tuple[int, int]]] = {}
        total = skipped = unrated = 0
        for dataset, gt, pred in pairs:
            total += 1
            gt_text, pred_text = (gt.text or "").strip(), (pred.text or "").strip()
            if not gt_text or not pred_text:
                skipped += 1
                continue
            r, e = self.ratings(gt_text, _type(gt), pred_text, _type(pred))
            if r is None or e is None:
                unrated += 1
                continue
            rated.setdefault(DATASET_NAMES.get(dataset, dataset), []).append((r, e))
        every = [x for v in rated.values() for x in v]
        return {
            **_means(every),
            "per_dataset": {ds: _means(v) for ds, v in rated.items()},
            "pairs": total,
            "skipped_empty_message": skipped,
            "unrated": unrated,
            "unparsable": self.unparsable,
            "request_errors": self.errors,
            "endpoint_down": getattr(self.backend, "down", None),
            "requests": self.requests_sent,
            "cache_hits": self.cache_hits,
        }


def _type(event: Any) -> str:
    return f"{event.main_type or ''} / {event.subtype}"


def _means(rated: list[tuple[int, int]]) -> dict:
    if not rated:
        return {"rationality": None, "effectiveness": None, "overall": None, "n": 0}
    r = sum(x for x, _ in rated) / len(rated)
    e = sum(y for _, y in rated) / len(rated)
    return {"rationality": r, "effectiveness": e, "overall": (r + e) / 2, "n": len(rated)}


class JudgeScorer:
    """Content scorer ``max(0, (Rationality - 1) / 4)``; an unrated pair raises :class:`Unscorable`."""

    def __init__(self, judge: Judge) -> None:
        self.judge = judge

    def __call__(self, reply: str, target: TargetLike) -> float:
        kind = target.category or "proactive reply"
        prompt = RATIONALITY_PROMPT.format(
            gt_text=target.content, gt_type=kind, pred_text=reply, pred_type=kind
        )
        r = self.judge.rate(prompt, "Rationality")
        if r is None:
            raise Unscorable("the judge could not rate this pair")
        return max(0.0, (r - 1) / 4)


def make_judge(**config: Any) -> JudgeScorer:
    return JudgeScorer(Judge(**config))


#: The judge settings and how each command names them (``eval.score`` options, ``eval.run`` keys).
SETTING_NAMES = {
    "eval.score": {"url": "--judge-url", "model": "--judge-model", "timeout": "--judge-timeout"},
    "eval.run": {
        "url": "benchmark.judge_url",
        "model": "benchmark.judge_model",
        "timeout": "benchmark.judge_timeout",
    },
}


def config_from_args(args: Any, command: str = "eval.score") -> dict[str, Any]:
    """Judge config from ``eval.score``'s options or :class:`benchmarks.scoring.ScoreConfig` (the key
    itself stays in the environment); a missing URL or model, or a bad timeout, raises
    :class:`ValueError` naming the option of ``command``."""
    names = SETTING_NAMES[command]
    backend = getattr(args, "judge_backend", "http")
    model = getattr(args, "judge_model", None)
    if backend not in JUDGE_BACKENDS:
        raise ValueError(f"unknown judge back end {backend!r} (known: {', '.join(sorted(JUDGE_BACKENDS))})")
    if not model:
        raise ValueError(f"the judge needs a model: set {names['model']}")
    cache = getattr(args, "judge_cache", None) or str(
        Path.home() / ".cache" / "proactive_vlm" / "judge.sqlite"
    )
    config: dict[str, Any] = {"backend": backend, "cache_path": cache, "model": model}
    if backend == "http":
        url = getattr(args, "judge_url", None)
        timeout = getattr(args, "judge_timeout", 60.0)
        if not url:
            raise ValueError(
                f"the http judge needs the endpoint: set {names['url']} (e.g. http://127.0.0.1:8000/v1)"
            )
        if not (isinstance(timeout, (int, float)) and timeout > 0 and timeout != float("inf")):
            raise ValueError(f"{names['timeout']} must be a positive number of seconds, got {timeout!r}")
        config.update(
            base_url=url, key_env=getattr(args, "judge_key_env", "JUDGE_API_KEY"), timeout_s=float(timeout)
        )
    return config


def judge_matched_pairs(pairs: list, args: Any) -> dict:
    """Rate EgoServe's matched ``(dataset, gt, prediction)`` pairs with the configured judge."""
    return Judge(**config_from_args(args)).rate_pairs(pairs)
