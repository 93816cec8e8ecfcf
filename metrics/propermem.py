"""ProPerMem's strict "Perfect" metric: exactly one good fire inside the trigger window, with the
window, tolerance, outcomes and reported rates as ``docs/protocols.md`` defines them (with this
project's choices where the protocol is open: how the per-clip counts aggregate).

>>> clip_outcome([5.0, 6.0, 7.0], [1.0, 1.0, 1.0], window=(4.0, 6.0))
ClipOutcome(positive=True, perfect=False, hit=True, early=0, late=0, over_trigger=True, false_fire=False, fires=3)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal, NamedTuple

from metrics.outcomes import FireOutcome, StreamOutcomes

#: Tolerance (s) after the window end, and the content score a fire needs to be good.
DEFAULT_TOLERANCE_S = 2.0
GOOD_CONTENT = 0.5

FireClass = Literal["early", "in_window", "late"]


class ClipOutcome(NamedTuple):
    """Per-clip ProPerMem outcome (``early`` / ``late`` are fire counts; the rest flags)."""

    positive: bool
    perfect: bool
    hit: bool
    early: int
    late: int
    over_trigger: bool
    false_fire: bool
    fires: int


def classify_fire(t: float, window: tuple[float, float], tolerance: float = DEFAULT_TOLERANCE_S) -> FireClass:
    """Where a fire at ``t`` lands relative to ``window`` (edges inclusive).

    >>> [classify_fire(t, (10.0, 20.0)) for t in (9.9, 10.0, 22.0, 22.1)]
    ['early', 'in_window', 'in_window', 'late']
    """
    start, end = window
    if t < start:
        return "early"
    if t > end + tolerance:
        return "late"
    return "in_window"


def clip_outcome(
    fire_times: Sequence[float],
    content_scores: Sequence[float],
    window: tuple[float, float] | None,
    tolerance: float = DEFAULT_TOLERANCE_S,
    good_content: float = GOOD_CONTENT,
) -> ClipOutcome:
    """Outcome of one clip; ``window=None`` marks a negative clip (its content scores are unused).

    >>> clip_outcome([3.0], [1.0], window=None).false_fire
    True
    """
    fires = len(fire_times)
    if window is None:
        return ClipOutcome(False, fires == 0, False, 0, 0, False, fires > 0, fires)
    if len(content_scores) != fires:
        raise ValueError(f"{fires} fires but {len(content_scores)} content scores")
    classes = [classify_fire(t, window, tolerance) for t in fire_times]
    good = [c == "in_window" and s >= good_content for c, s in zip(classes, content_scores, strict=True)]
    return ClipOutcome(
        positive=True,
        perfect=fires == 1 and good[0],
        hit=any(good),
        early=classes.count("early"),
        late=classes.count("late"),
        over_trigger=fires > 1,
        false_fire=False,
        fires=fires,
    )


def fire_outcomes(
    fire_times: Sequence[float],
    content_scores: Sequence[float],
    window: tuple[float, float] | None,
    tolerance: float = DEFAULT_TOLERANCE_S,
    good_content: float = GOOD_CONTENT,
) -> StreamOutcomes:
    """Each fire's outcome (``metrics.outcomes``) by the rules of :func:`clip_outcome`: on a
    negative clip every fire is a ``false_alarm``; else :func:`classify_fire` says ``early`` or
    ``late``, and a fire in the window is ``hit`` when it is the first good one, ``redundant`` when
    it is a later good one, ``wrong`` when its content scores under ``good_content``. The trigger
    window (target 0) is ``hit`` when some fire is good, else ``missed``.

    >>> o = fire_outcomes([3.0, 5.0, 5.5, 6.0, 9.0], [1.0, 0.0, 1.0, 1.0, 1.0], window=(4.0, 6.0))
    >>> [f.outcome for f in o.fires], o.targets
    (['early', 'wrong', 'hit', 'redundant', 'late'], ['hit'])
    """
    if window is None:
        return StreamOutcomes([FireOutcome("false_alarm") for _ in fire_times], [])
    if len(content_scores) != len(fire_times):
        raise ValueError(f"{len(fire_times)} fires but {len(content_scores)} content scores")
    fires, credited = [], False
    for t, s in zip(fire_times, content_scores, strict=True):
        where = classify_fire(t, window, tolerance)
        if where != "in_window":
            fires.append(FireOutcome(where, 0, s))
        elif s < good_content:
            fires.append(FireOutcome("wrong", 0, s))
        else:
            fires.append(FireOutcome("redundant" if credited else "hit", 0, s))
            credited = True
    return StreamOutcomes(fires, ["hit" if credited else "missed"])


def _rate(flags: list[bool]) -> float:
    return 100.0 * sum(flags) / len(flags) if flags else 0.0


def propermem_metrics(outcomes: Iterable[ClipOutcome]) -> dict:
    """Aggregate rates (0-100) and ``mean_fires``; ``n_pos`` / ``n_neg`` give the clip counts.

    >>> out = [clip_outcome([5.0], [1.0], (4.0, 6.0)), clip_outcome([], [], (4.0, 6.0)),
    ...        clip_outcome([], [], None), clip_outcome([1.0], [], None)]
    >>> m = propermem_metrics(out)
    >>> m["perfect"], m["perfect_pos"], m["perfect_neg"], m["false_fire"], m["mean_fires"]
    (50.0, 50.0, 50.0, 50.0, 0.5)
    """
    rows = list(outcomes)
    pos = [o for o in rows if o.positive]
    neg = [o for o in rows if not o.positive]
    return {
        "perfect": _rate([o.perfect for o in rows]),
        "perfect_pos": _rate([o.perfect for o in pos]),
        "perfect_neg": _rate([o.perfect for o in neg]),
        "hit": _rate([o.hit for o in pos]),
        "early": _rate([o.early > 0 for o in pos]),
        "late": _rate([o.late > 0 for o in pos]),
        "over_trigger": _rate([o.over_trigger for o in pos]),
        "false_fire": _rate([o.false_fire for o in neg]),
        "mean_fires": sum(o.fires for o in rows) / len(rows) if rows else 0.0,
        "n_pos": len(pos),
        "n_neg": len(neg),
    }
