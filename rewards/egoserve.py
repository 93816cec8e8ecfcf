"""EgoServe: per-subtype service detection with time tolerance, P/R/F1 and the macro Overall.

Definitions (docs/protocols.md, implemented as written; times in seconds):

- tolerance delta: 60 s EgoLife, 10 s HoloAssist, 25 s CaptainCook4D (:data:`TOLERANCE_S`);
- matching per unit (an EgoLife person, a HoloAssist video, a CaptainCook4D recording) and per
  subtype; a prediction's time is the center of its trigger window (a point reply: its time);
- ground truths are visited in order of their centers (equal centers: listed first); each takes,
  among unmatched predictions with ``start - delta <= center <= end + delta``, the one at the
  smallest distance (0 inside the window, else to the nearer edge; ties: listed first);
- P = m / n_pred, R = m / n_gt, F1 = 2PR / (P + R), each 0 when undefined; Overall = 100 x mean F1
  over active subtypes (n_gt > 0 or n_pred > 0); micro P/R/F1 over summed counts; across datasets
  the counts are summed per subtype before the same macro mean.

Time-window strings: ``DAYd HH:MM:SS-HH:MM:SS`` (EgoLife, absolute ``day * 86400 + seconds``;
elsewhere the day is a video-relative clock and dropped), ``19.5-21.4``, ``00:00:19.5-00:00:21.4``
and ``01:24.1-01:24.7`` (MM:SS); ``-`` or ``–`` between the ends. A single clock value is a point
window. Anything else raises :class:`ValueError`.

>>> parse_time_window("DAY1 11:09:42-11:10:00", absolute_days=True)
(126582.0, 126600.0)
>>> match_events([(10.0, 20.0)], [31.0, 25.0], tolerance=10.0)
[(0, 1)]
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from rewards.turns import EGOSERVE_SUBTYPES

#: Matching tolerance (seconds) per dataset.
TOLERANCE_S: dict[str, float] = {"egolife": 60.0, "holoassist": 10.0, "captaincook4d": 25.0}
#: Datasets whose clocks are absolute (day * 86400 + seconds of day).
ABSOLUTE_DAY_DATASETS = frozenset({"egolife"})
SECONDS_PER_DAY = 86400.0

_CLOCK = r"\d+(?::\d+){0,2}(?:\.\d+)?"
_DAY = r"(?:DAY\s*(\d+)\s*[-–\s]?\s*)?"
_WINDOW = re.compile(rf"^\s*{_DAY}({_CLOCK})(?:\s*[-–]\s*{_DAY}({_CLOCK}))?\s*$", re.IGNORECASE)


def parse_clock(text: str) -> float:
    """Seconds of ``S``, ``MM:SS`` or ``HH:MM:SS`` (fractions allowed on the last field).

    >>> parse_clock("01:24.1"), parse_clock("00:00:19.5"), parse_clock("19.5")
    (84.1, 19.5, 19.5)
    """
    parts = text.strip().split(":")
    if not 1 <= len(parts) <= 3 or not re.fullmatch(_CLOCK, text.strip()):
        raise ValueError(f"unparsable clock value {text!r}")
    seconds = float(parts[-1])
    if len(parts) > 1 and seconds >= 60:
        raise ValueError(f"seconds field out of range in {text!r}")
    if len(parts) == 3 and int(parts[1]) >= 60:
        raise ValueError(f"minutes field out of range in {text!r}")
    total = 0.0
    for field in parts[:-1]:
        total = total * 60 + int(field)
    return total * 60 + seconds if len(parts) > 1 else seconds


def parse_time_window(text: str, absolute_days: bool = False) -> tuple[float, float]:
    """(start, end) seconds of a time-window string (forms in the module docstring).

    ``absolute_days`` adds ``day * 86400`` (EgoLife); a window that needs it and has no ``DAYd``
    raises. Both ``-`` and ``–`` separate the ends.

    >>> parse_time_window("01:24.1–01:24.7")
    (84.1, 84.7)
    >>> parse_time_window("DAY2 10:00:00-10:00:05")
    (36000.0, 36005.0)
    """
    if not isinstance(text, str):
        raise ValueError(f"expected a time-window string, got {text!r}")
    m = _WINDOW.match(text)
    if m is None:
        raise ValueError(f"unparsable time window {text!r}")
    day0, start_s, day1, end_s = m.groups()
    start = parse_clock(start_s)
    end = parse_clock(end_s) if end_s is not None else start
    if absolute_days:
        if day0 is None:
            raise ValueError(f"time window {text!r} has no DAYd prefix (needed for absolute time)")
        start += int(day0) * SECONDS_PER_DAY
        end += int(day1 if day1 is not None else day0) * SECONDS_PER_DAY
    if end < start:
        raise ValueError(f"time window {text!r} ends before it starts")
    return start, end


def match_events(
    gt_windows: Sequence[tuple[float, float]], pred_centers: Sequence[float], tolerance: float
) -> list[tuple[int, int]]:
    """Greedy one-to-one matching of one unit's one subtype: (gt index, prediction index) pairs.

    Tolerance edges are inclusive.

    >>> match_events([(10.0, 20.0), (12.0, 12.0)], [12.0], tolerance=0.0)
    [(1, 0)]
    """
    order = sorted(range(len(gt_windows)), key=lambda i: (gt_windows[i][0] + gt_windows[i][1]) / 2)
    used = [False] * len(pred_centers)
    pairs = []
    for i in order:
        start, end = gt_windows[i]
        best, best_d = -1, 0.0
        for j, c in enumerate(pred_centers):
            if used[j] or c < start - tolerance or c > end + tolerance:
                continue
            d = start - c if c < start else (c - end if c > end else 0.0)
            if best < 0 or d < best_d:
                best, best_d = j, d
        if best >= 0:
            used[best] = True
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


@dataclass(frozen=True)
class ServiceEvent:
    """One ground-truth or predicted service of a unit: subtype, window (s) and message."""

    unit: str
    subtype: str
    start: float
    end: float
    text: str = ""

    @property
    def center(self) -> float:
        return (self.start + self.end) / 2


def prf(counts: SubtypeCounts) -> tuple[float, float, float]:
    """Precision, recall and F1 in [0, 1] (each 0 when its denominator is 0).

    >>> prf(SubtypeCounts(matched=1, n_pred=2, n_gt=1))
    (0.5, 1.0, 0.6666666666666666)
    """
    p = counts.matched / counts.n_pred if counts.n_pred else 0.0
    r = counts.matched / counts.n_gt if counts.n_gt else 0.0
    return p, r, (2 * p * r / (p + r) if p + r > 0 else 0.0)


def match_services(
    gt: Iterable[ServiceEvent], pred: Iterable[ServiceEvent], tolerance: float
) -> tuple[dict[str, SubtypeCounts], list[tuple[ServiceEvent, ServiceEvent]]]:
    """Match per (unit, subtype): counts per subtype and the matched (gt, prediction) pairs.

    A prediction of another subtype, or of another unit, never matches.

    >>> g = [ServiceEvent("v", "safety", 10.0, 12.0)]
    >>> p = [ServiceEvent("v", "tool_use", 11.0, 11.0), ServiceEvent("v", "safety", 20.0, 20.0)]
    >>> counts, pairs = match_services(g, p, tolerance=10.0)
    >>> counts["safety"], counts["tool_use"]
    (SubtypeCounts(matched=1, n_pred=1, n_gt=1), SubtypeCounts(matched=0, n_pred=1, n_gt=0))
    """
    groups: dict[tuple[str, str], tuple[list[ServiceEvent], list[ServiceEvent]]] = {}
    for e in gt:
        groups.setdefault((e.unit, e.subtype), ([], []))[0].append(e)
    for e in pred:
        groups.setdefault((e.unit, e.subtype), ([], []))[1].append(e)
    counts: dict[str, SubtypeCounts] = {}
    pairs: list[tuple[ServiceEvent, ServiceEvent]] = []
    for (_, subtype), (g, p) in groups.items():
        found = match_events([(e.start, e.end) for e in g], [e.center for e in p], tolerance)
        c = counts.setdefault(subtype, SubtypeCounts())
        c.add(SubtypeCounts(len(found), len(p), len(g)))
        pairs.extend((g[i], p[j]) for i, j in found)
    return dict(sorted(counts.items())), pairs


def combine_counts(*parts: Mapping[str, SubtypeCounts]) -> dict[str, SubtypeCounts]:
    """Sum subtype counts across units or datasets (the cross-dataset rule).

    >>> combine_counts({"safety": SubtypeCounts(1, 1, 2)}, {"safety": SubtypeCounts(0, 3, 1)})
    {'safety': SubtypeCounts(matched=1, n_pred=4, n_gt=3)}
    """
    out: dict[str, SubtypeCounts] = {}
    for part in parts:
        for subtype, c in part.items():
            out.setdefault(subtype, SubtypeCounts()).add(c)
    return dict(sorted(out.items()))


def egoserve_metrics(counts: Mapping[str, SubtypeCounts]) -> dict:
    """``overall_f1`` (macro over active subtypes, 0-100), ``per_subtype`` and ``micro`` (0-100).

    >>> m = egoserve_metrics({"safety": SubtypeCounts(1, 1, 1), "tool_use": SubtypeCounts(0, 1, 0),
    ...                       "memory_recall": SubtypeCounts()})
    >>> m["overall_f1"], sorted(m["per_subtype"]), m["micro"]["f1"]
    (50.0, ['safety', 'tool_use'], 66.66666666666666)
    """
    per_subtype = {}
    total = SubtypeCounts()
    for subtype, c in sorted(counts.items()):
        if not c.active:
            continue
        p, r, f1 = prf(c)
        per_subtype[subtype] = {
            "p": 100 * p,
            "r": 100 * r,
            "f1": 100 * f1,
            "matched": c.matched,
            "n_pred": c.n_pred,
            "n_gt": c.n_gt,
        }
        total.add(c)
    f1s = [v["f1"] for v in per_subtype.values()]
    p, r, f1 = prf(total)
    return {
        "overall_f1": sum(f1s) / len(f1s) if f1s else 0.0,
        "per_subtype": per_subtype,
        "micro": {
            "p": 100 * p,
            "r": 100 * r,
            "f1": 100 * f1,
            "matched": total.matched,
            "n_pred": total.n_pred,
            "n_gt": total.n_gt,
        },
    }


def known_subtype(name: str) -> bool:
    """Whether a (normalized) name is one of the 10 EgoServe subtypes.

    >>> known_subtype("safety"), known_subtype("weather")
    (True, False)
    """
    return name in EGOSERVE_SUBTYPES
