"""P3I's Proactive Response Score: PRS-U (causal) and PRS-B (bidirectional), and their primed forms,
as ``docs/protocols.md`` defines them (assignment, ties, the pair score with ``alpha``).

Content enters as a callable ``content(reply_index, target_index) -> [0, 1]`` (indices into the
caller's lists) or None (always 1). It is called only for assigned pairs, at most twice per reply.
Replies need not be sorted. One bisection per reply serves both assignments.

>>> s = prs_scores([10.0, 30.0], [5.0, 12.0, 13.0, 29.0])
>>> round(s.u, 6), round(s.b, 6)
(0.113105, 0.626421)
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from math import exp, fsum
from typing import NamedTuple

from metrics.outcomes import FireOutcome, StreamOutcomes

#: Default timing decay (1/s) of the pair score.
DEFAULT_ALPHA = 0.05

ContentFn = Callable[[int, int], float]


class PRSScores(NamedTuple):
    """The four P3I sample scores, each in [0, 1]."""

    u: float
    b: float
    u_prime: float
    b_prime: float


def _timeline(target_times: Sequence[float]) -> tuple[list[int], list[float], list[int]]:
    """Targets sorted by (time, listed order): original indices, sorted times, and for every sorted
    position the first position holding the same time (the tie winner)."""
    order = sorted(range(len(target_times)), key=target_times.__getitem__)
    times = [target_times[i] for i in order]
    first = list(range(len(times)))
    for p in range(1, len(times)):
        if times[p] == times[p - 1]:
            first[p] = first[p - 1]
    return order, times, first


def assign_causal(target_times: Sequence[float], reply_time: float) -> tuple[int, bool]:
    """PRS-U assignment: (target index, whether the reply precedes every target, i.e. pair score 0).

    >>> assign_causal([10.0, 30.0], 29.0), assign_causal([10.0, 30.0], 5.0)
    ((0, False), (0, True))
    """
    order, times, first = _timeline(target_times)
    hi = bisect_right(times, reply_time)
    return (order[0], True) if hi == 0 else (order[first[hi - 1]], False)


def assign_bidirectional(target_times: Sequence[float], reply_time: float) -> int:
    """PRS-B assignment: the index of the nearest target (ties: earlier, then listed first).

    >>> assign_bidirectional([10.0, 30.0], 29.0), assign_bidirectional([10.0, 30.0], 20.0)
    (1, 0)
    """
    order, times, first = _timeline(target_times)
    return order[_nearest(times, first, reply_time, bisect_right(times, reply_time))]


def _nearest(times: list[float], first: list[int], t: float, hi: int) -> int:
    """Sorted position of the PRS-B target of a reply at ``t``; ``hi = bisect_right(times, t)``."""
    if hi == 0:
        return 0
    left = first[hi - 1]
    if hi == len(times) or times[left] == t:
        return left
    return left if t - times[left] <= times[hi] - t else hi


def target_scores(
    target_times: Sequence[float],
    reply_times: Sequence[float],
    content: ContentFn | None = None,
    alpha: float = DEFAULT_ALPHA,
    variant: str = "b",
    primed: bool = False,
) -> list[float]:
    """Per-target scores ``S_i`` (in the caller's target order) for one variant (``u`` or ``b``).

    >>> [round(x, 6) for x in target_scores([10.0, 30.0], [5.0, 12.0, 13.0, 29.0], variant="b")]
    [0.301612, 0.951229]
    """
    if variant not in ("u", "b"):
        raise ValueError(f"variant must be 'u' or 'b', got {variant!r}")
    if not target_times:
        return []
    order, times, first = _timeline(target_times)
    n = len(times)
    best, count = [0.0] * n, [0] * n
    for k, t in enumerate(reply_times):
        hi = bisect_right(times, t)
        if variant == "u":
            p = 0 if hi == 0 else first[hi - 1]
            count[p] += 1
            if hi == 0:
                continue
        else:
            p = _nearest(times, first, t, hi)
            count[p] += 1
        s = (1.0 if content is None else content(k, order[p])) * exp(-alpha * abs(t - times[p]))
        if s > best[p]:
            best[p] = s
    out = [0.0] * n
    for p in range(n):
        if count[p]:
            out[order[p]] = best[p] if primed else best[p] / count[p]
    return out


def prs_scores(
    target_times: Sequence[float],
    reply_times: Sequence[float],
    content: ContentFn | None = None,
    alpha: float = DEFAULT_ALPHA,
) -> PRSScores:
    """PRS-U, PRS-B, PRS-U' and PRS-B' of one sample, each in [0, 1] (the hot path of rewards and eval).

    >>> prs_scores([], []), prs_scores([], [3.0]).b
    (PRSScores(u=1.0, b=1.0, u_prime=1.0, b_prime=1.0), 0.0)
    >>> prs_scores([10.0], [10.0]).u
    1.0
    """
    n = len(target_times)
    if n == 0:
        v = 0.0 if reply_times else 1.0
        return PRSScores(v, v, v, v)
    if n == 1:  # every reply goes to the only target under both assignments
        order, times, first = [0], [target_times[0]], [0]
    else:
        order, times, first = _timeline(target_times)
    best_u, count_u, best_b, count_b = [0.0] * n, [0] * n, [0.0] * n, [0] * n
    last = n - 1
    for k, t in enumerate(reply_times):
        hi = bisect_right(times, t)
        if hi == 0:  # before every target: PRS-U pair score 0; PRS-B goes to the first target too
            count_u[0] += 1
            count_b[0] += 1
            d = times[0] - t
            s = exp(-alpha * d) if content is None else content(k, order[0]) * exp(-alpha * d)
            if s > best_b[0]:
                best_b[0] = s
            continue
        pu = first[hi - 1]
        d = t - times[pu]
        count_u[pu] += 1
        if hi > last or d == 0.0:
            pb = pu
        else:
            dr = times[hi] - t
            pb = pu if d <= dr else hi
        s = exp(-alpha * d) if content is None else content(k, order[pu]) * exp(-alpha * d)
        if s > best_u[pu]:
            best_u[pu] = s
        count_b[pb] += 1
        if pb != pu:
            s = exp(-alpha * dr) if content is None else content(k, order[pb]) * exp(-alpha * dr)
        if s > best_b[pb]:
            best_b[pb] = s
    su = sb = sup = sbp = 0.0
    for p in range(n):
        c = count_u[p]
        if c:
            su += best_u[p] / c
            sup += best_u[p]
        c = count_b[p]
        if c:
            sb += best_b[p] / c
            sbp += best_b[p]
    return PRSScores(su / n, sb / n, sup / n, sbp / n)


def redundant_replies(target_times: Sequence[float], reply_times: Sequence[float], variant: str = "b") -> int:
    """Replies beyond the first to each target, under the PRS-B (``variant="b"``, the evaluator's
    count) or PRS-U assignment, and every reply of a sample without targets: what a model says more
    than once, or says for nothing. The one count behind both the evaluator's ``redundant_replies``
    and the GRPO redundancy penalty (``train.grpo.rewards``).

    >>> redundant_replies([10.0, 30.0], [9.0, 10.0, 11.0, 31.0]), redundant_replies([], [4.0, 5.0])
    (2, 2)
    >>> redundant_replies([10.0, 30.0], [5.0, 12.0, 13.0, 29.0], "u")
    3
    """
    if variant not in ("u", "b"):
        raise ValueError(f"variant must be 'u' or 'b', got {variant!r}")
    if not target_times:
        return len(reply_times)
    if variant == "u":
        hit = {assign_causal(target_times, t)[0] for t in reply_times}
    else:
        hit = {assign_bidirectional(target_times, t) for t in reply_times}
    return len(reply_times) - len(hit)


def fire_outcomes(
    target_times: Sequence[float],
    reply_times: Sequence[float],
    content: ContentFn | None = None,
    alpha: float = DEFAULT_ALPHA,
) -> StreamOutcomes:
    """Each reply's outcome under the PRS-U (causal) assignment, and each target's
    (``metrics.outcomes``):

    - no targets: every reply is a ``false_alarm``; a reply before every target is ``early`` (its
      pair score is 0, though it counts at the first target);
    - of the other replies assigned to a target, the one with the best pair score (the first on
      ties) is credited: ``wrong`` when its content scores 0, ``late`` when its timing factor
      ``exp(-alpha * delay)`` is under one half (a delay over ``ln 2 / alpha``: 13.9 s at 0.05),
      else ``hit``; the target takes that word. The others are ``redundant``;
    - a target that no reply at or after its time reaches is ``missed``.

    >>> o = fire_outcomes([10.0, 30.0], [5.0, 12.0, 13.0, 50.0])
    >>> [f.outcome for f in o.fires], o.targets
    (['early', 'hit', 'redundant', 'late'], ['hit', 'late'])
    """
    if not target_times:
        return StreamOutcomes([FireOutcome("false_alarm") for _ in reply_times], [])
    order, times, first = _timeline(target_times)
    fires: list[FireOutcome | None] = [None] * len(reply_times)
    best: dict[int, tuple[float, int, float]] = {}  # sorted target position -> (score, reply, timing)
    assigned: dict[int, int] = {}
    for k, t in enumerate(reply_times):
        hi = bisect_right(times, t)
        if hi == 0:
            fires[k] = FireOutcome("early", order[0], 0.0)
            continue
        p = first[hi - 1]
        timing = exp(-alpha * (t - times[p]))
        s = (1.0 if content is None else content(k, order[p])) * timing
        assigned[k] = p
        if p not in best or s > best[p][0]:
            best[p] = (s, k, timing)
    words = ["missed"] * len(target_times)
    for p, (s, k, timing) in best.items():
        word = "wrong" if s == 0.0 else ("late" if timing < 0.5 else "hit")
        fires[k] = FireOutcome(word, order[p], s)
        words[order[p]] = word
    for k, p in assigned.items():
        if fires[k] is None:
            t = reply_times[k]
            timing = exp(-alpha * (t - times[p]))
            s = (1.0 if content is None else content(k, order[p])) * timing
            fires[k] = FireOutcome("redundant", order[p], s)
    return StreamOutcomes([f for f in fires if f is not None], words)


def mean_score(scores: Iterable[float]) -> float:
    """Exact mean of scores (0 for none), via ``math.fsum``.

    >>> mean_score([0.5, 1.0]), mean_score([])
    (0.75, 0.0)
    """
    values = list(scores)
    return fsum(values) / len(values) if values else 0.0


def aggregate_prs(samples: Iterable[tuple[str, PRSScores]]) -> dict:
    """Task and overall aggregation of ``(task, sample scores)`` pairs, on the 0-100 scale.

    Returns ``prs_u``, ``prs_b``, ``prs_u_prime``, ``prs_b_prime`` as macro means over tasks (each
    task = 100 x mean over its samples), ``micro`` (100 x mean over all samples), ``per_task`` and
    ``n`` (samples per task).

    >>> agg = aggregate_prs([("a", PRSScores(1.0, 1.0, 1.0, 1.0)), ("a", PRSScores(0.0, 0.0, 0.0, 0.0)),
    ...                      ("b", PRSScores(1.0, 1.0, 1.0, 1.0))])
    >>> agg["prs_u"], agg["micro"]["prs_u"], agg["per_task"]["a"]["prs_u"]
    (75.0, 66.66666666666666, 50.0)
    """
    keys = PRSScores._fields
    names = ("prs_u", "prs_b", "prs_u_prime", "prs_b_prime")
    by_task: dict[str, list[PRSScores]] = {}
    for task, scores in samples:
        by_task.setdefault(task, []).append(scores)
    per_task = {
        task: {
            name: 100.0 * mean_score(getattr(s, key) for s in rows)
            for name, key in zip(names, keys, strict=True)
        }
        for task, rows in sorted(by_task.items())
    }
    every = [s for rows in by_task.values() for s in rows]
    out: dict = {name: mean_score(t[name] for t in per_task.values()) for name in names}
    out["micro"] = {
        name: 100.0 * mean_score(getattr(s, key) for s in every)
        for name, key in zip(names, keys, strict=True)
    }
    out["per_task"] = per_task
    out["n"] = {task: len(rows) for task, rows in sorted(by_task.items())}
    return out
