"""Recipe order for CaptainCook4D recordings: which steps come after a skipped one.

The release's step lists are in annotation order, not recipe order (skipped steps are mostly
appended at the end), so the order comes from elsewhere, per recording:

- ``task_graph``: the ``CaptainCook4D/annotations`` repository's ``task_graphs/<recipe>.json``,
  ``{"steps": {"0": "START", "1": "<Verb>-<rest>", ..., "<n>": "END"}, "edges": [[pred, succ], ...]}``
  with local node keys. A recipe's graph is the one whose node texts cover most of the step
  descriptions of that recipe's recordings (no name table needed); a step id maps to the nodes
  whose text is one of its descriptions. B follows A when B descends from A in the DAG. A recording
  with a step no node matches falls back to ``consensus``.
- ``consensus``: each step id's mean relative position (0 = first, 1 = last) among the performed
  steps of all recordings of the recipe in the file; B follows A when B's mean is later. For a
  step never performed anywhere (no position), the steps listed after it in the recording follow it.
- ``list``: the recording's own list order.

``recipe_orders(..., "auto", graphs)`` uses the graphs when given and falls back per recording.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from data_builders.records import RecordError


class _Step(Protocol):
    index: int
    step_id: str


class RecipeOrder:
    """Order of one recording's steps: ``follows(b, a)`` and a sort ``rank``."""

    kind = "list"

    def follows(self, later: _Step, earlier: _Step) -> bool:
        """Does ``later`` come after ``earlier`` in the recipe? (list order here)"""
        return later.index > earlier.index

    def rank(self, step: _Step) -> tuple[float, int]:
        return (float(step.index), step.index)


class ConsensusOrder(RecipeOrder):
    kind = "consensus"

    def __init__(self, position: dict[str, float]):
        self.position = position

    def follows(self, later: _Step, earlier: _Step) -> bool:
        a, b = self.position.get(earlier.step_id), self.position.get(later.step_id)
        if a is None:  # never performed in the file: its list position is the only hint
            return later.index > earlier.index
        return b is not None and b > a

    def rank(self, step: _Step) -> tuple[float, int]:
        return (self.position.get(step.step_id, math.inf), step.index)


class GraphOrder(RecipeOrder):
    kind = "task_graph"

    def __init__(self, descendants: dict[str, set[str]], topo: dict[str, int]):
        self.descendants = descendants
        self.topo = topo

    def follows(self, later: _Step, earlier: _Step) -> bool:
        return later.step_id != earlier.step_id and later.step_id in self.descendants.get(
            earlier.step_id, set()
        )

    def rank(self, step: _Step) -> tuple[float, int]:
        return (float(self.topo.get(step.step_id, math.inf)), step.index)


def _times(step: Any) -> tuple[float, float] | None:
    try:
        start, end = float(step["start_time"]), float(step["end_time"])
    except (KeyError, TypeError, ValueError, OverflowError):
        return None
    return (start, end) if start >= 0 and end >= 0 and math.isfinite(start + end) else None


def _recordings(data: Sequence[Any]) -> dict[str, list[tuple[str, list[dict]]]]:
    """activity id -> [(recording id, step list)] of the well-formed recordings."""
    out: dict[str, list[tuple[str, list[dict]]]] = defaultdict(list)
    for rec in data:
        if isinstance(rec, dict) and isinstance(rec.get("step_annotations"), list):
            steps = [s for s in rec["step_annotations"] if isinstance(s, dict) and "step_id" in s]
            out[str(rec.get("activity_id"))].append((str(rec.get("recording_id")), steps))
    return out


def consensus_positions(recordings: list[tuple[str, list[dict]]]) -> dict[str, float]:
    """Each step id's mean relative position among the performed steps of these recordings.

    >>> rec = lambda *ids: ("r", [{"step_id": i, "start_time": k, "end_time": k + 1} for k, i in enumerate(ids)])
    >>> consensus_positions([rec(1, 2, 3), rec(1, 3, 2)])
    {'1': 0.0, '2': 0.75, '3': 0.75}
    """
    sums: dict[str, list[float]] = defaultdict(list)
    for _, steps in recordings:
        timed = sorted((t, s["step_id"]) for s in steps if (t := _times(s)) is not None)
        ids = list(dict.fromkeys(str(i) for _, i in timed))
        for k, sid in enumerate(ids):
            sums[sid].append(k / (len(ids) - 1) if len(ids) > 1 else 0.5)
    return {sid: sum(v) / len(v) for sid, v in sorted(sums.items())}


def read_graph(path: Path) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """(node key -> text, edges) of one task graph file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        nodes = {str(k): str(v).strip() for k, v in data["steps"].items()}
        edges = [(str(a), str(b)) for a, b in data["edges"]]
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        raise RecordError(f"not a task graph ({type(exc).__name__}: {exc})", file=path) from None
    return nodes, edges


def _graph_order(
    nodes: dict[str, str], edges: list[tuple[str, str]], recordings: list[tuple[str, list[dict]]]
) -> tuple[GraphOrder, set[str]]:
    """The step-level order of one recipe's graph, and the step ids that matched no node."""
    by_text: dict[str, list[str]] = defaultdict(list)
    for key, text in nodes.items():
        by_text[text].append(key)
    id_nodes: dict[str, set[str]] = defaultdict(set)
    all_ids = set()
    for _, steps in recordings:
        for s in steps:
            sid = str(s["step_id"])
            all_ids.add(sid)
            id_nodes[sid].update(by_text.get(str(s.get("description", "")).strip(), []))
    children: dict[str, set[str]] = defaultdict(set)
    indegree = dict.fromkeys(nodes, 0)
    for a, b in edges:
        if b not in children[a]:
            children[a].add(b)
            indegree[b] = indegree.get(b, 0) + 1
    topo, ready = {}, sorted((n for n, d in indegree.items() if d == 0), key=_key)
    while ready:
        n = ready.pop(0)
        topo[n] = len(topo)
        for c in sorted(children[n], key=_key):
            indegree[c] -= 1
            if indegree[c] == 0:
                ready.append(c)
    below: dict[str, set[str]] = {}

    def reach(n: str) -> set[str]:
        if n not in below:
            below[n] = set()
            for c in children[n]:
                below[n] |= {c} | reach(c)
        return below[n]

    node_ids: dict[str, set[str]] = defaultdict(set)
    for sid, ns in id_nodes.items():
        for n in ns:
            node_ids[n].add(sid)
    descendants = {
        sid: {d for n in ns for m in reach(n) for d in node_ids[m]} - {sid} for sid, ns in id_nodes.items()
    }
    step_topo = {sid: min(topo.get(n, math.inf) for n in ns) for sid, ns in id_nodes.items() if ns}
    return GraphOrder(descendants, step_topo), {sid for sid in all_ids if not id_nodes[sid]}


def _key(node: str) -> tuple[int, str]:
    return (int(node), node) if node.isdigit() else (10**9, node)


def recipe_orders(
    data: Sequence[Any], kind: str, graphs: Path | None = None
) -> tuple[dict[str, RecipeOrder], dict[str, str]]:
    """``recording id -> RecipeOrder`` and ``recording id -> kind used`` for every recording.

    ``kind``: ``auto`` / ``task_graph`` (graphs from ``graphs``, per-recording fallback to
    consensus), ``consensus`` or ``list``.
    """
    activities = _recordings(data)
    graph_files = (
        sorted(graphs.glob("*.json")) if graphs is not None and kind in ("auto", "task_graph") else []
    )
    loaded = [read_graph(p) for p in graph_files]
    orders: dict[str, RecipeOrder] = defaultdict(RecipeOrder)
    kinds: dict[str, str] = defaultdict(lambda: "list")
    if kind == "list":
        return orders, kinds
    for _activity, recs in activities.items():
        consensus = ConsensusOrder(consensus_positions(recs))
        graph, unmatched = None, set()
        if loaded:
            texts = {str(s.get("description", "")).strip() for _, steps in recs for s in steps}
            score, best = max(
                (
                    (len(texts & set(nodes.values())) / max(1, len(texts)), k)
                    for k, (nodes, _) in enumerate(loaded)
                ),
                default=(0.0, -1),
            )
            if score >= 0.5:
                graph, unmatched = _graph_order(*loaded[best], recs)
        for rid, steps in recs:
            use_graph = graph is not None and not ({str(s["step_id"]) for s in steps} & unmatched)
            orders[rid] = graph if use_graph else consensus
            kinds[rid] = "task_graph" if use_graph else "consensus"
    return orders, kinds
