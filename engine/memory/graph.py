"""Evolving knowledge graph: entities and relations from captions, merged as the stream goes.

Two structures, both append-only and time-stamped so that retrieval at ``now`` sees only the past:

- a ``networkx`` multigraph of entity-entity relations (``marco --is--> landlord``), each edge
  carrying the time and the caption it came from;
- per-entity *postings*: the time-sorted events (caption keys) that mention the entity, the
  mention edges of the graph kept as arrays so that "mentions at or before now" is a binary search
  and a new caption costs O(its entities), whatever the history size.

Retrieval expands the query's entities one hop along relations (weight ``relation_weight``),
gathers the events that mention any expanded entity (for an entity mentioned more than
``postings_cap`` times, only its most recent ``postings_cap`` mentions: the cost stays bounded as
days accumulate) and scores each event by the idf-weighted sum of the expanded entities it
mentions: an event that names both the current object and a person reached through a relation
outranks the many events that share one common word with the query.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right

import networkx as nx

from engine.memory.backends import Extraction
from engine.memory.temporal import Hit


class KnowledgeGraph:
    """Entities, relations and mention postings (see the module docstring)."""

    def __init__(self, postings_cap: int = 512, relation_weight: float = 0.8) -> None:
        self.relations = nx.MultiGraph()
        self.postings: dict[str, tuple[list[float], list[str]]] = {}
        self.event_entities: dict[str, frozenset[str]] = {}
        self.event_times: list[float] = []
        self.postings_cap, self.relation_weight = postings_cap, relation_weight

    def __len__(self) -> int:
        return len(self.event_entities)

    def add_event(self, key: str, time: float, extraction: Extraction) -> None:
        """Merge one caption's entities and relations (events arrive in time order)."""
        ents = set(extraction.entities)
        for a, rel, b in extraction.relations:
            self.relations.add_edge(a, b, relation=rel, time=time, source=key)
            ents |= {a, b}
        self.event_entities[key] = frozenset(ents)
        self.event_times.append(time)
        for e in ents:
            times, keys = self.postings.setdefault(e, ([], []))
            if times and time < times[-1]:  # out of order: insert (rare)
                j = bisect_right(times, time)
                times.insert(j, time)
                keys.insert(j, key)
            else:
                times.append(time)
                keys.append(key)

    def _df(self, entity: str, lo: float, now: float) -> int:
        times = self.postings.get(entity, ([], []))[0]
        return bisect_right(times, now) - bisect_left(times, lo)

    def expand(self, entities: list[str], now: float) -> dict[str, float]:
        """Query entities (weight 1) and their relation neighbours known at ``now`` (weight < 1)."""
        weights = {e: 1.0 for e in entities if e in self.postings}
        for e in entities:
            if e not in self.relations:
                continue
            for _, nb, data in self.relations.edges(e, data=True):
                if data["time"] <= now and nb not in weights:
                    weights[nb] = self.relation_weight
        return weights

    def search(self, entities: list[str], now: float, lo: float = -math.inf, k: int = 5) -> list[Hit]:
        """Events at lo <= time <= now ranked by idf-weighted entity overlap (ties: most recent)."""
        weights = self.expand(entities, now)
        n_past = bisect_right(self.event_times, now) if self.event_times else 0
        idf = {}
        for e in weights:
            df = self._df(e, lo, now)
            if df:
                idf[e] = math.log(1.0 + n_past / df)
        candidates: dict[str, float] = {}
        for e in idf:
            times, keys = self.postings[e]
            a, b = bisect_left(times, lo), bisect_right(times, now)
            for j in range(max(a, b - self.postings_cap), b):
                candidates.setdefault(keys[j], times[j])
        scored = []
        for key, t in candidates.items():
            ents = self.event_entities[key]
            score = sum(weights[e] * idf[e] for e in idf if e in ents)
            scored.append(Hit(key, score, t))
        scored.sort(key=lambda h: (-h.score, -h.time))
        return scored[:k]
