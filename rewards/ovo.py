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
