"""Retrieval at a step: relative scopes, the three retrievers of a store, merge/dedup, evidence block.

    store = MemoryStore(cfg, embedder, backend)
    store.add_captions([(key, time, text), ...])          # batch; or one at a time as clips arrive
    r = store.retrieve("I walk to the boiler", now=t)      # only entries with time <= t
    block = evidence_block(store, r, cfg)                   # "[day -3 08:14:00] ..." lines

Temporal restriction: every retriever takes ``hi = now`` (and ``lo`` from a relative scope such as
"last hour", resolved to absolute record-axis seconds by :func:`resolve_scope`); nothing stamped
later than the step is ever returned. Merging (registry :data:`MERGERS`): ``interleave`` takes
rank 1 of each retriever, then rank 2, ..., skipping keys already taken (each retriever's best
evidence reaches the block); ``rrf`` is reciprocal-rank fusion (sum of 1 / (60 + rank)).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from engine.memory.backends import format_time
from engine.memory.graph import KnowledgeGraph
from engine.memory.temporal import DAY_S, Hit, TemporalMemory
from engine.memory.visual import VisualArchive
from infra.registry import Registry

UNITS = {"second": 1.0, "minute": 60.0, "hour": 3600.0, "day": DAY_S, "week": 7 * DAY_S, "month": 30 * DAY_S}
NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "ten": 10}


def _day_start(now: float) -> float:
    return math.floor(now / DAY_S) * DAY_S


def _last_n(m: re.Match, now: float) -> tuple[float, float]:
    n = m.group(1)
    count = 1 if n is None else (float(n) if n[0].isdigit() else NUMBERS[n])
    return now - count * UNITS[m.group(2)], now


#: Relative scope phrases -> absolute [lo, hi] on the record axis (``now`` in seconds).
SCOPES: list[tuple[re.Pattern, Callable[[re.Match, float], tuple[float, float]]]] = [
    (
        re.compile(
            r"\b(?:last|past|previous)\s+(?:(\d+(?:\.\d+)?|a|an|one|two|three|four|five|six|ten)\s+)?"
            r"(second|minute|hour|day|week|month)s?\b"
        ),
        _last_n,
    ),
    (re.compile(r"\byesterday\b"), lambda m, now: (_day_start(now) - DAY_S, _day_start(now))),
    (re.compile(r"\btoday\b"), lambda m, now: (_day_start(now), now)),
    (re.compile(r"\bthis morning\b"), lambda m, now: (_day_start(now), _day_start(now) + 12 * 3600)),
    (re.compile(r"\bthis (?:afternoon|evening)\b"), lambda m, now: (_day_start(now) + 12 * 3600, now)),
]


def resolve_scope(text: str, now: float) -> tuple[float, float]:
    """The absolute interval [lo, hi] a query's relative scope names (default: all the past);
    always ``hi <= now``.

    >>> resolve_scope("what did I do in the last hour?", 7200.0)
    (3600.0, 7200.0)
    >>> resolve_scope("where did I put it yesterday", 2 * 86400 + 100.0)
    (86400.0, 172800.0)
    >>> resolve_scope("remind me", 5.0)
    (-inf, 5.0)
    """
    for pattern, fn in SCOPES:
        m = pattern.search(text.lower())
        if m:
            lo, hi = fn(m, now)
            return lo, min(hi, now)
    return -math.inf, now


def interleave(lists: list[list[Hit]], k: int) -> list[Hit]:
    """Round-robin over ranked lists, skipping keys already taken."""
    out, seen = [], set()
    for rank in range(max((len(x) for x in lists), default=0)):
        for hits in lists:
            if rank < len(hits) and hits[rank].key not in seen:
                seen.add(hits[rank].key)
                out.append(hits[rank])
    return out[:k]


def rrf(lists: list[list[Hit]], k: int, c: float = 60.0) -> list[Hit]:
    """Reciprocal-rank fusion: score(key) = sum over lists of 1 / (c + rank)."""
    score: dict[str, float] = {}
    first: dict[str, Hit] = {}
    for hits in lists:
        for rank, h in enumerate(hits, 1):
            score[h.key] = score.get(h.key, 0.0) + 1.0 / (c + rank)
            first.setdefault(h.key, h)
    keys = sorted(score, key=lambda key: -score[key])[:k]
    return [Hit(key, score[key], first[key].time) for key in keys]


#: How ranked lists merge (config ``memory.merge``): name -> ``fn(lists, k)`` (``infra.registry``).
MERGERS = Registry(
    "merger",
    {"interleave": "engine.memory.retrieval:interleave", "rrf": "engine.memory.retrieval:rrf"},
)


@dataclass
class Retrieval:
    """One step's retrieval: each retriever's hits, the merged clip-level hits, the scope."""

    now: float
    lo: float
    temporal: list[Hit] = field(default_factory=list)
    summaries: list[Hit] = field(default_factory=list)
    graph: list[Hit] = field(default_factory=list)
    visual: list[Hit] = field(default_factory=list)
    merged: list[Hit] = field(default_factory=list)

    def all_hits(self) -> list[Hit]:
        return self.temporal + self.summaries + self.graph + self.visual + self.merged


class MemoryStore:
    """One person's (or stream's) three memories; see the module docstring."""

    def __init__(self, cfg, embedder, backend, visual_dim: int | None = None) -> None:
        self.cfg, self.embedder, self.backend = cfg, embedder, backend
        self.temporal = TemporalMemory(embedder, backend, cfg)
        self.graph = KnowledgeGraph(postings_cap=cfg.graph_postings_cap)
        self.visual = VisualArchive(visual_dim) if visual_dim else None
        self._query_cache: dict[str, tuple[np.ndarray, list[str]]] = {}

    def add_captions(
        self,
        clips: list[tuple[str, float, str]],
        vectors: np.ndarray | None = None,
        keyframes: dict[str, np.ndarray] | None = None,
    ) -> None:
        """Add clip captions ``(key, time, text)`` to all three memories (batch-embedded unless
        ``vectors`` is given); ``keyframes`` maps keys to visual vectors for the archive."""
        order = sorted(range(len(clips)), key=lambda i: clips[i][1])
        clips = [clips[i] for i in order]
        self.temporal.add_clips(clips, None if vectors is None else np.asarray(vectors)[order])
        for key, t, text in clips:
            self.graph.add_event(key, t, self.backend.extract(text))
        if keyframes and self.visual is not None:
            have = [c for c in clips if c[0] in keyframes]
            if have:
                self.visual.add(
                    [c[0] for c in have],
                    [c[1] for c in have],
                    np.stack([keyframes[c[0]] for c in have]),
                    [c[2] for c in have],
                )

    def add_frame(self, key: str, time: float, vector: np.ndarray, caption: str = "") -> None:
        """Archive one observed keyframe (pooled features), optionally with its caption."""
        if self.visual is not None:
            self.visual.add([key], [time], vector[None], [caption])

    def _query(self, text: str) -> tuple[np.ndarray, list[str]]:
        if text not in self._query_cache:
            if len(self._query_cache) > 256:
                self._query_cache.clear()
            self._query_cache[text] = (self.embedder.encode([text])[0], self.backend.extract(text).entities)
        return self._query_cache[text]

    def retrieve(
        self,
        query: str,
        now: float,
        visual_query: np.ndarray | None = None,
        k: int | None = None,
        scope_text: str = "",
        recent_s: float = 0.0,
    ) -> Retrieval:
        """The three retrievers over entries with lo <= time <= now - recent_s, and their merge.

        The scope comes from ``scope_text`` and the query (e.g. an instruction saying "in the last
        hour"); ``recent_s`` leaves out the current observation (the query's own captions and
        frames), so the memory answers with what is *not* already in view."""
        k = k or self.cfg.top_k
        lo, hi = resolve_scope(f"{scope_text} {query}", now)
        hi = min(hi, now - recent_s)
        r = Retrieval(now=hi, lo=lo)
        if query.strip():
            vec, entities = self._query(query)
            levels = self.temporal.search(vec, hi, lo, k)
            r.temporal = levels["clip"]
            r.summaries = levels["activity"][:1] + levels["session"][:1]
            r.graph = self.graph.search(entities, hi, lo, k)
        if visual_query is not None and self.visual is not None:
            r.visual = self.visual.search(visual_query, hi, lo, k)
        r.merged = MERGERS.get(self.cfg.merge)([r.temporal, r.graph, r.visual], k)
        return r

    def text(self, key: str) -> str:
        item = self.temporal.items.get(key)
        if item is not None:
            return item.text
        return self.visual.captions.get(key, "") if self.visual is not None else ""


def evidence_block(store: MemoryStore, r: Retrieval, max_items: int, max_chars: int) -> tuple[str, tuple]:
    """The evidence text (one ``[time] text`` line per item, summaries first, captions in time order,
    near-duplicate texts dropped) and its identity (the keys shown), to detect a change."""
    lines, shown, texts = [], [], set()
    for h in r.summaries[:1]:
        item = store.temporal.items[h.key]
        lines.append(
            f"[{item.level} {format_time(item.start)} - {format_time(item.end)}] {item.text[:max_chars]}"
        )
        shown.append(h.key)
    for h in sorted(r.merged, key=lambda h: h.time):
        if len(lines) >= max_items:
            break
        text = store.text(h.key) or "(a moment that looks like now)"
        norm = " ".join(text.lower().split())
        if norm in texts:
            continue
        texts.add(norm)
        lines.append(f"[{format_time(h.time)}] {text[:max_chars]}")
        shown.append(h.key)
    return "\n".join(lines), tuple(shown)
