"""ESTP-Bench's ESTP-F1, as the paper defines it (pure functions: no torch, no I/O).

Source: "Eyes Wide Open: Ego Proactive Video-LLM for Streaming Video" (arXiv 2510.14560), Sec. 2.2
and Appendix B.3; the release and inference code are ``zhangyl4/EyeWO`` (``eval_estp_batch.py``,
``data/estp/livechat.py``). The official scoring script ships only with the dataset, so this is the
paper's definition; ``docs/protocols.md`` ("ESTP-Bench") lists every choice. In short, per question:

- a ground-truth answer g_k has an interval [s_k, e_k] and an optimal time o_k: s_k for the tasks
  the paper names as answered on sight (:data:`START_OPTIMAL`), else the interval's midpoint;
- a reply at time t is a valid match of g_k iff ``s_k - 1 <= t <= e_k + 2`` (anticipation 1 s,
  latency 2 s); a reply may match several answers, and every valid match counts (the paper averages
  all of them instead of keeping the best one: no one-to-one matching);
- a match scores ``S = (answer + timeliness) / 10``: answer in [1, 5] (an LLM judge in the paper),
  timeliness ``5 * max(0, 1 - |t - o_k| / scale_k)`` with ``scale_k = max(1, e_k - s_k + 1 + 2)``;
- S(g_k) = the mean S of g_k's matches (0 without any); the weighted TP = sum of S(g_k) replaces the
  count of matched answers in the classic P = TP / (TP + FP) and R = TP / M numerators:
  P = sum S(g_k) / (#answers matched + FP), R = sum S(g_k) / M, with FP = the replies that match no
  answer and M = the question's answers; ESTP-F1 = 2PR / (P + R) (0 when both are 0).

The paper's PDF shows the formulas of S, the timeliness and the F1 as images; the forms above are
read from its text (the averaging, the ranges [1, 5] and [0, 5], the tolerances, ``scale_k``, "S(g_k)
replaces the traditional binary TP count", "FP as a penalty term", "M is number of GT", an indicator
of ``|P_k| != 0`` in the F1) and are ours where it is silent. Only the numerators carry S: with
``TP / (TP + FP)`` a question answered once, late and wrongly, would score a perfect 1.

>>> item = Answer(start=10.0, end=14.0, optimal=10.0)
>>> round(time_score(11.0, item), 4)  # 1 s after the optimal time, scale = 4 + 1 + 2 = 7
4.2857
>>> q = score_question([item], [8.5, 9.5, 11.0, 30.0], lambda k, l: 5.0)
>>> round(q.tp, 4), q.fp, q.fn, round(q.precision, 4), round(q.f1, 4)  # 8.5 s early, 30 s late: 2 FP
(0.9464, 2, 0, 0.3155, 0.4732)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

#: Seconds a reply may come before an answer's interval starts (tau_ant, the paper's 1 s).
ANTICIPATION_S = 1.0
#: Seconds a reply may come after an answer's interval ends (tau_lat, the paper's 2 s).
LATENCY_S = 2.0
#: The top of the answer and timeliness scales (both are 5-point scores in the paper).
SCALE_TOP = 5.0

#: The benchmark's task types as the release spells them (``"Task Type"``) -> the paper's short
#: names (Table 2). "Action Reasoning" is the release's name of Next Action Reasoning (NAR).
TASK_TYPES: dict[str, str] = {
    "Object Recognition": "OR",
    "Attribute Perception": "AP",
    "Text-Rich Understanding": "TRU",
    "Object Localization": "OL",
    "Object State Change Recognition": "OSC",
    "Ego Object Localization": "EOL",
    "Ego Object State Change Recognition": "EOSC",
    "Action Recognition": "AR",
    "Object Function": "OFR",
    "Information Function": "IFR",
    "Action Reasoning": "NAR",
    "Next Action Reasoning": "NAR",
    "Task Understanding": "TU",
    "Object Relative Context": "ORC",
    "Task Relative Context": "TRC",
}

#: The paper's three groups of task types, in its table's order.
CATEGORIES: dict[str, tuple[str, ...]] = {
    "Explicit": ("OR", "AP", "TRU", "OL", "OSC", "EOL", "EOSC", "AR"),
    "Implicit": ("OFR", "IFR", "NAR", "TU"),
    "Contextual": ("ORC", "TRC"),
}

#: Task types whose optimal response time is the interval's start (answered on sight); the others
#: use the interval's midpoint (Appendix B.3).
START_OPTIMAL = frozenset({"OR", "AP", "TRU", "OL", "OFR", "IFR", "ORC"})


@dataclass(frozen=True)
class Answer:
    """One ground-truth answer's timing: its interval [start, end] and its optimal time."""

    start: float
    end: float
    optimal: float


def optimal_time(task: str, start: float, end: float) -> float:
    """The optimal response time of an answer of task type ``task`` (a short name).

    >>> optimal_time("OR", 10.0, 14.0), optimal_time("AR", 10.0, 14.0)
    (10.0, 12.0)
    """
    return start if task in START_OPTIMAL else (start + end) / 2


def is_match(
    t: float, item: Answer, anticipation: float = ANTICIPATION_S, latency: float = LATENCY_S
) -> bool:
    """Whether a reply at ``t`` is a valid match of ``item`` (both tolerance edges included)."""
    return item.start - anticipation <= t <= item.end + latency


def time_score(
    t: float, item: Answer, anticipation: float = ANTICIPATION_S, latency: float = LATENCY_S
) -> float:
    """Timeliness in [0, 5]: 5 at the optimal time, falling linearly over ``scale_k`` seconds."""
    scale = max(1.0, (item.end - item.start) + anticipation + latency)
    return SCALE_TOP * max(0.0, 1.0 - abs(t - item.optimal) / scale)


def match_score(answer: float, timeliness: float) -> float:
    """S in [0, 1]: the mean of the answer score [1, 5] and the timeliness [0, 5], over 5."""
    return (answer + timeliness) / (2 * SCALE_TOP)


def answer_from_content(c: float) -> float:
    """A content score in [0, 1] (``metrics.content``) on the paper's answer scale [1, 5]: 1 + 4c.

    It inverts the project's judge scorer, ``(rating - 1) / 4``, so ``--content judge`` gives the
    judge's own rating, and ``--content any`` (timing only) the top score 5.
    """
    return 1.0 + (SCALE_TOP - 1.0) * min(1.0, max(0.0, c))


def f1_of(tp: float, matched: int, fp: int, m: int) -> tuple[float, float, float]:
    """(precision, recall, F1) of a weighted ``tp`` (the sum of S(g_k)) over ``matched`` answers
    with a match, ``fp`` unmatched replies and ``m`` answers; each 0 where its denominator is 0.

    >>> f1_of(1.5, 2, 1, 4)
    (0.5, 0.375, 0.42857142857142855)
    """
    p = tp / (matched + fp) if matched + fp > 0 else 0.0
    r = tp / m if m > 0 else 0.0
    return p, r, (2 * p * r / (p + r) if p + r > 0 else 0.0)


@dataclass(frozen=True)
class QuestionScore:
    """ESTP-F1 of one question and what it is made of."""

    per_answer: tuple[float, ...]
    """S(g_k) of each ground-truth answer (0 for one without a match)."""
    matches: tuple[int, ...]
    """How many replies matched each answer."""
    tp: float
    """The sum of S(g_k)."""
    fp: int
    fn: int
    """Answers without a match (M - the matched ones)."""
    precision: float
    recall: float
    f1: float


def score_question(
    answers: Sequence[Answer],
    reply_times: Sequence[float],
    answer_score: Callable[[int, int], float],
    anticipation: float = ANTICIPATION_S,
    latency: float = LATENCY_S,
) -> QuestionScore:
    """ESTP-F1 of one question: ``answers`` against the replies at ``reply_times``.

    ``answer_score(k, j)`` is the answer score in [1, 5] of reply j against answer k; it is called
    only for valid matches, once per pair.
    """
    per_answer, counts, used = [], [], set()
    for k, item in enumerate(answers):
        scores = []
        for j, t in enumerate(reply_times):
            if is_match(t, item, anticipation, latency):
                used.add(j)
                scores.append(match_score(answer_score(k, j), time_score(t, item, anticipation, latency)))
        per_answer.append(sum(scores) / len(scores) if scores else 0.0)
        counts.append(len(scores))
    tp = sum(per_answer)
    fp = len(reply_times) - len(used)
    fn = sum(1 for n in counts if n == 0)
    p, r, f1 = f1_of(tp, len(answers) - fn, fp, len(answers))
    return QuestionScore(tuple(per_answer), tuple(counts), tp, fp, fn, p, r, f1)


def mean(values: Iterable[float]) -> float | None:
    values = list(values)
    return sum(values) / len(values) if values else None


def aggregate(per_task: Mapping[str, Sequence[float]]) -> dict:
    """The paper's table from per-question F1 values (0-1) grouped by task short name: each task's
    mean (x 100), each category's mean over its task types present, and ``ESTP-F1``, the mean over
    every task type present (the paper's "Overall" is the mean of its 14 task columns)."""
    tasks = {t: 100 * sum(v) / len(v) for t, v in per_task.items() if v}
    categories = {}
    for name, members in CATEGORIES.items():
        present = [tasks[t] for t in members if t in tasks]
        if present:
            categories[name] = sum(present) / len(present)
    order = [t for members in CATEGORIES.values() for t in members]
    return {
        "ESTP-F1": mean(tasks.values()),
        "tasks": {t: tasks[t] for t in order if t in tasks},
        "categories": categories,
    }


# ---------------------------------------------------------------------------------------------
# A public third-party reading (``eval.score --protocol estp --mode guiego``)
#
# Followed: ``CopeeeTang/GUI-Ego``, ``proactive-project/experiments/estp_phase3/hypothesis_runner.py``
# (``compute_case_metrics``, ``ceil_time_by_fps``). Timing only, every true positive counted as 1:
#
# - each answer's interval ``[s, e]`` is first rounded up to the 0.5 s grid (``ceil(2 t) / 2``) and
#   held to ``[0, clip end]`` (:func:`grid_up`);
# - an answer is hit when some reply lies in ``[s - 1, e + 2]`` (edges included); a reply in no
#   answer's window is a false positive;
# - P = hits / (hits + FP), R = hits / M (M answers), F1 = 2PR / (P + R); all 0 with no reply.

#: The grid GUI-Ego rounds answer times up to: frames per second (the release's 2 fps).
GRID_FPS = 2


def grid_up(t: float, clip_end: float, fps: int = GRID_FPS) -> float:
    """``t`` rounded up to the frame grid, held to ``[0, clip_end]``.

    >>> grid_up(10.2, 60), grid_up(10.5, 60), grid_up(59.9, 59.8)
    (10.5, 10.5, 59.8)
    """
    return min(max(math.ceil(t * fps) / fps, 0), clip_end)


def binary_question(
    spans: Sequence[tuple[float, float]],
    reply_times: Sequence[float],
    clip_end: float,
    anticipation: float = ANTICIPATION_S,
    latency: float = LATENCY_S,
) -> QuestionScore:
    """GUI-Ego's F1 of one question: ``spans`` the answers' ``(start, end)`` as the release gives them.

    >>> q = binary_question([(10.2, 14.0), (30.0, 31.0)], [9.6, 9.0, 40.0], clip_end=60)
    >>> q.tp, q.fp, q.fn, q.precision, q.recall   # 9.6 is within 10.5 - 1; 9.0 and 40.0 hit nothing
    (1, 2, 1, 0.3333333333333333, 0.5)
    """
    windows = [(grid_up(s, clip_end) - anticipation, grid_up(e, clip_end) + latency) for s, e in spans]
    hit = [any(lo <= t <= hi for t in reply_times) for lo, hi in windows]
    fp = sum(1 for t in reply_times if not any(lo <= t <= hi for lo, hi in windows))
    tp = sum(hit)
    if not reply_times:
        return QuestionScore(
            tuple(0.0 for _ in spans), tuple(0 for _ in spans), 0, 0, len(spans), 0.0, 0.0, 0.0
        )
    p = tp / (tp + fp) if tp + fp > 0 else 0.0
    r = tp / len(spans) if spans else 0.0
    f1 = 2 * p * r / (p + r) if p + r > 0 else 0.0
    counts = tuple(sum(1 for t in reply_times if lo <= t <= hi) for lo, hi in windows)
    return QuestionScore(tuple(float(h) for h in hit), counts, tp, fp, len(spans) - tp, p, r, f1)
