"""StreamingBench Proactive Output: time accuracy and answer accuracy of one answer per question.

The rules are those of the benchmark's official scorer (``THUNLP-MT/StreamingBench``,
``src/data/count.py``, task ``proactive``) and harness (``src/benchmark/StreamingBenchProactive.py``);
docs/protocols.md lists them and where the project's reading differs. Times are whole seconds on the
video's clock (``HH:MM:SS`` in the release), rates are fractions 0-1, as the official file writes them:

- the harness polls a question at ``time_stamp + 1``, ``+ 2``, ... up to ``ground_truth_time_stamp
  + 4`` (:func:`poll_times`), each time on the video cut from ``time_stamp`` to the poll, and stops
  at the first poll the model answers; the scored answer is the last turn of the dialog, at the
  time of its poll (:func:`poll_of` maps a frame's time to its poll);
- **time correct**: ``-2 <= time - ground_truth <= 2`` (both edges inclusive);
- **answer correct**: time correct and ``ground_truth_output`` is a substring of the answer's text
  (case-sensitive, as written);
- per task type: ``time_accuracy = time_correct / total`` and ``answer_accuracy = answer_correct /
  total``, over the questions that hold an answer of the model (0 when there are none).

>>> judge_answer(31, "The score is 3 now", ground_truth=29, expected="3")
(True, True)
>>> judge_answer(32, "3", ground_truth=29, expected="3")   # 3 s late
(False, False)
>>> poll_times(20, 22)
[21, 22, 23, 24, 25, 26]
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

#: An answer within this many seconds of the ground truth, either side, is on time (edges included).
TIME_TOLERANCE_S = 2
#: The harness's first poll is this many seconds after the question's ``time_stamp`` ...
FIRST_POLL_AFTER_S = 1
#: ... and its last poll this many seconds after ``ground_truth_time_stamp``.
LAST_POLL_AFTER_GT_S = 4

_CLOCK = re.compile(r"(\d+):([0-5]\d):([0-5]\d)")


def parse_clock(text: object) -> int:
    """``H:MM:SS`` / ``HH:MM:SS`` -> whole seconds; a ``ValueError`` saying why for anything else.

    The official code sums ``int(part) * 60**i`` over the colon-separated parts, so it also takes
    ``MM:SS``, ``75`` or ``0:99:00``; none occurs in the release, and each is refused here.

    >>> parse_clock("00:03:10"), parse_clock("1:02:03")
    (190, 3723)
    >>> parse_clock("00:03:10.5")
    Traceback (most recent call last):
    ...
    ValueError: expected a time H:MM:SS (whole seconds, minutes and seconds 00-59), got '00:03:10.5'
    """
    m = _CLOCK.fullmatch(text) if isinstance(text, str) else None
    if m is None:
        raise ValueError(f"expected a time H:MM:SS (whole seconds, minutes and seconds 00-59), got {text!r}")
    return int(m.group(1)) * 3600 + int(m.group(2)) * 60 + int(m.group(3))


def poll_times(time_stamp: int, ground_truth: int) -> list[int]:
    """The seconds at which the harness asks the model, in order (empty when the ground truth lies
    more than 3 s before the question)."""
    return list(range(time_stamp + FIRST_POLL_AFTER_S, ground_truth + LAST_POLL_AFTER_GT_S + 1))


def poll_of(frame_time: float, time_stamp: int, ground_truth: int) -> int | None:
    """The poll at which a model that answers on the frame at ``frame_time`` (seconds) is recorded,
    ``None`` past the last poll. The harness's poll at ``c`` shows the video cut from ``time_stamp``
    to ``c`` (``c`` excluded), so the first poll that shows the frame at ``t`` is ``floor(t) + 1``;
    a frame before the question's ``time_stamp`` is reported at the first poll.

    >>> poll_of(29.0, 20, 29), poll_of(29.5, 20, 29), poll_of(12.0, 20, 29), poll_of(33.0, 20, 29)
    (30, 30, 21, None)
    """
    polls = poll_times(time_stamp, ground_truth)
    if not polls:
        return None
    at = max(polls[0], math.floor(frame_time + 1e-6) + 1)
    return at if at <= polls[-1] else None


def judge_answer(time: float, text: str, *, ground_truth: float, expected: str) -> tuple[bool, bool]:
    """(time correct, answer correct) of the last turn of a question's dialog."""
    on_time = -TIME_TOLERANCE_S <= time - ground_truth <= TIME_TOLERANCE_S
    return on_time, on_time and expected in text


class Outcome(NamedTuple):
    """One scored question: its task type and the two verdicts."""

    task_type: str
    time_correct: bool
    answer_correct: bool


def _rates(total: int, time_ok: int, answer_ok: int) -> dict:
    return {
        "total": total,
        "time_correct": time_ok,
        "time_accuracy": time_ok / total if total > 0 else 0,
        "answer_correct": answer_ok,
        "answer_accuracy": answer_ok / total if total > 0 else 0,
    }


def proactive_metrics(outcomes: Iterable[Outcome]) -> dict:
    """The official per-task-type counts and accuracies (``task_types``, in first-seen order, as the
    official file lists them) and the same figures pooled over every scored question (top level;
    the release has one task type, so the two agree there).

    >>> proactive_metrics([Outcome("Proactive Output", True, True), Outcome("Proactive Output", True, False),
    ...                    Outcome("Proactive Output", False, False)])["answer_accuracy"]
    0.3333333333333333
    """
    counts: dict[str, list[int]] = {}
    for o in outcomes:
        c = counts.setdefault(o.task_type, [0, 0, 0])
        c[0] += 1
        c[1] += int(o.time_correct)
        c[2] += int(o.answer_correct)
    pooled = [sum(c[i] for c in counts.values()) for i in range(3)]
    return {**_rates(*pooled), "task_types": {k: _rates(*c) for k, c in counts.items()}}


# ---------------------------------------------------------------------------------------------
# Em-Garde's online figures (``eval.score --mode online_emgarde``)
#
# Followed: ``air-embodied-brain/Em-Garde/eval/streamingbench/streamingbench_eval_online.py``.
# The model is watched from ``time_stamp + 1`` to ``ground_truth + 4`` s (both included); the reply
# text is not scored. For each tolerance (2 s and 1 s; ``|t - gt| <= tol``, edges included):
#
# - **Recall@tol**: some detection lies within ``tol`` of the ground truth;
# - **Accuracy@tol**: the first detection does (StreamingBench's time accuracy, time only);
#
# each a count over every question of the release: a question whose run failed (or has no line)
# counts in the denominator and in neither numerator.

#: Em-Garde's tolerances, seconds, and the names it prints them under.
ONLINE_TOLERANCES = (2, 1)


def online_hits(detections: Sequence[float], ground_truth: float) -> dict[str, bool]:
    """``Recall@Ns`` and ``Accuracy@Ns`` of one question's detections (in the order written).

    >>> online_hits([10.0, 12.5], ground_truth=12)
    {'Recall@2s': True, 'Accuracy@2s': True, 'Recall@1s': True, 'Accuracy@1s': False}
    >>> online_hits([], ground_truth=12)["Recall@2s"]
    False
    """
    out = {}
    for tol in ONLINE_TOLERANCES:
        near = [abs(t - ground_truth) <= tol for t in detections]
        out[f"Recall@{tol}s"] = any(near)
        out[f"Accuracy@{tol}s"] = bool(near) and near[0]
    return out


def online_rates(hits: Iterable[Mapping[str, bool]], total: int) -> dict[str, float]:
    """Each figure's share of ``total`` questions (those in ``hits`` scored; the rest failed).

    >>> online_rates([online_hits([12.0], 12), online_hits([20.0], 12)], total=4)["Recall@2s"]
    0.25
    """
    counts = dict.fromkeys((f"{k}@{tol}s" for tol in ONLINE_TOLERANCES for k in ("Recall", "Accuracy")), 0)
    for h in hits:
        for key in counts:
            counts[key] += int(h[key])
    return {key: (n / total if total > 0 else 0.0) for key, n in counts.items()}
