"""ProPerMem Perfect: fire classes, per-clip outcomes, aggregate rates."""

from __future__ import annotations

import pytest

from metrics.propermem import classify_fire, clip_outcome, propermem_metrics

W = (30.0, 40.0)


def test_reminder_said_three_times_is_a_hit_not_perfect():
    o = clip_outcome([31.0, 33.0, 35.0], [1.0, 1.0, 1.0], W)
    assert o.hit and not o.perfect and o.over_trigger and o.fires == 3


def test_window_edges():
    assert classify_fire(40.0 + 2.0, W) == "in_window"
    assert classify_fire(40.0 + 2.1, W) == "late"
    assert classify_fire(30.0, W) == "in_window"
    assert classify_fire(29.9, W) == "early"
    assert clip_outcome([42.0], [1.0], W).perfect
    late = clip_outcome([42.1], [1.0], W)
    assert not late.perfect and not late.hit and late.late == 1


def test_content_threshold_and_early_fire():
    assert clip_outcome([35.0], [0.5], W).perfect
    assert not clip_outcome([35.0], [0.49], W).hit
    o = clip_outcome([10.0, 35.0], [1.0, 1.0], W)
    assert o.early == 1 and o.hit and not o.perfect


def test_any_fire_on_a_negative_is_a_false_fire():
    assert clip_outcome([], [], None).perfect
    for fires in ([5.0], [35.0], [1.0, 2.0]):
        o = clip_outcome(fires, [], None)
        assert o.false_fire and not o.perfect and not o.hit


def test_aggregate_rates():
    outcomes = [
        clip_outcome([35.0], [1.0], W),  # perfect
        clip_outcome([35.0, 36.0], [1.0, 1.0], W),  # hit, over-trigger
        clip_outcome([10.0], [1.0], W),  # early
        clip_outcome([50.0], [1.0], W),  # late
        clip_outcome([], [], None),  # silent negative
        clip_outcome([3.0], [], None),  # false fire
    ]
    m = propermem_metrics(outcomes)
    assert m["perfect_pos"] == pytest.approx(25.0)
    assert m["perfect_neg"] == pytest.approx(50.0)
    assert m["perfect"] == pytest.approx(100 * 2 / 6)
    assert m["hit"] == pytest.approx(50.0)
    assert m["early"] == pytest.approx(25.0) and m["late"] == pytest.approx(25.0)
    assert m["over_trigger"] == pytest.approx(25.0)
    assert m["false_fire"] == pytest.approx(50.0)
    assert m["mean_fires"] == pytest.approx(6 / 6)
