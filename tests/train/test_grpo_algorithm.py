"""GRPO's algorithm is one module (``train.grpo.algorithm``): a new advantage estimator and a new
objective, registered from here and written nowhere else, pass the config check and drive an update
of the tiny model."""

from __future__ import annotations

import copy

import pytest
import torch

from train.grpo.algorithm import ADVANTAGES, OBJECTIVES, advantage_estimator
from train.grpo.config import GRPOStageConfig, check_choices
from train.grpo.loop import GRPOLoop
from train.grpo.rewards import Scored


@advantage_estimator(per_step=False)
def leave_one_out(rewards: list[list[float]], gamma: float, std: float | None = None) -> list[list[float]]:
    """RLOO: each rollout's reward minus the mean of the group's other rewards (no scaling)."""
    flat = [row[0] for row in rewards]
    return [[r - (sum(flat) - r) / (len(flat) - 1)] for r in flat]


def root_tokens(row_tokens: torch.Tensor, group_tokens: int, counts) -> torch.Tensor:
    """Each rollout's token sum over the square root of its length, averaged over rollouts."""
    return 1.0 / (row_tokens.float().sqrt() * counts.rollouts)


def replies(turns: list[dict], targets, task: str) -> Scored:
    """A reward of the real rollouts: how many times the policy spoke."""
    n = sum(t["text"] != "</Silence>" for t in turns)
    return Scored(float(n), {"replies": float(n)})


@pytest.fixture
def registered():
    ADVANTAGES.add("leave_one_out", f"{__name__}:leave_one_out")
    OBJECTIVES.add("root_tokens", f"{__name__}:root_tokens")
    try:
        yield
    finally:
        ADVANTAGES.remove("leave_one_out")
        OBJECTIVES.remove("root_tokens")


@pytest.fixture(scope="module")
def setup(grpo_windows):
    model, renderer, windows = grpo_windows
    return copy.deepcopy(model).float(), renderer, windows


def test_the_config_check_accepts_exactly_the_registered_names(registered):
    check_choices(GRPOStageConfig(credit="leave_one_out", loss_type="root_tokens"))
    ADVANTAGES.remove("leave_one_out")
    with pytest.raises(ValueError, match="grpo.credit='leave_one_out': choose one of sequence, decision$"):
        check_choices(GRPOStageConfig(credit="leave_one_out"))
    with pytest.raises(ValueError, match="grpo.loss_type='token_root'"):
        check_choices(GRPOStageConfig(loss_type="token_root"))


def test_a_registered_estimator_and_objective_drive_one_update(setup, registered, tmp_path):
    """The loop takes the new estimator's advantages (one per rollout, on every token of it) and the
    new objective's weights: at the first update (ratio 1) the loss is ``-sum_rows sqrt(n_row) A_row / R``."""
    model, renderer, windows = setup
    cfg = GRPOStageConfig(
        credit="leave_one_out",
        loss_type="root_tokens",
        windows_per_step=1,
        num_generations=3,
        max_new_tokens=4,
        learning_rate=1e-3,
    )
    check_choices(cfg)
    loop = GRPOLoop(cfg, model, renderer.processor, renderer, replies, windows, tmp_path)
    seen, scored = [], loop._scored
    loop._scored = lambda rolled: seen.extend(scored(rolled)) or seen  # the loop's own scoring, kept
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    row = loop.update()
    (g,) = seen
    assert len(set(g.rewards)) > 1  # the rollouts spoke a different number of times
    want = [r - (sum(g.rewards) - r) / 2 for r in g.rewards]
    assert g.advantages == [[a] * len(r.turns) for a, r in zip(want, g.rollouts, strict=True)]
    n_row = torch.bincount(g.batch.rows).double()
    expected = -float((n_row.sqrt() * torch.tensor(want, dtype=torch.float64)).sum()) / 3
    assert row["loss"] == pytest.approx(expected, rel=1e-3, abs=1e-4)
    assert row["grad_norm"] > 0 and loop.timing["loss_forwards"] == 1
    moved = [n for n, p in model.named_parameters() if not torch.equal(p, before[n])]
    assert "model.language_model.layers.0.mlp.up_proj.weight" in moved
