"""EgoServe core: time-window strings, greedy matching with tolerance, P/R/F1 and Overall."""

from __future__ import annotations

import pytest

from rewards.egoserve import (
    ServiceEvent,
    SubtypeCounts,
    combine_counts,
    egoserve_metrics,
    match_events,
    match_services,
    parse_time_window,
)


@pytest.mark.parametrize(
    ("text", "absolute", "expected"),
    [
        ("19.503-21.433", False, (19.503, 21.433)),
        ("19.503–21.433", False, (19.503, 21.433)),
        ("00:00:19.503-00:00:21.433", False, (19.503, 21.433)),
        ("00:00:19.503 – 00:00:21.433", False, (19.503, 21.433)),
        ("01:24.100-01:24.700", False, (84.1, 84.7)),
        ("DAY1 11:09:42-11:10:00", True, (86400 + 40182.0, 86400 + 40200.0)),
        ("DAY3 09:12:33–09:12:40", True, (3 * 86400 + 33153.0, 3 * 86400 + 33160.0)),
        ("DAY1-11:09:42-11:10:00", True, (126582.0, 126600.0)),
        ("DAY1 23:59:50-DAY2 00:00:10", True, (86400 + 86390.0, 2 * 86400 + 10.0)),
        ("DAY1 09:12:33-09:12:40", False, (33153.0, 33160.0)),  # video-relative clock: day dropped
    ],
)
def test_parse_time_window_forms(text, absolute, expected):
    assert parse_time_window(text, absolute_days=absolute) == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize(
    "text", ["", "soon", "12-", "10-5", "01:75.0-01:80.0", "00:61:00-00:62:00", "1:2:3:4-5"]
)
def test_parse_time_window_rejects(text):
    with pytest.raises(ValueError):
        parse_time_window(text)


def test_absolute_window_needs_a_day():
    with pytest.raises(ValueError, match="DAYd"):
        parse_time_window("11:09:42-11:10:00", absolute_days=True)


def test_tolerance_edges_inclusive():
    gt = [(100.0, 110.0)]
    assert match_events(gt, [90.0], 10.0) == [(0, 0)]
    assert match_events(gt, [120.0], 10.0) == [(0, 0)]
    assert match_events(gt, [89.999], 10.0) == []
    assert match_events(gt, [120.001], 10.0) == []


def test_greedy_follows_gt_centers_not_listing_order():
    # GT B (center 16) is listed first but A (center 10) goes first and takes the only prediction at 13
    gt = [(14.0, 18.0), (10.0, 10.0)]
    assert match_events(gt, [13.0], 10.0) == [(1, 0)]
    # with two predictions each GT gets one, A still choosing first
    assert sorted(match_events(gt, [13.0, 30.0], 20.0)) == [(0, 1), (1, 0)]


def test_distance_zero_inside_and_ties_listed_first():
    assert match_events([(10.0, 20.0)], [19.0, 11.0], 5.0) == [(0, 0)]  # both inside: listed first
    assert match_events([(10.0, 20.0)], [23.0, 8.0], 5.0) == [(0, 1)]  # 2 s from an edge beats 3 s


def test_other_subtype_or_unit_never_matches():
    g = [ServiceEvent("v1", "safety", 10.0, 12.0)]
    p = [ServiceEvent("v1", "tool_use", 11.0, 11.0), ServiceEvent("v2", "safety", 11.0, 11.0)]
    counts, pairs = match_services(g, p, 10.0)
    assert pairs == []
    assert counts["safety"] == SubtypeCounts(0, 1, 1)
    assert counts["tool_use"] == SubtypeCounts(0, 1, 0)


def test_metrics_macro_over_active_and_micro():
    counts = {
        "safety": SubtypeCounts(matched=2, n_pred=4, n_gt=2),  # P .5 R 1 F1 2/3
        "tool_use": SubtypeCounts(matched=0, n_pred=0, n_gt=3),  # F1 0
        "memory_recall": SubtypeCounts(),  # inactive: not averaged
    }
    m = egoserve_metrics(counts)
    assert m["overall_f1"] == pytest.approx(100 * (2 / 3 + 0) / 2)
    assert set(m["per_subtype"]) == {"safety", "tool_use"}
    assert m["per_subtype"]["safety"]["p"] == pytest.approx(50.0)
    assert m["micro"]["p"] == pytest.approx(50.0) and m["micro"]["r"] == pytest.approx(40.0)
    assert m["micro"]["f1"] == pytest.approx(100 * 2 * 0.5 * 0.4 / 0.9)


def test_cross_dataset_sums_counts_before_macro():
    a = {"safety": SubtypeCounts(1, 1, 1)}
    b = {"safety": SubtypeCounts(0, 1, 3), "tool_use": SubtypeCounts(1, 2, 1)}
    total = combine_counts(a, b)
    assert total == {"safety": SubtypeCounts(1, 2, 4), "tool_use": SubtypeCounts(1, 2, 1)}
    m = egoserve_metrics(total)
    f_safety = 2 * 0.5 * 0.25 / 0.75
    f_tool = 2 * 0.5 * 1.0 / 1.5
    assert m["overall_f1"] == pytest.approx(100 * (f_safety + f_tool) / 2)
