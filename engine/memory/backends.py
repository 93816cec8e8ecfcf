"""Summarizer and entity/relation extractor back ends of the memory, with their prompts.

Registry :data:`BACKENDS` (config ``memory.backend``, keywords ``memory.backend_options``):

- ``rule``: deterministic, no model. Summary = the segment's span, its most frequent entities and
  its first and last captions (extractive). Entities = capitalized names inside a sentence and the
  head nouns (and multi-word phrases) after determiners/possessives; relations = ``X is my Y`` /
  ``X is the Y`` (an alias edge) and ``X, my Y`` appositions. The default of the tests.
- ``model``: the evaluated Qwen3-VL (tiny or real) in text mode: the prompt as one user turn,
  greedy ``model.generate`` until ``<|im_end|>``.
- ``http``: the judge's OpenAI-compatible endpoint (``infra.chat_client.HttpBackend``).

The text back ends answer :data:`SUMMARY_PROMPT` and :data:`EXTRACT_PROMPT`; an answer that does
not parse (empty summary; no ``Entities:`` line) falls back to the rule back end for that item and
is counted in ``fallbacks`` (an untrained tiny model mostly falls back; a real one should not).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from infra.registry import Registry

SUMMARY_PROMPT = """Summarize what happened in these timestamped first-person captions of one {level} \
in a single sentence of at most 40 words. Keep the names of people, objects and places, and every \
instruction, warning or promise.

Captions:
{captions}

Summary:"""

EXTRACT_PROMPT = """List the people, objects and places named in this first-person caption, and the \
relations between them. Answer in exactly two lines and nothing else:
Entities: <entity>; <entity>; ...
Relations: <entity> | <relation> | <entity>; ...

Caption: {caption}"""

STOP = frozenset(
    """a an the my your his her their our its this that these those some any every each another i me we
    you he she they it to of in on at by for with from into onto over under near next then and or but
    so while as after before again also just very is are was were be been am do does did not no up out
    off down back there here below above about what when where who which how one two all both few more most other""".split()
)
DETERMINERS = frozenset("a an the my your his her their our this that some another".split())
TOKEN = re.compile(r"[A-Za-z][A-Za-z'-]*|[.,;:!?]")


@dataclass
class Extraction:
    """Entities (lower case) and relations ``(a, relation, b)`` of one caption."""

    entities: list[str] = field(default_factory=list)
    relations: list[tuple[str, str, str]] = field(default_factory=list)


def rule_extract(text: str) -> Extraction:
    """Names, determiner-headed noun phrases and alias relations of a caption.

    >>> e = rule_extract("Marco is my landlord and he fixed the old boiler in the hallway.")
    >>> e.entities, e.relations
    (['marco', 'landlord', 'old', 'boiler', 'old boiler', 'hallway'], [('marco', 'is', 'landlord')])
    """
    toks = TOKEN.findall(text)
    found: list[str] = []
    relations = []
    i = 0
    while i < len(toks):
        tok, low = toks[i], toks[i].lower()
        if tok[0].isupper() and low not in STOP:
            found.append(low)
            if i + 3 < len(toks) and toks[i + 1] == "is" and toks[i + 2] in ("my", "the", "our"):
                relations.append((low, "is", toks[i + 3].lower()))
            if i + 3 < len(toks) and toks[i + 1] == "," and toks[i + 2] == "my":
                relations.append((low, "is", toks[i + 3].lower()))
        elif low in DETERMINERS:
            run = []
            j = i + 1
            while j < len(toks) and toks[j][0].isalpha() and toks[j].lower() not in STOP and len(run) < 3:
                run.append(toks[j].lower())
                j += 1
            if run:  # every word of the phrase (the head noun is not always last) and the phrase
                found += run + ([" ".join(run)] if len(run) > 1 else [])
            i = j - 1 if run else i
        i += 1
    return Extraction(list(dict.fromkeys(found)), relations)


def format_time(t: float) -> str:
    """``day D HH:MM:SS`` of a record-axis time (days may be negative, before the clip).

    >>> format_time(-86400 + 3723.0), format_time(90061.0)
    ('day -1 01:02:03', 'day 1 01:01:01')
    """
    day, sec = divmod(int(round(t)), 86400)
    return f"day {day} {sec // 3600:02d}:{sec % 3600 // 60:02d}:{sec % 60:02d}"


class RuleBackend:
    """Deterministic extractive summaries and rule-based extraction (see the module docstring)."""

    name = "rule"

    def __init__(self, **_: Any) -> None:
        self.fallbacks = 0

    def summarize(self, texts: list[str], level: str) -> str:
        counts = Counter(e for t in texts for e in rule_extract(t).entities if " " not in e)
        top = ", ".join(e for e, _ in counts.most_common(6))
        first, last = texts[0], texts[-1]
        body = first if len(texts) == 1 else f"{first} ... {last}"
        return f"{level} of {len(texts)} parts about {top}: {body}"

    def extract(self, text: str) -> Extraction:
        return rule_extract(text)


class TextBackend(RuleBackend):
    """Prompted summaries/extraction through ``complete(prompt) -> str``; rule fallback when unparsable."""

    def complete(self, prompt: str) -> str:  # pragma: no cover - overridden
        raise NotImplementedError

    def summarize(self, texts: list[str], level: str) -> str:
        answer = self.complete(
            SUMMARY_PROMPT.format(level=level, captions="\n".join(f"- {t}" for t in texts))
        )
        line = answer.strip().splitlines()[0].strip() if answer.strip() else ""
        if not line:
            self.fallbacks += 1
            return super().summarize(texts, level)
        return line

    def extract(self, text: str) -> Extraction:
        return parse_extraction(self.complete(EXTRACT_PROMPT.format(caption=text))) or self._fallback(text)

    def _fallback(self, text: str) -> Extraction:
        self.fallbacks += 1
        return rule_extract(text)


def parse_extraction(answer: str) -> Extraction | None:
    """The two answer lines of :data:`EXTRACT_PROMPT`, or None when there is no ``Entities:`` line.

    >>> parse_extraction("Entities: Marco; boiler\\nRelations: Marco | is | landlord")
    Extraction(entities=['marco', 'boiler'], relations=[('marco', 'is', 'landlord')])
    """
    ents, rels, seen = [], [], False
    for line in answer.splitlines():
        head, _, rest = line.partition(":")
        if head.strip().lower() == "entities":
            seen = True
            ents = [e.strip().lower() for e in rest.split(";") if e.strip()]
        elif head.strip().lower() == "relations":
            for part in rest.split(";"):
                bits = [b.strip().lower() for b in part.split("|")]
                if len(bits) == 3 and all(bits):
                    rels.append((bits[0], bits[1], bits[2]))
    return Extraction(list(dict.fromkeys(ents)), rels) if seen else None


class ModelBackend(TextBackend):
    """The Qwen3-VL being evaluated, in text mode (greedy, one user turn)."""

    name = "model"

    def __init__(self, model, processor, max_new_tokens: int = 48, **_: Any) -> None:
        super().__init__()
        self.model, self.tokenizer, self.max_new_tokens = model, processor.tokenizer, max_new_tokens
        self.im_end = self.tokenizer.convert_tokens_to_ids("<|im_end|>")

    def complete(self, prompt: str) -> str:
        import torch

        tok = self.tokenizer
        # the prompt (history lines, questions) is text: a special token's string in it stays text
        prompt_ids = tok(f"user\n{prompt}", add_special_tokens=False, split_special_tokens=True)["input_ids"]
        end = tok("<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
        ids = torch.tensor([[tok.convert_tokens_to_ids("<|im_start|>"), *prompt_ids, *end]])
        device = next(self.model.parameters()).device
        with torch.no_grad():
            out = self.model.generate(
                input_ids=ids.to(device),
                attention_mask=torch.ones_like(ids).to(device),
                max_new_tokens=self.max_new_tokens,
                do_sample=False,
                eos_token_id=self.im_end,
                pad_token_id=self.tokenizer.pad_token_id or self.im_end,
            )
        return self.tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)


class HttpTextBackend(TextBackend):
    """The judge's OpenAI-compatible chat-completions endpoint (``base_url``, ``model``, ``key_env``,
    ``timeout_s``: the total deadline of one request, 60 s as ``--judge-timeout``). A request that
    gets no usable answer (after the client's retries, or at once when the endpoint is down) is
    counted in ``request_errors`` and the rule back end answers instead (counted in ``fallbacks``);
    401/403/404 stop the run with the status (:class:`infra.chat_client.ChatFatal`)."""

    name = "http"

    def __init__(self, base_url: str, model: str, max_tokens: int = 128, **kwargs: Any) -> None:
        from infra.chat_client import HttpBackend

        super().__init__()
        self.client = HttpBackend(base_url=base_url, model=model, max_tokens=max_tokens, **kwargs)
        self.request_errors = 0

    def complete(self, prompt: str) -> str:
        from infra.chat_client import ChatError, ChatFatal

        try:
            return self.client.complete(prompt)
        except ChatFatal:
            raise
        except ChatError:
            self.request_errors += 1
            return ""  # an empty answer falls back to the rule back end


def make_rule(vlm=None, processor=None, **kw: Any) -> RuleBackend:
    return RuleBackend(**kw)


def make_model(vlm=None, processor=None, **kw: Any) -> RuleBackend:
    return ModelBackend(vlm, processor, **kw)


def make_http(vlm=None, processor=None, **kw: Any) -> RuleBackend:
    return HttpTextBackend(**kw)


#: The memory back ends (config ``memory.backend``): name -> factory (``infra.registry``).
BACKENDS = Registry(
    "memory back end",
    {
        "rule": "engine.memory.backends:make_rule",
        "model": "engine.memory.backends:make_model",
        "http": "engine.memory.backends:make_http",
    },
)


def get_backend(name: str, vlm=None, processor=None, **options: Any) -> RuleBackend:
    """The back end ``name``; ``vlm``/``processor``: the evaluated model (for ``model``); ``options``:
    its keywords (``http``: ``base_url``, ``model`` = the endpoint's model name, ``key_env``,
    ``timeout_s``)."""
    if name not in BACKENDS:
        raise KeyError(f"unknown memory back end {name!r} (known: {', '.join(sorted(BACKENDS))})")
    return BACKENDS.get(name)(vlm=vlm, processor=processor, **options)
