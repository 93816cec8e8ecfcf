"""EgoServe core: the official matching, counting and averaging rules; window and name readings."""

from __future__ import annotations

import random

import numpy as np
import pytest

from metrics.egoserve import (
    DATASET_SUBTYPES,
    ServiceEvent,
    SubtypeCounts,
    egoserve_report,
    match_greedy,
    numpy_mean,
    prf,
    score_dataset,
)
from metrics.egoserve_rules import (
    official_main_type,
    official_subtype,
    parse_day_window,
    parse_pred_window,
    parse_time_window,
    parse_video_window,
    strict_subtype,
)


def ev(start, end=None, sub="safety", unit="v", main=None):
    return ServiceEvent(unit, sub, float(start), float(start if end is None else end), main_type=main)


def test_ties_go_to_the_earliest_centre_not_the_listed_order():
    # GT1 [100, 120], GT2 [128, 130], tol 10; predictions listed 118 then 101. Both are inside GT1
    # (distance 0); sorted by centre, 101 comes first and wins; 118 is then 10 s before GT2: 2 matches.
    # (Taking the listed order would give GT1 118 and leave 101 out of GT2's reach: 1 match.)
    assert match_greedy([ev(100, 120), ev(128, 130)], [ev(118), ev(101)], 10.0) == [(0, 1), (1, 0)]
    # equal distance outside the window: 95 and 115 are both 5 s from [100, 110]; 95 (earlier) wins
    assert match_greedy([ev(100, 110)], [ev(115), ev(95)], 10.0) == [(0, 1)]
    # equal centres keep the reading order
    assert match_greedy([ev(100, 110)], [ev(105), ev(105)], 10.0) == [(0, 0)]


def test_distance_is_to_the_window_and_bounds_are_inclusive():
    # distance 0 anywhere inside [100, 120]: 111 (1 s from the centre) does not beat 101 (earlier)
    assert match_greedy([ev(100, 120)], [ev(111), ev(101)], 10.0) == [(0, 1)]
    # outside, the nearer edge counts: 123 (3 s after the end) beats 96 (4 s before the start)
    assert match_greedy([ev(100, 120)], [ev(96), ev(123)], 10.0) == [(0, 1)]
    assert match_greedy([ev(100, 110)], [ev(120.0)], 10.0) == [(0, 0)]  # end + tol: in
    assert match_greedy([ev(100, 110)], [ev(90.0)], 10.0) == [(0, 0)]  # start - tol: in
    assert match_greedy([ev(100, 110)], [ev(120.001), ev(89.999)], 10.0) == []
    # 21.433 + 10.0 == 31.433 in doubles: the official inclusive edge holds on fractional windows
    assert match_greedy([ev(19.503, 21.433)], [ev(31.433)], 10.0) == [(0, 0)]


def test_ground_truths_are_visited_by_centre_and_a_prediction_matches_once():
    # GT [0, 100] (centre 50) and GT [40, 42] (centre 41): the second is visited first and takes 41
    assert match_greedy([ev(0, 100), ev(40, 42)], [ev(41)], 5.0) == [(1, 0)]


def test_main_type_must_agree_where_checked():
    gt = [ev(10, 12, main="Instant")]
    wrong = [ev(11, main="Short-Term")]
    assert match_greedy(gt, wrong, 10.0, check_main=True) == []
    assert match_greedy(gt, wrong, 10.0, check_main=False) == [(0, 0)]


def test_prf_zero_conventions():
    assert prf(SubtypeCounts(0, 0, 0)) == (0.0, 0.0, 0.0)
    assert prf(SubtypeCounts(0, 3, 0)) == (0.0, 0.0, 0.0)
    assert prf(SubtypeCounts(2, 4, 2)) == (0.5, 1.0, 2 * 0.5 * 1.0 / 1.5)


def test_numpy_mean_is_bit_identical_to_numpy():
    rng = random.Random(3)
    for _ in range(3000):
        xs = [rng.random() * rng.choice([1.0, 1e-3, 1e4]) for _ in range(rng.randint(1, 300))]
        assert numpy_mean(xs) == float(np.mean(np.array(xs)))
    # ten F1 values where a plain left-to-right sum differs from numpy in the last bit
    xs = [0.1, 0.2, 0.3, 0.7, 0.9, 0.25, 1 / 3, 2 / 3, 0.8, 0.6]
    assert numpy_mean(xs) == float(np.mean(xs))


def test_dataset_counts_only_its_own_subtypes_and_the_macro_skips_inactive_ones():
    # HoloAssist: safety GT [10, 12] matched by a safety prediction; a memory_recall prediction is no
    # HoloAssist subtype: micro only. Official: safety P=R=F1=1, Overall 100; micro 1/2/1.
    s = score_dataset(
        [ev(10, 12)], [ev(11), ev(11, sub="memory_recall")], 10.0, DATASET_SUBTYPES["holoassist"]
    )
    r = egoserve_report({"holoassist": s})
    assert r["overall_f1"] == 100.0 and list(r["per_subtype"]) == ["safety"]
    assert (r["micro"]["matched"], r["micro"]["n_pred"], r["micro"]["n_gt"]) == (1, 2, 1)
    # the same events scored on all ten subtypes (the strict view): memory_recall F1 0 -> mean 50
    assert (
        egoserve_report({"x": score_dataset([ev(10, 12)], [ev(11), ev(11, sub="memory_recall")], 10.0)})[
            "overall_f1"
        ]
        == 50.0
    )


def test_counts_sum_across_datasets_before_the_macro():
    # safety: EgoLife 1/1/2, HoloAssist 0/1/0 -> summed 1/2/2: P .5 R .5 F1 .5; tool_use EgoLife 1/1/1
    # -> F1 1. Overall = mean(0.5, 1) = 75 (a per-dataset macro would give mean(mean(.67, 1), 0) = 41.7)
    ego = score_dataset(
        [ev(10, 12), ev(500, 510), ev(50, 52, sub="tool_use")], [ev(11), ev(51, sub="tool_use")], 60.0
    )
    holo = score_dataset([], [ev(900)], 10.0, DATASET_SUBTYPES["holoassist"])
    r = egoserve_report({"egolife": ego, "holoassist": holo})
    assert r["overall_f1"] == 75.0
    assert (
        r["per_dataset"]["holoassist"]["overall_f1"] == 0.0
        and r["per_dataset"]["egolife"]["overall_f1"] == 100 * (2 / 3 + 1) / 2
    )
    assert egoserve_report({})["overall_f1"] == 0.0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("DAY1 11:09:42-11:10:00", (1, 40182.0, 40200.0)),
        ("DAY1-11:09:42-11:10:00", (1, 40182.0, 40200.0)),
        ("DAY12 - 9:05:00 -10:00:00.25", (12, 32700.0, 36000.25)),
        ("note: DAY3 10:00:05 - 10:00:06 approx", (3, 36005.0, 36006.0)),
        ("DAY1 00:00:72.5-25:00:00", (1, 72.5, 90000.0)),  # no range check, as in the official code
        ("DAY1 11:09:42–11:10:00", None),  # en dash
        ("day1 11:09:42-11:10:00", None),
        ("11:09:42-11:10:00", None),
        ("DAY1 9:5:00-9:6:00", None),
        ("DAY1 10:00-10:05", None),
        ("", None),
    ],
)
def test_official_day_window(text, expected):
    assert parse_day_window(text) == expected


def test_official_windows_of_other_kinds():
    with pytest.raises(TypeError):
        parse_day_window(None)  # the official EgoLife reader stops on a null window
    assert parse_pred_window(None) is None and parse_pred_window("") is None  # HoloAssist/CC4D skip it
    assert parse_pred_window("DAY7 00:01:24-00:01:25") == (84.0, 85.0)
    assert parse_video_window("19.503-21.433") == (19.503, 21.433)
    assert parse_video_window("00:00:19.503-00:00:21.433") == (19.503, 21.433)
    assert parse_video_window("00:02:10.5-00:02:12") == (130.5, 132.0)
    assert parse_video_window("01:24.100-01:24.700") == (84.1, 84.7)
    assert parse_video_window("300 - 305") == (300.0, 305.0)
    assert parse_video_window("19.5–21.4") is None and parse_video_window("-5-3") is None
    with pytest.raises(TypeError):
        parse_video_window(19.5)


def test_strict_window_reading():
    assert parse_time_window("DAY3 09:12:33–09:12:40", absolute_days=True) == (
        3 * 86400 + 33153.0,
        3 * 86400 + 33160.0,
        3 * 86400 + 33156.5,
    )
    assert parse_time_window("DAY1 23:59:50-DAY2 00:00:10", absolute_days=True)[2] == 2 * 86400.0
    assert parse_time_window("DAY1 09:12:33-09:12:40") == (33153.0, 33160.0, 33156.5)
    assert parse_time_window("01:24.1") == (84.1, 84.1, 84.1)
    for bad in ("half past nine", "10:00:00-09:00:00", "00:61:00-00:62:00", None):
        with pytest.raises(ValueError):
            parse_time_window(bad)
    with pytest.raises(ValueError, match="no DAYd"):
        parse_time_window("11:09:42-11:10:00", absolute_days=True)


def test_subtype_names_per_dataset():
    assert official_subtype("egolife", "Episodic Memory Recall") == "memory_recall"
    assert official_subtype("egolife", "Episodic Task Reminder") == "task_reminder"
    assert official_subtype("egolife", " LONG-HORIZON MEMORY-LINK ") == "memory_link_contextual"
    assert official_subtype("egolife", "Personal Progress Feedback") is None  # dropped on EgoLife
    assert official_subtype("holoassist", "Personal Progress Feedback") == "Personal Progress Feedback"  # raw
    assert official_subtype("holoassist", "Memory Recall") == "Memory Recall"  # raw: micro only
    assert official_subtype("captaincook4d", "Episodic Memory Recall") is None  # skipped outright
    assert (
        official_subtype("captaincook4d", "Episodic Memory Recall", prediction=False)
        == "Episodic Memory Recall"
    )
    assert official_subtype("egolife", "Tool-Use") == "Tool-Use"  # exact spellings only
    assert official_main_type("egolife", "Episodic proactive services") == "Episodic"
    assert official_main_type("holoassist", "Episodic") == "Episodic"  # unknown there: kept as written
    assert strict_subtype("Tool-Use") == "tool_use" and strict_subtype("Personal Progress Feedback") is None
