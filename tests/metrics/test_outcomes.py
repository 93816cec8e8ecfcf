"""Per-fire outcomes agree with the scorers' own numbers: PRS-U', ProPerMem's clip outcome, EgoServe's
matched counts, on random streams."""

from __future__ import annotations

import random

import pytest

from metrics.egoserve import DATASET_SUBTYPES, SUBTYPES, ServiceEvent, score_dataset, unit_outcomes
from metrics.outcomes import FIRE_OUTCOMES, TARGET_OUTCOMES
from metrics.propermem import clip_outcome
from metrics.propermem import fire_outcomes as propermem_outcomes
from metrics.prs import fire_outcomes as prs_outcomes
from metrics.prs import target_scores


@pytest.mark.parametrize("seed", range(40))
def test_prs_credited_fire_carries_the_target_s_primed_causal_score(seed):
    rng = random.Random(seed)
    targets = [float(rng.randint(0, 60)) for _ in range(rng.randint(1, 4))]
    replies = sorted(float(rng.randint(0, 80)) for _ in range(rng.randint(0, 8)))
    good = {k: rng.random() < 0.7 for k in range(len(replies))}

    def content(k, i):
        return 1.0 if good[k] else 0.0

    o = prs_outcomes(targets, replies, content)
    primed = target_scores(targets, replies, content, variant="u", primed=True)
    assert len(o.fires) == len(replies) and len(o.targets) == len(targets)
    assert {f.outcome for f in o.fires} <= set(FIRE_OUTCOMES) and set(o.targets) <= set(TARGET_OUTCOMES)
    for i, word in enumerate(o.targets):
        credited = [f for f in o.fires if f.target == i and f.outcome in ("hit", "late", "wrong")]
        if word == "missed":
            assert credited == [] and primed[i] == 0.0
        else:
            assert [f.outcome for f in credited] == [word]
            assert credited[0].score == pytest.approx(primed[i])
    assert sum(f.outcome == "early" for f in o.fires) == sum(r < min(targets) for r in replies)


def test_prs_negative_stream_every_fire_is_a_false_alarm():
    assert [f.outcome for f in prs_outcomes([], [1.0, 2.0]).fires] == ["false_alarm", "false_alarm"]


@pytest.mark.parametrize("seed", range(40))
def test_propermem_outcomes_match_the_clip_outcome(seed):
    rng = random.Random(seed)
    window = None if rng.random() < 0.3 else (20.0, 20.0 + rng.randint(0, 10))
    fires = sorted(float(rng.randint(0, 40)) for _ in range(rng.randint(0, 5)))
    scores = [rng.choice([0.0, 0.4, 0.6, 1.0]) for _ in fires]
    o = propermem_outcomes(fires, scores, window)
    clip = clip_outcome(fires, scores, window)
    words = [f.outcome for f in o.fires]
    if window is None:
        assert words == ["false_alarm"] * len(fires) and o.targets == []
        return
    assert words.count("early") == clip.early and words.count("late") == clip.late
    assert ("hit" in words) == clip.hit == (o.targets == ["hit"])
    assert clip.perfect == (words == ["hit"])


@pytest.mark.parametrize("seed", range(40))
def test_egoserve_hits_are_the_matched_counts(seed):
    rng = random.Random(seed)
    subs = SUBTYPES[:3] + ("memory_recall",)
    gt = [
        ServiceEvent("u", rng.choice(subs[:3]), s, s + rng.randint(0, 20))
        for s in (float(rng.randint(0, 300)) for _ in range(rng.randint(0, 4)))
    ]
    pred = [ServiceEvent("u", rng.choice(subs), t, t) for t in (float(rng.randint(0, 320)) for _ in range(6))]
    scored = DATASET_SUBTYPES["holoassist"]
    o = unit_outcomes(gt, pred, 10.0, scored)
    s = score_dataset(gt, pred, 10.0, scored)
    assert [f.outcome for f in o.fires].count("hit") == s.micro.matched == o.targets.count("hit")
    assert o.targets.count("missed") == len(gt) - s.micro.matched
    for f, p in zip(o.fires, pred, strict=True):
        if p.subtype == "memory_recall":  # not a HoloAssist subtype: it can match nothing
            assert f.outcome == "false_alarm"
