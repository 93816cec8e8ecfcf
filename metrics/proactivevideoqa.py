"""ProactiveVideoQA's PAUC: the area under a turn's judged-score step function over its reply span.

The arithmetic of the benchmark's PAUC script (``pauc/judge_llm_scores_openai.py`` of the
benchmark's repository, not public here) as its public ports compute it: VLMEvalKit's
``vlmeval/dataset/proactive_videoqa.py`` (``_area_under_line_ratio``, ``_stat_metric`` and the
post-processing in ``evaluate``), read and re-derived, not copied. Times in seconds; the judge
scores are given (this module asks no one). Per answer turn of a question
(docs/protocols.md, "ProactiveVideoQA"):

1. **What is judged** (:func:`judged_points`): the replies whose time lies in the turn's
   ``reply_timespan`` ``[s, e]`` (ends included), in time order; a reply whose text equals an earlier
   in-span reply's is left out; each new distinct reply at time ``t`` is judged together with the
   distinct replies before it (joined by one space), so the score at ``t`` is that of everything said
   in the span so far.
2. **Scores** are the judge's 1-3, used as 0-2 (score - 1). A reply after the end of the turn's
   ``related_timespan`` whose score is below the last score at or before that end is dropped (a late
   worse answer does not undo a good one; :func:`drop_late_regressions`).
3. **The curve** (:func:`turn_area`): a step function on ``[0, e - s]`` that holds
   :data:`START_SCORE` (0.5, on the 0-2 scale) until the first judged reply and then each reply's
   score from its (scaled) time on; reply times ``t - s`` are scaled by ``1 - omega`` (``omega = 0``:
   time counts fully; ``omega = 1``: only the last score counts). PAUC of the turn = area /
   ((e - s) * 2). A turn with **no judged reply** scores ``START_SCORE / 2 = 0.25``
   (:data:`NO_REPLY_PAUC`), the paper's rule. A span of zero length with a judged reply scores 0
   (the port's ``max_area > 0`` guard).
4. **The figure** (:func:`pauc`): the mean over all turns of all questions, reported x 100 under
   ``omega=0``, ``omega=0.5`` and ``omega=1`` (:data:`OMEGAS`).

>>> turn_area({2.0: 3}, (0.0, 4.0), omega=0.0)   # 0.5 for 2 s, then 2 for 2 s: 5 / 8
0.625
>>> turn_area({}, (0.0, 4.0), omega=0.0) == NO_REPLY_PAUC
True
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

#: Judge scores: 1 (incorrect) .. 3 (mostly covered); used as score - 1 on a 0..2 scale.
MIN_SCORE, MAX_SCORE = 1, 3
#: The curve's height before the first judged reply (0..2 scale), and the scale's top.
START_SCORE = 0.5
SCALE_TOP = float(MAX_SCORE - MIN_SCORE)
#: PAUC of a turn with no judged reply (the paper's rule): ``START_SCORE / SCALE_TOP``.
NO_REPLY_PAUC = START_SCORE / SCALE_TOP
#: The omegas the benchmark reports.
OMEGAS = (0.0, 0.5, 1.0)


def judged_points(
    replies: Iterable[tuple[float, str]], reply_span: tuple[float, float]
) -> list[tuple[float, list[str]]]:
    """``(time, texts so far)`` for each in-span reply the judge rates (rule 1 of the module doc).

    >>> judged_points([(1.0, "a"), (2.0, "b"), (3.0, "a"), (4.0, "b"), (9.0, "c")], (2.0, 5.0))
    [(2.0, ['b']), (3.0, ['b', 'a'])]

    (``a`` at 1 s and ``c`` at 9 s are outside the span; ``b`` at 4 s repeats an in-span reply.)
    """
    lo, hi = reply_span
    said: list[str] = []
    points = []
    for time, text in replies:
        if not lo <= time <= hi or text in said:
            continue
        said.append(text)
        points.append((time, list(said)))
    return points


def drop_late_regressions(scores: Mapping[float, int], related_end: float) -> dict[float, int]:
    """The scores (1-3, by reply time) without those after ``related_end`` that are below the last
    score at or before it (rule 2 of the module doc).

    >>> drop_late_regressions({1.0: 3, 5.0: 2, 6.0: 3, 7.0: 1}, related_end=4.0)
    {1.0: 3, 6.0: 3}
    >>> drop_late_regressions({5.0: 1, 6.0: 3}, related_end=4.0)   # nothing in the related span
    {5.0: 1, 6.0: 3}
    """
    kept: dict[float, int] = {}
    last_related: int | None = None
    for time in sorted(scores):
        score = scores[time]
        if time <= related_end:
            last_related = score
        elif last_related is not None and score < last_related:
            continue
        kept[time] = score
    return kept


def turn_area(scores: Mapping[float, int], reply_span: tuple[float, float], omega: float) -> float:
    """PAUC (0..1) of one turn from its judge scores (1-3, keyed by reply time; rule 3 of the module
    doc). The scores are taken as they are: drop the late regressions first.

    >>> turn_area({0.0: 1}, (0.0, 4.0), omega=0.0), turn_area({0.0: 3}, (0.0, 4.0), omega=0.5)
    (0.0, 1.0)
    >>> turn_area({2.0: 3}, (0.0, 4.0), omega=1.0)   # at omega 1 only the final score counts
    1.0
    """
    if not 0.0 <= omega <= 1.0:
        raise ValueError(f"omega must be in [0, 1], got {omega!r}")
    for time, score in scores.items():
        if not MIN_SCORE <= score <= MAX_SCORE:
            raise ValueError(f"judge score at {time}s must be {MIN_SCORE}..{MAX_SCORE}, got {score!r}")
    if not scores:
        return NO_REPLY_PAUC
    start, end = reply_span
    length = end - start
    if length <= 0:
        return 0.0
    steps = [((time - start) * (1.0 - omega), score - MIN_SCORE) for time, score in sorted(scores.items())]
    area, at, height = 0.0, 0.0, START_SCORE
    for x, y in [*steps, (length, steps[-1][1])]:
        area += (x - at) * height
        at, height = x, y
    return area / (length * SCALE_TOP)


def turn_pauc(
    scores: Mapping[float, int],
    reply_span: tuple[float, float],
    related_end: float,
    omegas: Sequence[float] = OMEGAS,
) -> dict[float, float]:
    """PAUC (0..1) of one turn at each omega: late regressions dropped, then :func:`turn_area`."""
    kept = drop_late_regressions(scores, related_end)
    return {omega: turn_area(kept, reply_span, omega) for omega in omegas}


def pauc(
    turn_values: Sequence[Mapping[float, float]], omegas: Sequence[float] = OMEGAS
) -> dict[float, float]:
    """The mean PAUC (0..1) over turns at each omega; 0 with no turn (as the port)."""
    if not turn_values:
        return {omega: 0.0 for omega in omegas}
    return {omega: sum(v[omega] for v in turn_values) / len(turn_values) for omega in omegas}
