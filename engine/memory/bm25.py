"""Okapi BM25 over captions: the lexical baseline of the recall table (written here, no dependency).

``score(q, d) = sum_t idf(t) * tf(t, d) * (k1 + 1) / (tf(t, d) + k1 * (1 - b + b * |d| / avgdl))``,
``idf(t) = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))``; terms are lower-cased words without stop
words. Documents are kept in time order so the past restriction is a prefix, as in the dense index.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left, bisect_right
from collections import Counter, defaultdict

from engine.memory.backends import STOP
from engine.memory.temporal import Hit

WORD = re.compile(r"[a-z0-9']+")


def terms(text: str) -> list[str]:
    return [w for w in WORD.findall(text.lower()) if w not in STOP]


class BM25:
    """An inverted index of time-sorted documents; ``search`` scores only lo <= time <= hi."""

    def __init__(self, docs: list[tuple[str, float, str]], k1: float = 1.5, b: float = 0.75) -> None:
        docs = sorted(docs, key=lambda d: d[1])
        self.keys = [d[0] for d in docs]
        self.times = [d[1] for d in docs]
        self.k1, self.b = k1, b
        self.lengths = []
        self.postings: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for i, (_, _, text) in enumerate(docs):
            tf = Counter(terms(text))
            self.lengths.append(sum(tf.values()))
            for t, n in tf.items():
                self.postings[t].append((i, n))
        self.avgdl = sum(self.lengths) / max(len(self.lengths), 1)

    def search(self, query: str, k: int, hi: float, lo: float = -math.inf) -> list[Hit]:
        a, z = bisect_left(self.times, lo), bisect_right(self.times, hi)
        n = z - a
        scores: dict[int, float] = defaultdict(float)
        for t in set(terms(query)):
            post = [(i, tf) for i, tf in self.postings.get(t, ()) if a <= i < z]
            if not post:
                continue
            idf = math.log(1.0 + (n - len(post) + 0.5) / (len(post) + 0.5))
            for i, tf in post:
                norm = tf + self.k1 * (1 - self.b + self.b * self.lengths[i] / self.avgdl)
                scores[i] += idf * tf * (self.k1 + 1) / norm
        top = sorted(scores, key=lambda i: (-scores[i], -self.times[i]))[:k]
        return [Hit(self.keys[i], scores[i], self.times[i]) for i in top]
