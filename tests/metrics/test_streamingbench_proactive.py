"""StreamingBench Proactive Output rules: the 2 s edges, the substring test, the clock and the polls."""

from __future__ import annotations

import pytest

from metrics.streamingbench_proactive import (
    Outcome,
    judge_answer,
    parse_clock,
    poll_of,
    poll_times,
    proactive_metrics,
)


def test_two_seconds_either_side_edges_included():
    on_time = [judge_answer(t, "x", ground_truth=29, expected="x")[0] for t in (26.9, 27, 29, 31, 31.1)]
    assert on_time == [False, True, True, True, False]
    # the output must be a substring of the text, case and spacing as written; only when on time
    texts = ["Red nine!", "red nine", "Red  nine", ""]
    assert [judge_answer(30, t, ground_truth=29, expected="Red nine") for t in texts] == [
        (True, True),
        (True, False),
        (True, False),
        (True, False),
    ]
    assert judge_answer(32, "Red nine", ground_truth=29, expected="Red nine") == (False, False)


@pytest.mark.parametrize(
    "bad", ["00:20", "20", "0:0:5", "00:00:05.5", "00:60:00", "00:00:60", " 00:00:05", "-0:00:05", 5, None]
)
def test_malformed_clock_times_are_refused(bad):
    with pytest.raises(ValueError, match="expected a time H:MM:SS"):
        parse_clock(bad)


def test_clock_and_polls():
    assert [parse_clock(t) for t in ("0:02:22", "00:02:22", "10:00:00", "123:00:01")] == [
        142,
        142,
        36000,
        442801,
    ]
    assert poll_times(20, 29) == list(range(21, 34))
    assert (
        poll_times(50, 50) == [51, 52, 53, 54] and poll_times(30, 26) == []
    )  # due 4 s before asked: no poll
    assert [poll_of(t, 20, 29) for t in (19.0, 20.0, 20.999, 21.0, 31.5, 32.0, 33.0)] == [
        21,
        21,
        21,
        22,
        32,
        33,
        None,
    ]
    assert poll_of(20.0, 30, 26) is None


def test_metrics_per_task_type_and_pooled():
    m = proactive_metrics([Outcome("A", True, True), Outcome("A", False, False), Outcome("B", True, False)])
    assert m["task_types"] == {
        "A": {
            "total": 2,
            "time_correct": 1,
            "time_accuracy": 0.5,
            "answer_correct": 1,
            "answer_accuracy": 0.5,
        },
        "B": {
            "total": 1,
            "time_correct": 1,
            "time_accuracy": 1.0,
            "answer_correct": 0,
            "answer_accuracy": 0.0,
        },
    }
    assert (m["total"], m["time_accuracy"], m["answer_accuracy"]) == (3, 2 / 3, 1 / 3)
    assert proactive_metrics([]) == {
        "total": 0,
        "time_correct": 0,
        "time_accuracy": 0,
        "answer_correct": 0,
        "answer_accuracy": 0,
        "task_types": {},
    }
