"""EgoServe: per-subtype service detection with time tolerance, P/R/F1 and the macro Overall.

The numbers are those of the benchmark's official evaluator (docs/egoserve.md lists every rule and
where the project's reading differs); all times are seconds, all rates 0-1 here (callers print
0-100):

- tolerance delta: 60 s EgoLife, 10 s HoloAssist, 25 s CaptainCook4D (:data:`TOLERANCE_S`), bounds
  inclusive: a prediction centre ``c`` is a candidate of a ground truth ``[start, end]`` when
  ``start - delta <= c <= end + delta``;
- matching per unit (an EgoLife person, a HoloAssist video, a CaptainCook4D recording) and per
  subtype, greedy: ground truths in order of their centres, predictions in order of their centres
  (both stable, so equal centres keep the reading order); each ground truth takes the candidate at
  the smallest distance to its *window* (0 inside, else to the nearer edge), the earliest on ties;
  on EgoLife the prediction's main type must also equal the ground truth's;
- P = m / n_pred, R = m / n_gt, F1 = 2PR / (P + R), each 0 when undefined; a dataset counts only
  its own subtypes (:data:`DATASET_SUBTYPES`; a HoloAssist "memory_recall" prediction enters no
  subtype, only the dataset's micro count); across datasets the counts are summed per subtype; the
  Overall is the mean F1 over active subtypes (n_gt > 0 or n_pred > 0) computed as numpy's
  ``mean`` does (:func:`numpy_mean`), so it is bit-identical.

Event centres are computed by the readers (EgoLife: ``day * 86400 + (start + end) / 2.0``, in that
order) and carried on :class:`ServiceEvent`.

>>> g = [ServiceEvent("v", "safety", 100.0, 120.0), ServiceEvent("v", "safety", 128.0, 130.0)]
>>> p = [ServiceEvent("v", "safety", 118.0, 118.0), ServiceEvent("v", "safety", 101.0, 101.0)]
>>> match_greedy(g, p, tolerance=10.0)   # the earlier centre (101) goes to the first ground truth
[(0, 1), (1, 0)]
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from metrics.outcomes import FireOutcome, StreamOutcomes

#: Matching tolerance (seconds) per dataset.
TOLERANCE_S: dict[str, float] = {"egolife": 60.0, "holoassist": 10.0, "captaincook4d": 25.0}
SECONDS_PER_DAY = 86400

#: The ten subtypes in the order the official evaluator averages them.
SUBTYPES: tuple[str, ...] = (
    "safety",
    "tool_use",
    "next_step_guidance",
    "error_recovery",
    "resource_reminder",
    "habit_coaching",
    "memory_link_contextual",
    "routine_optimization",
    "memory_recall",
    "task_reminder",
)
#: Main type of each subtype (EgoLife matches on it too).
MAIN_TYPE: dict[str, str] = {
    **dict.fromkeys(SUBTYPES[:2], "Instant"),
    **dict.fromkeys(SUBTYPES[2:5], "Short-Term"),
    **dict.fromkeys(SUBTYPES[5:8], "Long-Term"),
    **dict.fromkeys(SUBTYPES[8:], "Episodic"),
}
#: The subtypes each dataset is scored on; another dataset name is scored on all ten.
DATASET_SUBTYPES: dict[str, tuple[str, ...]] = {
    "egolife": SUBTYPES,
    "holoassist": SUBTYPES[:5],
    "captaincook4d": SUBTYPES[:5],
}
#: Datasets whose matching also requires equal main types.
MAIN_TYPE_CHECKED = frozenset({"egolife"})


@dataclass(frozen=True)
class ServiceEvent:
    """One ground-truth or predicted service of a unit: subtype, window and centre (s), message.

    ``center`` defaults to ``(start + end) / 2.0`` and ``main_type`` to the subtype's; ``subtype``
    may be a name outside :data:`SUBTYPES` (kept raw, counted in the micro numbers only)."""

    unit: str
    subtype: str
    start: float
    end: float
    text: str = ""
    center: float = field(default=None)  # type: ignore[assignment]
    main_type: str | None = None

    def __post_init__(self) -> None:
        if self.center is None:
            object.__setattr__(self, "center", (self.start + self.end) / 2.0)
        if self.main_type is None:
            object.__setattr__(self, "main_type", MAIN_TYPE.get(self.subtype))


def match_greedy(
    gt: Sequence[ServiceEvent], pred: Sequence[ServiceEvent], tolerance: float, check_main: bool = False
) -> list[tuple[int, int]]:
    """Greedy one-to-one matching of one unit's one subtype: (gt index, prediction index) pairs in
    the order the ground truths were visited (rules in the module docstring).

    >>> match_greedy([ServiceEvent("v", "safety", 10.0, 20.0)], [ServiceEvent("v", "safety", 30.0, 30.0)], 10.0)
    [(0, 0)]
    """
    gt_order = sorted(range(len(gt)), key=lambda i: gt[i].center)
    pred_order = sorted(range(len(pred)), key=lambda j: pred[j].center)
    used: set[int] = set()
    pairs = []
    for i in gt_order:
        g = gt[i]
        best, best_d = None, math.inf
        for j in pred_order:
            if j in used:
                continue
            p = pred[j]
            if check_main and p.main_type != g.main_type:
                continue
            c = p.center
            if c < g.start - tolerance or c > g.end + tolerance:
                continue
            d = g.start - c if c < g.start else (c - g.end if c > g.end else 0.0)
            if d < best_d:
                best, best_d = j, d
        if best is not None:
            used.add(best)
            pairs.append((i, best))
    return pairs


@dataclass
class SubtypeCounts:
    """Summed counts of one subtype: matches, predictions, ground truths."""

    matched: int = 0
    n_pred: int = 0
    n_gt: int = 0

    def add(self, other: SubtypeCounts) -> None:
        self.matched += other.matched
        self.n_pred += other.n_pred
        self.n_gt += other.n_gt

    @property
    def active(self) -> bool:
        return self.n_gt > 0 or self.n_pred > 0


def prf(counts: SubtypeCounts) -> tuple[float, float, float]:
    """Precision, recall and F1 in [0, 1] (each 0 when its denominator is 0).

    >>> prf(SubtypeCounts(matched=1, n_pred=2, n_gt=1))
    (0.5, 1.0, 0.6666666666666666)
    """
    p = counts.matched / counts.n_pred if counts.n_pred > 0 else 0.0
    r = counts.matched / counts.n_gt if counts.n_gt > 0 else 0.0
    return p, r, (2 * p * r / (p + r) if (p + r) > 0 else 0.0)


def _pairwise_sum(xs: Sequence[float]) -> float:
    n = len(xs)
    if n < 8:
        total = -0.0
        for x in xs:
            total += x
        return total
    if n <= 128:
        r = list(xs[:8])
        i = 8
        while i < n - n % 8:
            for k in range(8):
                r[k] += xs[i + k]
            i += 8
        total = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
        for x in xs[i:]:
            total += x
        return total
    half = n // 2
    half -= half % 8
    return _pairwise_sum(xs[:half]) + _pairwise_sum(xs[half:])


def numpy_mean(xs: Sequence[float]) -> float:
    """The mean exactly as ``numpy.mean`` computes it on float64 (pairwise summation), NaN when empty.

    >>> numpy_mean([0.1] * 10) == 0.1, sum([0.1] * 10) / 10 == 0.1
    (True, False)
    """
    return _pairwise_sum(list(xs)) / len(xs) if xs else math.nan


@dataclass
class DatasetScore:
    """Counts of one dataset: per scored subtype (all present), micro totals, per unit, matched pairs.
    The micro totals also count events whose subtype is not one of ``subtypes``."""

    subtypes: tuple[str, ...]
    counts: dict[str, SubtypeCounts]
    micro: SubtypeCounts
    per_unit: dict[str, dict[str, SubtypeCounts]]
    pairs: list[tuple[ServiceEvent, ServiceEvent]]

    def merge(self, other: DatasetScore) -> None:
        """Add another score of the same dataset (another file of it)."""
        for sub, c in other.counts.items():
            self.counts.setdefault(sub, SubtypeCounts()).add(c)
        self.micro.add(other.micro)
        for unit, counts in other.per_unit.items():
            for sub, c in counts.items():
                self.per_unit.setdefault(unit, {}).setdefault(sub, SubtypeCounts()).add(c)
        self.pairs.extend(other.pairs)


def score_dataset(
    gt: Iterable[ServiceEvent],
    pred: Iterable[ServiceEvent],
    tolerance: float,
    subtypes: Sequence[str] = SUBTYPES,
    check_main: bool = False,
) -> DatasetScore:
    """Match every unit's every subtype of ``subtypes`` (events in reading order) and count.

    >>> s = score_dataset([ServiceEvent("v", "safety", 10.0, 12.0)],
    ...                   [ServiceEvent("v", "safety", 11.0, 11.0), ServiceEvent("v", "memory_recall", 11.0, 11.0)],
    ...                   10.0, subtypes=DATASET_SUBTYPES["holoassist"])
    >>> s.counts["safety"], s.micro
    (SubtypeCounts(matched=1, n_pred=1, n_gt=1), SubtypeCounts(matched=1, n_pred=2, n_gt=1))
    """
    gt, pred = list(gt), list(pred)
    groups: dict[tuple[str, str], tuple[list[ServiceEvent], list[ServiceEvent]]] = {}
    for k, events in enumerate((gt, pred)):
        for e in events:
            groups.setdefault((e.unit, e.subtype), ([], []))[k].append(e)
    counts = {s: SubtypeCounts() for s in subtypes}
    per_unit: dict[str, dict[str, SubtypeCounts]] = {}
    pairs = []
    for (unit, subtype), (g, p) in sorted(groups.items()):
        if subtype not in counts:
            continue
        found = match_greedy(g, p, tolerance, check_main)
        c = SubtypeCounts(len(found), len(p), len(g))
        counts[subtype].add(c)
        per_unit.setdefault(unit, {})[subtype] = c
        pairs.extend((g[i], p[j]) for i, j in found)
    micro = SubtypeCounts(sum(c.matched for c in counts.values()), len(pred), len(gt))
    return DatasetScore(tuple(subtypes), counts, micro, per_unit, pairs)


def _window_gap(g: ServiceEvent, c: float) -> float:
    """Distance of a centre to a ground truth's window (0 inside), as :func:`match_greedy` measures."""
    return g.start - c if c < g.start else (c - g.end if c > g.end else 0.0)


def unit_outcomes(
    gt: Sequence[ServiceEvent],
    pred: Sequence[ServiceEvent],
    tolerance: float,
    subtypes: Sequence[str] = SUBTYPES,
    check_main: bool = False,
) -> StreamOutcomes:
    """Each prediction's outcome (``metrics.outcomes``) and each ground truth's, in the callers'
    orders, from the matching :func:`score_dataset` counts (per unit and subtype, :func:`match_greedy`):

    - a matched prediction is a ``hit`` of its ground truth (inside its window or within the
      tolerance of it), which is ``hit`` too; an unmatched ground truth is ``missed``;
    - an unmatched prediction within the tolerance of a ground truth of its subtype (one taken by
      another prediction, or of another main type on EgoLife) is ``redundant``; else, with a
      ground truth of its subtype in the unit, ``early`` / ``late`` against the nearest one's
      window; else ``wrong`` when a ground truth of another subtype is within the tolerance, and
      ``false_alarm`` when none is, or when its subtype is not one the dataset scores.

    >>> g = [ServiceEvent("v", "safety", 100.0, 120.0), ServiceEvent("v", "tool_use", 300.0, 310.0)]
    >>> p = [ServiceEvent("v", "safety", 118.0, 118.0), ServiceEvent("v", "safety", 119.0, 119.0),
    ...      ServiceEvent("v", "safety", 80.0, 80.0), ServiceEvent("v", "next_step_guidance", 305.0, 305.0),
    ...      ServiceEvent("v", "error_recovery", 500.0, 500.0)]
    >>> o = unit_outcomes(g, p, tolerance=10.0)
    >>> [f.outcome for f in o.fires], o.targets
    (['hit', 'redundant', 'early', 'wrong', 'false_alarm'], ['hit', 'missed'])
    """
    gt, pred = list(gt), list(pred)
    fires: list[FireOutcome | None] = [None] * len(pred)
    words = ["missed"] * len(gt)
    groups: dict[tuple[str, str], tuple[list[int], list[int]]] = {}
    for k, events in enumerate((gt, pred)):
        for i, e in enumerate(events):
            groups.setdefault((e.unit, e.subtype), ([], []))[k].append(i)
    for (_, subtype), (gi, pi) in sorted(groups.items()):
        if subtype not in subtypes:
            continue
        for a, b in match_greedy([gt[i] for i in gi], [pred[j] for j in pi], tolerance, check_main):
            fires[pi[b]] = FireOutcome("hit", gi[a])
            words[gi[a]] = "hit"
    for j, p in enumerate(pred):
        if fires[j] is not None:
            continue
        if p.subtype not in subtypes:
            fires[j] = FireOutcome("false_alarm")
            continue
        same = [i for i, g in enumerate(gt) if g.unit == p.unit and g.subtype == p.subtype]
        if same:
            i = min(same, key=lambda i: _window_gap(gt[i], p.center))
            gap = _window_gap(gt[i], p.center)
            word = "redundant" if gap <= tolerance else ("early" if p.center < gt[i].start else "late")
            fires[j] = FireOutcome(word, i)
            continue
        near = [i for i, g in enumerate(gt) if g.unit == p.unit and _window_gap(g, p.center) <= tolerance]
        fires[j] = FireOutcome("wrong", near[0]) if near else FireOutcome("false_alarm")
    return StreamOutcomes([f for f in fires if f is not None], words)


def _rates(c: SubtypeCounts) -> dict:
    p, r, f1 = prf(c)
    return {
        "p": 100 * p,
        "r": 100 * r,
        "f1": 100 * f1,
        "matched": c.matched,
        "n_pred": c.n_pred,
        "n_gt": c.n_gt,
    }


def _macro(counts: Mapping[str, SubtypeCounts]) -> dict:
    """Mean P, R, F1 (0-100) over the active subtypes, in :data:`SUBTYPES` order."""
    active = [counts[s] for s in SUBTYPES if s in counts and counts[s].active]
    rates = [prf(c) for c in active]
    means = [numpy_mean([x[k] for x in rates]) for k in range(3)]
    out = {k: (None if math.isnan(v) else 100 * v) for k, v in zip(("p", "r", "f1"), means, strict=True)}
    return {**out, "num_active": len(active)}


def _view(counts: Mapping[str, SubtypeCounts], micro: SubtypeCounts, empty: bool) -> dict:
    if empty:  # the official evaluator reports an empty dataset as all zeros
        macro = {"p": 0.0, "r": 0.0, "f1": 0.0, "num_active": 0}
    else:
        macro = _macro(counts)
    return {
        "overall_f1": macro["f1"],
        "macro": macro,
        "per_subtype": {s: _rates(counts[s]) for s in SUBTYPES if s in counts and counts[s].active},
        "micro": _rates(micro),
    }


def egoserve_report(scores: Mapping[str, DatasetScore]) -> dict:
    """The metrics (0-100) of per-dataset scores: combined ``overall_f1`` (macro F1 over active
    subtypes after summing each subtype across datasets; 0 when none is active), ``macro``,
    ``per_subtype`` (active only), ``micro`` (summed dataset totals) and ``per_dataset``.

    >>> s = score_dataset([ServiceEvent("v", "safety", 10.0, 12.0)], [ServiceEvent("v", "safety", 11.0, 11.0)], 10.0,
    ...                   DATASET_SUBTYPES["holoassist"])
    >>> r = egoserve_report({"holoassist": s})
    >>> r["overall_f1"], list(r["per_subtype"]), r["per_dataset"]["holoassist"]["micro"]["f1"]
    (100.0, ['safety'], 100.0)
    """
    combined: dict[str, SubtypeCounts] = {}
    micro = SubtypeCounts()
    per_dataset = {}
    for ds, s in scores.items():
        for sub, c in s.counts.items():
            combined.setdefault(sub, SubtypeCounts()).add(c)
        micro.add(s.micro)
        per_dataset[ds] = _view(s.counts, s.micro, empty=s.micro.n_pred == 0 and s.micro.n_gt == 0)
    out = _view(combined, micro, empty=False)
    if out["overall_f1"] is None:
        out["overall_f1"] = 0.0
        out["macro"].update(p=0.0, r=0.0, f1=0.0)
    return {**out, "per_dataset": per_dataset}
