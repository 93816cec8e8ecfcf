"""P3I PRS core: the worked example of docs/protocols.md, assignment rules, properties, aggregation."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metrics.prs import (
    PRSScores,
    aggregate_prs,
    assign_bidirectional,
    assign_causal,
    prs_scores,
    target_scores,
)

PROPS = settings(max_examples=500, deadline=None)
times = st.floats(min_value=0.0, max_value=200.0, allow_nan=False, allow_infinity=False)
# content in [0, 1], drawn once per (reply, target) pair of a sample
content_tables = st.lists(st.lists(st.floats(0.0, 1.0), min_size=8, max_size=8), min_size=12, max_size=12)


def table_fn(table):
    return lambda k, i: table[k % len(table)][i % len(table[0])]


def test_worked_example_reproduces():
    targets, replies = [10.0, 30.0], [5.0, 12.0, 13.0, 29.0]
    s = prs_scores(targets, replies, alpha=0.05)
    s10_u, s30_u = math.exp(-0.1) / 4, 0.0
    s10_b, s30_b = math.exp(-0.1) / 3, math.exp(-0.05) / 1
    assert abs(s.u - (s10_u + s30_u) / 2) < 1e-9
    assert abs(s.b - (s10_b + s30_b) / 2) < 1e-9
    assert abs(s.u_prime - math.exp(-0.1) / 2) < 1e-9
    assert abs(s.b_prime - (math.exp(-0.1) + math.exp(-0.05)) / 2) < 1e-9
    assert target_scores(targets, replies, variant="u") == pytest.approx([s10_u, s30_u], abs=1e-12)
    assert target_scores(targets, replies, variant="b") == pytest.approx([s10_b, s30_b], abs=1e-12)
    assert [assign_causal(targets, t) for t in replies] == [(0, True), (0, False), (0, False), (0, False)]
    assert [assign_bidirectional(targets, t) for t in replies] == [0, 0, 0, 1]


def test_unsorted_targets_report_in_caller_order():
    s = target_scores([30.0, 10.0], [5.0, 12.0, 13.0, 29.0], variant="b")
    assert s == pytest.approx([math.exp(-0.05), math.exp(-0.1) / 3], abs=1e-12)
    assert prs_scores([30.0, 10.0], [29.0, 5.0, 13.0, 12.0]) == prs_scores(
        [10.0, 30.0], [5.0, 12.0, 13.0, 29.0]
    )


def test_tie_rules():
    # equal target times: the one listed first takes every reply (both variants)
    assert assign_causal([20.0, 10.0, 10.0], 15.0) == (1, False)
    assert assign_bidirectional([20.0, 10.0, 10.0], 11.0) == 1
    # equal distance: PRS-B prefers the earlier target
    assert assign_bidirectional([30.0, 10.0], 20.0) == 1
    # early reply: PRS-U sends it to the first target with pair 0 but counts it
    assert target_scores([10.0], [2.0, 10.0], variant="u") == [0.5]
    assert target_scores([10.0], [2.0], variant="u") == [0.0]
    # content is consulted only for assigned pairs, with caller indices
    calls = []
    prs_scores([30.0, 10.0], [12.0], lambda k, i: calls.append((k, i)) or 0.5)
    assert sorted(set(calls)) == [(0, 1)]


def test_negative_sample():
    assert prs_scores([], []) == PRSScores(1.0, 1.0, 1.0, 1.0)
    assert prs_scores([], [4.0]) == PRSScores(0.0, 0.0, 0.0, 0.0)


def test_aggregation_macro_and_micro():
    rows = [
        ("a", PRSScores(1.0, 0.5, 1.0, 1.0)),
        ("a", PRSScores(0.0, 0.5, 0.0, 1.0)),
        ("b", PRSScores(0.4, 0.4, 0.4, 0.4)),
    ]
    agg = aggregate_prs(rows)
    assert agg["per_task"]["a"] == pytest.approx(
        {"prs_u": 50.0, "prs_b": 50.0, "prs_u_prime": 50.0, "prs_b_prime": 100.0}
    )
    assert agg["prs_u"] == pytest.approx((50.0 + 40.0) / 2)
    assert agg["micro"]["prs_u"] == pytest.approx(100 * 1.4 / 3)
    assert agg["prs_b_prime"] == pytest.approx(70.0)
    assert agg["n"] == {"a": 2, "b": 1}


@PROPS
@given(st.lists(times, max_size=8), st.lists(times, max_size=12), content_tables, st.floats(0.0, 1.0))
def test_scores_in_unit_interval_and_primed_not_lower(tt, rt, table, alpha):
    s = prs_scores(tt, rt, table_fn(table), alpha)
    for v in s:
        assert 0.0 <= v <= 1.0
    assert s.u_prime >= s.u
    assert s.b_prime >= s.b


@PROPS
@given(
    st.lists(times, min_size=1, max_size=8),
    st.lists(times, min_size=1, max_size=12),
    content_tables,
    st.data(),
)
def test_duplicate_reply_never_raises(tt, rt, table, data):
    k = data.draw(st.integers(0, len(rt) - 1))
    before = prs_scores(tt, rt, table_fn(table))
    dup = rt + [rt[k]]
    # the duplicate carries the content of the reply it copies
    after = prs_scores(tt, dup, lambda j, i: table_fn(table)(k if j == len(rt) else j, i))
    assert after.u <= before.u + 1e-12
    assert after.b <= before.b + 1e-12
    assert after.u_prime == pytest.approx(before.u_prime, abs=1e-12)
    assert after.b_prime == pytest.approx(before.b_prime, abs=1e-12)


@PROPS
@given(st.lists(times, min_size=1, max_size=8), st.data())
def test_exact_reply_with_full_content_scores_one_for_its_target(tt, data):
    i = data.draw(st.integers(0, len(tt) - 1))
    first = tt.index(tt[i])  # an equal-time target listed earlier wins ties
    for variant in ("u", "b"):
        assert target_scores(tt, [tt[i]], variant=variant)[first] == 1.0


@PROPS
@given(
    times,
    st.lists(st.floats(0.0, 100.0), min_size=1, max_size=10),
    st.data(),
    st.floats(0.0, 50.0),
    content_tables,
)
def test_moving_a_late_reply_away_never_raises(tau, offsets, data, shift, table):
    k = data.draw(st.integers(0, len(offsets) - 1))
    replies = [tau + o for o in offsets]
    moved = list(replies)
    moved[k] += shift
    fn = table_fn(table)
    before, after = prs_scores([tau], replies, fn), prs_scores([tau], moved, fn)
    assert after.u <= before.u + 1e-12
    assert after.b <= before.b + 1e-12


def reference_prs(tt, rt, content, alpha):
    """The definitions of docs/protocols.md, written out naively (no sorting, no bisection)."""
    n = len(tt)
    if n == 0:
        v = 0.0 if rt else 1.0
        return PRSScores(v, v, v, v)
    out = []
    for variant in ("u", "b"):
        assigned = {i: [] for i in range(n)}
        for k, t in enumerate(rt):
            if variant == "u":
                before = [i for i in range(n) if tt[i] <= t]
                if not before:
                    i = min(range(n), key=lambda j: (tt[j], j))
                    assigned[i].append(0.0)
                    continue
                i = min(before, key=lambda j: (-tt[j], j))
            else:
                i = min(range(n), key=lambda j: (abs(t - tt[j]), tt[j], j))
            assigned[i].append(content(k, i) * math.exp(-alpha * abs(t - tt[i])))
        plain = sum(max(s) / len(s) for s in assigned.values() if s) / n
        primed = sum(max(s) for s in assigned.values() if s) / n
        out.append((plain, primed))
    return PRSScores(out[0][0], out[1][0], out[0][1], out[1][1])


@PROPS
@given(
    st.lists(st.integers(0, 30).map(float), max_size=6),  # integer times: many exact ties
    st.lists(st.integers(0, 30).map(float) | times, max_size=10),
    content_tables,
)
def test_fast_path_equals_the_written_definitions(tt, rt, table):
    fn = table_fn(table)
    fast, ref = prs_scores(tt, rt, fn, 0.05), reference_prs(tt, rt, fn, 0.05)
    for a, b in zip(fast, ref, strict=True):
        assert a == pytest.approx(b, abs=1e-12)
    for variant, value in (("u", ref.u), ("b", ref.b)):
        per_target = target_scores(tt, rt, fn, 0.05, variant)
        assert len(per_target) == len(tt)
        if tt:
            assert math.fsum(per_target) / len(tt) == pytest.approx(value, abs=1e-12)
