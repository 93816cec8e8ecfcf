"""ESTP-F1 (metrics.estp): the paper's tolerances, optimal times and averaging, by hand and against
an independent transcription of its formulas on seeded random questions."""

from __future__ import annotations

import random

import pytest

from metrics.estp import Answer, aggregate, answer_from_content, optimal_time, score_question, time_score


def test_tolerance_edges_optimal_times_and_averaging():
    # OR: optimal = start; window [10, 14] accepts replies in [9, 16]; scale = 4 + 1 + 2 = 7
    a = Answer(10.0, 14.0, optimal_time("OR", 10.0, 14.0))
    q = score_question([a], [8.99, 9.0, 16.0, 16.01], lambda k, j: 5.0)
    # both edges count: 9 s -> (5 + 5 * (1 - 1/7)) / 10, 16 s -> (5 + 5 * (1 - 6/7)) / 10; their mean
    assert q.matches == (2,) and (q.fp, q.fn) == (2, 0)
    assert q.tp == pytest.approx(((5 + 30 / 7) / 10 + (5 + 5 / 7) / 10) / 2)  # (0.9286 + 0.5714) / 2 = 0.75
    # P = 0.75 / (1 matched + 2 FP), R = 0.75 / 1
    assert (q.precision, q.recall) == pytest.approx((0.25, 0.75))
    assert optimal_time("TU", 10.0, 14.0) == 12.0 and optimal_time("ORC", 10.0, 14.0) == 10.0
    # a point interval: scale max(1, 0 + 3) = 3
    assert time_score(2.0, Answer(1.0, 1.0, 1.0)) == pytest.approx(5 * (1 - 1 / 3))


def test_quality_enters_even_without_false_positives():
    a = Answer(10.0, 14.0, 12.0)
    good = score_question([a], [12.0], lambda k, j: 5.0)
    wrong = score_question([a], [12.0], lambda k, j: answer_from_content(0.0))  # answer score 1
    assert (good.f1, wrong.f1) == pytest.approx((1.0, 0.6))  # (5 + 5) / 10 and (1 + 5) / 10


def test_one_reply_counts_for_every_answer_it_matches():
    # windows [10, 12] and [13, 15] overlap with the tolerances at [12, 14]: 13 s matches both
    answers = [Answer(10.0, 12.0, 10.0), Answer(13.0, 15.0, 13.0)]
    q = score_question(answers, [13.0], lambda k, j: 5.0)
    assert q.matches == (1, 1) and (q.fp, q.fn) == (0, 0)
    assert q.per_answer == pytest.approx(((5 + 5 * (1 - 3 / 5)) / 10, 1.0))


def test_aggregate_is_the_mean_over_task_types():
    table = aggregate({"OR": [1.0, 0.0], "AR": [0.5], "TU": [0.25]})
    assert table["tasks"] == {"OR": 50.0, "AR": 50.0, "TU": 25.0}
    assert table["categories"] == {"Explicit": 50.0, "Implicit": 25.0}
    assert table["ESTP-F1"] == pytest.approx(125 / 3)


def _reference(answers, times, rating, ant=1.0, lat=2.0):
    """The paper's formulas written from the replies' side: each reply's set of matched answers."""
    hits = [{k for k, a in enumerate(answers) if a.start - ant <= t <= a.end + lat} for t in times]
    s = []
    for k, a in enumerate(answers):
        pk = [j for j, h in enumerate(hits) if k in h]
        scale = max(1.0, a.end - a.start + ant + lat)
        qual = [(rating[k][j] + 5 * max(0.0, 1 - abs(times[j] - a.optimal) / scale)) / 10 for j in pk]
        s.append(sum(qual) / len(qual) if pk else 0.0)
    fp = sum(1 for h in hits if not h)
    matched = sum(1 for k in range(len(answers)) if any(k in h for h in hits))
    p = sum(s) / (matched + fp) if matched + fp else 0.0
    r = sum(s) / len(answers)
    return (2 * p * r / (p + r) if p + r else 0.0), fp, len(answers) - matched


def test_matches_an_independent_transcription_on_300_random_questions():
    rng = random.Random(20251016)
    for case in range(300):
        answers = []
        for _ in range(rng.randint(1, 5)):
            s = round(rng.uniform(0, 100), 1)
            e = s + rng.choice([0.0, 0.5, round(rng.uniform(0, 20), 1)])
            answers.append(Answer(s, e, optimal_time(rng.choice(["OR", "AR"]), s, e)))
        times = sorted(round(rng.uniform(-2, 125), 1) for _ in range(rng.randint(0, 12)))
        times += [a.start - 1.0 for a in answers[:1]] + [a.end + 2.0 for a in answers[-1:]]  # the edges
        rating = [[rng.randint(1, 5) for _ in times] for _ in answers]
        got = score_question(answers, times, lambda k, j, rating=rating: float(rating[k][j]))
        f1, fp, fn = _reference(answers, times, rating)
        assert (got.f1, got.fp, got.fn) == (pytest.approx(f1, abs=1e-12), fp, fn), case
