"""OVO-Bench's scores, as the official offline scorer computes them (docs/protocols.md, OVO-Bench).

Followed: ``JoeLeelyf/OVO-Bench``, ``utils/OVOBenchScore.py`` (``OVOBenchOfflineScore``; its online
class is an empty stub) and ``score.py``. Rules, quirks included:

- multiple choice (backward tracing EPM, ASI, HLD; real-time perception STU, OJR, ATR, ACR, OCR,
  FPD): 1 when the right letter occurs anywhere in the response, case-sensitive (``"B. A cat"``
  contains ``A``; ``"c"`` does not contain ``C``);
- REC: the response's digit runs, joined, equal the count (``"1 or 2"`` reads as 12);
- SSR, CRR: 1 when the response is exactly ``N`` for type 0 or ``Y`` for type 1, else when ``No``
  (type 0) or ``Yes`` (type 1) occurs in it (``"Nope"`` and ``"Not yet"`` contain ``No``);
- a null response (the official harness's failed inference) scores 0;
- a task's accuracy is the mean over its scored questions (forward: its probes); a part is the
  mean of its tasks that have any; the total is the mean of the three parts, all x 100. A task
  with nothing scored is left out of its part, as the official scorer leaves it out; a part with
  nothing scored has no figure, and then neither has the total (the official scorer stops there).

>>> choice_score("B", "B"), choice_score("b", "B"), choice_score(None, "B")
(1, 0, 0)
>>> count_score("I counted 1 and then 2", 12), count_score("three", 3)
(1, 0)
>>> yes_no_score("N", "No"), yes_no_score("Nope", "No"), yes_no_score("yes", "Yes")
(1, 1, 0)
>>> f = figures({"EPM": [1, 0], "ASI": [1], "STU": [1, 1], "REC": [0, 1, 1, 1]})
>>> f["EPM"], f["backward"], f["realtime"], f["forward"], f["total"]
(50.0, 75.0, 100.0, 75.0, 83.33333333333333)
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

BACKWARD_TASKS = ("EPM", "ASI", "HLD")
REALTIME_TASKS = ("STU", "OJR", "ATR", "ACR", "OCR", "FPD")
FORWARD_TASKS = ("REC", "SSR", "CRR")
PARTS = ("backward", "realtime", "forward")
#: part -> its tasks (the official scorer's three lists).
PART_TASKS: dict[str, tuple[str, ...]] = dict(zip(PARTS, (BACKWARD_TASKS, REALTIME_TASKS, FORWARD_TASKS)))
#: task -> its part.
TASK_PART: dict[str, str] = {task: part for part, tasks in PART_TASKS.items() for task in tasks}
TASKS = tuple(TASK_PART)

_DIGITS = re.compile(r"\d+")


def choice_score(response: str | None, letter: str) -> int:
    """Multiple choice: 1 when ``letter`` occurs in ``response``."""
    return 0 if response is None else int(letter in response)


def count_score(response: str | None, count: int | str) -> int:
    """REC: 1 when the response's digit runs, joined, spell ``count``."""
    return 0 if response is None else int("".join(_DIGITS.findall(response)) == str(count))


def yes_no_score(response: str | None, expected: str) -> int:
    """SSR and CRR: ``expected`` is ``Yes`` (type 1) or ``No`` (type 0)."""
    if response is None:
        return 0
    if response == expected[0]:  # the bare letter Y / N
        return 1
    return int(expected in response)


def probe_score(task: str, response: str | None, expected: str) -> int:
    """The score of one answer of ``task``: ``expected`` is the letter, the count or Yes/No."""
    if task == "REC":
        return count_score(response, expected)
    if task in ("SSR", "CRR"):
        return yes_no_score(response, expected)
    if task in TASK_PART:
        return choice_score(response, expected)
    raise ValueError(f"unknown OVO-Bench task {task!r}")


def figures(scores: Mapping[str, Sequence[int]]) -> dict[str, float | None]:
    """Per-task accuracy, the three part means and the total, in percent (None: nothing scored).
    ``scores`` maps a task to its answers' 0/1 scores."""
    unknown = sorted(set(scores) - set(TASK_PART))
    if unknown:
        raise ValueError(f"unknown OVO-Bench task(s) {unknown}")
    out: dict[str, float | None] = {}
    for task in TASKS:
        v = scores.get(task) or []
        out[task] = 100 * sum(v) / len(v) if v else None
    for part, tasks in PART_TASKS.items():
        present = [sum(scores[t]) / len(scores[t]) for t in tasks if scores.get(t)]
        out[part] = 100 * sum(present) / len(present) if present else None
    parts = [out[p] for p in PARTS]
    out["total"] = None if any(p is None for p in parts) else (parts[0] + parts[1] + parts[2]) / 3
    return out


# ---------------------------------------------------------------------------------------------
# Em-Garde's online F1 on the forward tasks (``protocol_mode`` / ``eval.score --mode online_emgarde``)
#
# Followed: ``air-embodied-brain/Em-Garde/eval/ovo_bench/ovo_bench_eval_online.py`` (its
# ``eval_one_question`` and the figures at the end of ``eval_multi_gpu``). Only REC, SSR and CRR;
# the reply text is not scored, only when the model spoke:
#
# - the model is watched from ``start + 1`` s to the last probe's ``realtime`` (``test_info[-1]``),
#   both ends included, ``start`` being 0 for REC and SSR and ``ask_time`` for CRR
#   (:func:`online_window`);
# - the ground-truth times are ``clue_time`` (CRR) or each event's start + 2 s (REC
#   ``start_times``, SSR ``start_time``) (:func:`online_truth_times`);
# - each ground-truth time, in list order, takes the first not yet taken detection, in list order,
#   with ``|t - gt| <= 2`` (both sides, edges included): one to one (:func:`online_matches`);
# - per question recall = matched / ground truths, precision = matched / detections (0 with no
#   detection); per task the mean recall and the mean precision over its questions (0 for a task
#   with none), F1 = 2RP / (R + P) of the two means (0 when both are 0); the figure is the plain
#   mean of the three tasks' F1 (a task with no question counts as 0) (:func:`online_f1`).

#: Seconds either side of a ground-truth time within which a detection matches it (edges included).
ONLINE_TOLERANCE_S = 2.0
#: Seconds after an event's start that Em-Garde takes as its REC / SSR ground-truth time.
ONLINE_EVENT_DELAY_S = 2.0
#: Seconds after the start at which Em-Garde's first detection step lies.
ONLINE_FIRST_STEP_S = 1.0


def online_window(task: str, ask_time: float | None, last_probe: float) -> tuple[float, float]:
    """``[first, last]`` seconds in which Em-Garde's harness detects (both ends included).

    >>> online_window("REC", None, 16.5), online_window("CRR", 8, 22)
    ((1.0, 16.5), (9.0, 22))
    """
    start = ask_time if task == "CRR" else 0.0
    if start is None:
        raise ValueError("a CRR question needs its ask_time")
    return start + ONLINE_FIRST_STEP_S, last_probe


def online_truth_times(task: str, raw: Mapping) -> list[float]:
    """The ground-truth times of a release item (``raw``: the release's object), as Em-Garde reads them.

    >>> online_truth_times("REC", {"start_times": [2, 9]}), online_truth_times("CRR", {"clue_time": 14})
    ([4.0, 11.0], [14.0])
    """
    if task == "CRR":
        return [float(raw["clue_time"])]
    key = "start_times" if task == "REC" else "start_time"
    return [float(t) + ONLINE_EVENT_DELAY_S for t in raw[key]]


def online_matches(truth: Sequence[float], detections: Sequence[float]) -> int:
    """How many ground-truth times find a detection: each, in order, takes the first untaken
    detection (in list order) within :data:`ONLINE_TOLERANCE_S`.

    >>> online_matches([4.0, 11.0], [3.0, 5.0, 12.5])   # 4 takes 3.0; 11 takes 12.5
    2
    >>> online_matches([4.0, 5.0], [4.5])               # one detection serves one ground truth
    1
    """
    left = list(detections)
    found = 0
    for gt in truth:
        for k, t in enumerate(left):
            if abs(t - gt) <= ONLINE_TOLERANCE_S:
                found += 1
                del left[k]
                break
    return found


def online_question(truth: Sequence[float], detections: Sequence[float]) -> tuple[float, float]:
    """(recall, precision) of one question; a question with no ground-truth time is an error (Em-Garde
    divides by zero there).

    >>> online_question([4.0, 11.0], [3.0, 20.0])
    (0.5, 0.5)
    >>> online_question([14.0], [])
    (0.0, 0.0)
    """
    if not truth:
        raise ValueError("no ground-truth time (Em-Garde's scorer divides by zero here)")
    found = online_matches(truth, detections)
    return found / len(truth), (found / len(detections) if detections else 0.0)


def _f1(recall: float, precision: float) -> float:
    return 2 * recall * precision / (recall + precision) if recall + precision > 0 else 0.0


def online_f1(per_question: Mapping[str, Sequence[tuple[float, float]]]) -> dict:
    """Em-Garde's figures from each forward task's per-question (recall, precision), under the names
    it prints them with: per task ``Recall@2s``, ``Precision@2s``, ``F1@2s`` (and ``n``), and
    ``Average F1@2s``, the mean of the three F1. Fractions 0-1, as Em-Garde prints them.

    >>> f = online_f1({"CRR": [(1.0, 0.5), (0.0, 0.0)], "REC": [(0.5, 1.0)]})
    >>> [round(f[t]["F1@2s"], 4) for t in ("CRR", "REC", "SSR")], round(f["Average F1@2s"], 4)
    ([0.3333, 0.6667, 0.0], 0.3333)
    """
    unknown = sorted(set(per_question) - set(FORWARD_TASKS))
    if unknown:
        raise ValueError(f"not a forward task: {unknown}")
    out: dict = {}
    for task in FORWARD_TASKS:
        rows = per_question.get(task) or []
        recall = sum(r for r, _ in rows) / len(rows) if rows else 0.0
        precision = sum(p for _, p in rows) / len(rows) if rows else 0.0
        out[task] = {
            "Recall@2s": recall,
            "Precision@2s": precision,
            "F1@2s": _f1(recall, precision),
            "n": len(rows),
        }
    out["Average F1@2s"] = sum(out[t]["F1@2s"] for t in FORWARD_TASKS) / len(FORWARD_TASKS)
    return out
