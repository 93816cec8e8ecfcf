"""Multi-scale temporal memory: clip captions, activity and session summaries, each densely indexed.

Clip-level captions (given, as in ProPerMem histories, or produced by a captioner) arrive in time
order. Consecutive clips form an *activity* segment, closed by a gap longer than
``activity_gap_s`` or after ``activity_max_clips`` clips; activities form a *session*, closed by a
new day or a gap longer than ``session_gap_s``. Only a segment that has just closed is summarized
(by the summarizer back end), so the cost of a new clip does not grow with the stored history.
A summary is stamped with the time of its last clip: it is visible to a query at time ``now``
only when everything it summarizes lies at or before ``now``.

Every level lives in a :class:`DenseIndex`: a numpy matrix of unit-norm embeddings grown by
doubling (amortized O(1) append, never rebuilt), rows kept in time order so that "at or before
now" is a prefix found by binary search; top-k is one matrix-vector product over that slice.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

LEVELS = ("clip", "activity", "session")
DAY_S = 86400.0


@dataclass(frozen=True)
class MemoryItem:
    """One memory entry: a clip caption or a summary over ``[start, end]`` (seconds, record axis)."""

    key: str
    level: str
    start: float
    end: float
    text: str

    @property
    def time(self) -> float:
        """When the entry became known: the end of what it covers."""
        return self.end


@dataclass(frozen=True)
class Hit:
    """A retrieved entry: its key, similarity / retrieval score, and time."""

    key: str
    score: float
    time: float


class DenseIndex:
    """Time-sorted matrix of unit-norm vectors with amortized appends and past-restricted top-k."""

    def __init__(self, dim: int, capacity: int = 1024) -> None:
        self.dim = dim
        self._vectors = np.zeros((capacity, dim), np.float32)
        self._times = np.zeros(capacity, np.float64)
        self.keys: list[str] = []

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def times(self) -> np.ndarray:
        return self._times[: len(self.keys)]

    def _reserve(self, n: int) -> None:
        if n <= len(self._times):
            return
        cap = max(n, 2 * len(self._times))
        vectors = np.zeros((cap, self.dim), np.float32)
        times = np.zeros(cap, np.float64)
        vectors[: len(self.keys)] = self._vectors[: len(self.keys)]
        times[: len(self.keys)] = self._times[: len(self.keys)]
        self._vectors, self._times = vectors, times

    def add(self, times: np.ndarray | list[float], vectors: np.ndarray, keys: list[str]) -> None:
        """Append rows. Rows older than the newest stored one are merged in by time (an O(n)
        rebuild, only for out-of-order input; streams append in order)."""
        times = np.asarray(times, np.float64)
        vectors = np.asarray(vectors, np.float32).reshape(len(keys), self.dim)
        order = np.argsort(times, kind="stable")
        times, vectors, keys = times[order], vectors[order], [keys[i] for i in order]
        n = len(self.keys)
        self._reserve(n + len(keys))
        if n and len(keys) and times[0] < self._times[n - 1]:
            all_t = np.concatenate([self._times[:n], times])
            all_v = np.concatenate([self._vectors[:n], vectors])
            all_k = self.keys + keys
            o = np.argsort(all_t, kind="stable")
            self._times[: len(o)], self._vectors[: len(o)] = all_t[o], all_v[o]
            self.keys = [all_k[i] for i in o]
            return
        self._times[n : n + len(keys)] = times
        self._vectors[n : n + len(keys)] = vectors
        self.keys.extend(keys)

    def span(self, lo: float, hi: float) -> tuple[int, int]:
        """Row range [a, b) of the entries with lo <= time <= hi (binary search)."""
        t = self.times
        return int(np.searchsorted(t, lo, "left")), int(np.searchsorted(t, hi, "right"))

    def search(self, query: np.ndarray, k: int, hi: float, lo: float = -math.inf) -> list[Hit]:
        """The k rows most similar to ``query`` (cosine) among those with lo <= time <= hi."""
        a, b = self.span(lo, hi)
        if b <= a or k <= 0:
            return []
        scores = self._vectors[a:b] @ np.asarray(query, np.float32)
        top = (
            np.argpartition(-scores, min(k, len(scores)) - 1)[:k]
            if len(scores) > k
            else np.arange(len(scores))
        )
        top = top[np.argsort(-scores[top], kind="stable")]
        return [Hit(self.keys[a + i], float(scores[i]), float(self._times[a + i])) for i in top]


class TemporalMemory:
    """Clip / activity / session entries with their dense indexes (see the module docstring)."""

    def __init__(self, embedder, summarizer, cfg) -> None:
        self.embedder, self.summarizer, self.cfg = embedder, summarizer, cfg
        self.indexes = {level: DenseIndex(embedder.dim) for level in LEVELS}
        self.items: dict[str, MemoryItem] = {}
        self._activity: list[MemoryItem] = []
        self._session: list[MemoryItem] = []
        self.summaries_made = 0

    def add_clips(self, clips: list[tuple[str, float, str]], vectors: np.ndarray | None = None) -> None:
        """Add clip captions ``(key, time, text)`` (embedded in one batch unless ``vectors`` is given),
        then summarize the segments they close."""
        if not clips:
            return
        order = sorted(range(len(clips)), key=lambda i: clips[i][1])
        clips = [clips[i] for i in order]
        vectors = self.embedder.encode([c[2] for c in clips]) if vectors is None else vectors[order]
        self.indexes["clip"].add([c[1] for c in clips], vectors, [c[0] for c in clips])
        closed: list[MemoryItem] = []
        for key, t, text in clips:
            item = MemoryItem(key, "clip", t, t, text)
            self.items[key] = item
            closed += self._advance(item)
        self._index_summaries(closed)

    def _advance(self, item: MemoryItem) -> list[MemoryItem]:
        """Segment bookkeeping for one new clip; returns the summaries it closes (O(segment))."""
        closed = []
        last = self._activity[-1] if self._activity else None
        new_session = last is not None and (
            item.start - last.end > self.cfg.session_gap_s
            or math.floor(item.start / DAY_S) != math.floor(last.end / DAY_S)
        )
        if last is not None and (
            new_session
            or item.start - last.end > self.cfg.activity_gap_s
            or len(self._activity) >= self.cfg.activity_max_clips
        ):
            closed.append(self._summarize("activity", self._activity))
            self._session.append(closed[-1])
            self._activity = []
        if new_session and self._session:
            closed.append(self._summarize("session", self._session))
            self._session = []
        self._activity.append(item)
        return closed

    def _summarize(self, level: str, parts: list[MemoryItem]) -> MemoryItem:
        text = self.summarizer.summarize([p.text for p in parts], level)
        self.summaries_made += 1
        return MemoryItem(f"{level}:{parts[0].key}", level, parts[0].start, parts[-1].end, text)

    def _index_summaries(self, items: list[MemoryItem]) -> None:
        if not items:
            return
        vectors = self.embedder.encode([i.text for i in items])
        for level in LEVELS[1:]:
            rows = [j for j, i in enumerate(items) if i.level == level]
            if rows:
                self.indexes[level].add(
                    [items[j].time for j in rows], vectors[rows], [items[j].key for j in rows]
                )
        self.items.update((i.key, i) for i in items)

    def search(
        self, query: np.ndarray, now: float, lo: float = -math.inf, k: int = 5, k_summary: int = 2
    ) -> dict[str, list[Hit]]:
        """Top hits per level among entries known at ``now`` (and not older than ``lo``)."""
        return {
            level: self.indexes[level].search(query, k if level == "clip" else k_summary, now, lo)
            for level in LEVELS
        }
