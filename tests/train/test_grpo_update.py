"""The GRPO update's cost and its equivalences: one loss forward per window (its G rollouts as the
rows of one batch) gives the loss and gradients of G one-rollout forwards; the optimizer's foreach
step moves the weights as the per-tensor loop does; the loop reports where an update's time went."""

from __future__ import annotations

import copy

import pytest
import torch
import yaml

from data_builders.config import CONF_DIR
from train.grpo.algorithm import UpdateCounts, grpo_loss, token_advantages, token_weights
from train.grpo.config import GRPOStageConfig, reward_spec
from train.grpo.loop import GRPOLoop
from train.grpo.parallel import Single
from train.grpo.policy import policy_batch, token_logprobs
from train.grpo.rewards import build_reward
from train.grpo.rollout import rollout_group


@pytest.fixture(scope="module")
def setup(grpo_windows):
    model, renderer, windows = grpo_windows
    return copy.deepcopy(model).float(), renderer, windows


def _loss_and_grads(model, renderer, groups, adv, counts):
    """Summed loss, the new log-probs and every trained parameter's gradient over ``groups`` (lists
    of rollouts, each list one loss forward)."""
    model.zero_grad(set_to_none=True)
    total, news = 0.0, []
    for rollouts, advantages in zip(groups, adv, strict=True):
        batch = policy_batch(rollouts, renderer)
        new = token_logprobs(model, renderer, rollouts, batch, temperature=1.0)
        weights = token_weights(batch, "grpo", counts)
        loss, _ = grpo_loss(new, batch, token_advantages(batch, advantages), 0.2, weights=weights)
        loss.backward()
        total += float(loss.detach())
        news.append(new.detach())
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return total, torch.cat(news), grads


def test_one_batched_forward_per_window_equals_one_forward_per_rollout(setup):
    """The G rollouts of a window, right-padded into one batch, give the same log-probs, loss and
    gradients (float32) as G separate one-rollout forwards: the padding changes nothing."""
    model, renderer, windows = setup
    window = next(w for w in windows if w.targets)
    rollouts, _ = rollout_group(model, renderer, window, 4, 1.0, 6, seed=5)
    assert len({len(r.result.tokens) for r in rollouts}) > 1  # rows of different lengths: padding
    steps = len(window.frames)
    adv = [[a] * steps for a in (1.0, -1.0, 0.5, -0.25)]
    counts = UpdateCounts(rollouts=4, groups=1, tokens=0, max_tokens=steps * 8)
    batched, new_b, grads_b = _loss_and_grads(model, renderer, [rollouts], [adv], counts)
    apart, new_a, grads_a = _loss_and_grads(
        model, renderer, [[r] for r in rollouts], [[a] for a in adv], counts
    )
    assert abs(batched) > 1e-3 and batched == pytest.approx(apart, abs=1e-6)
    assert (new_b - new_a).abs().max() < 1e-5
    assert grads_b.keys() == grads_a.keys() and len(grads_b) > 10
    for name, g in grads_b.items():
        assert torch.allclose(g, grads_a[name], rtol=1e-4, atol=1e-7), name


def test_the_optimizer_steps_every_tensor_at_once_as_the_per_tensor_loop_does(setup):
    """``Single``'s AdamW runs foreach (one kernel per operation over every tensor) and moves the
    weights exactly as the per-tensor loop does, over three steps."""
    model, _, _ = setup
    fast, slow = copy.deepcopy(model), copy.deepcopy(model)
    par = Single()
    par.setup(fast, learning_rate=1e-3, weight_decay=0.01, max_grad_norm=1.0)
    assert par.optimizer.defaults["foreach"] is True
    params = [p for p in slow.parameters() if p.requires_grad]
    loop = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01, foreach=False)
    gen = torch.Generator().manual_seed(0)
    for _ in range(3):
        for a, b in zip(fast.parameters(), slow.parameters(), strict=True):
            a.grad = torch.randn(a.shape, generator=gen)
            b.grad = a.grad.clone()
        par.step()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        loop.step()
        loop.zero_grad(set_to_none=True)
    for (name, a), b in zip(fast.named_parameters(), slow.parameters(), strict=True):
        assert torch.equal(a, b), name


def test_an_update_reports_its_loss_forwards_and_where_its_time_went(setup, tmp_path):
    """``GRPOLoop.timing`` after an update: one loss forward per window with signal, G rows each,
    the forward, backward and optimizer seconds, and what the forwards fed the model."""
    from perf.grpo import every_window_live

    model, renderer, windows = setup
    cfg = GRPOStageConfig(windows_per_step=2, num_generations=3, max_new_tokens=4, learning_rate=1e-4)
    reward = build_reward(reward_spec(yaml.safe_load((CONF_DIR / "reward" / "prs.yaml").read_text())))
    loop = GRPOLoop(cfg, copy.deepcopy(model), renderer.processor, renderer, reward, windows, tmp_path)
    every_window_live(loop)
    row = loop.update()
    t = loop.timing
    assert (t["loss_forwards"], t["loss_rows"]) == (2, 6) and "grad_norm" in row
    assert t["update_forward_s"] > 0 and t["update_backward_s"] > 0 and t["optimizer_s"] > 0
    assert t["update_forward_s"] + t["update_backward_s"] + t["optimizer_s"] <= row["update_s"]
    assert t["loss_positions"] >= t["loss_tokens"] > 6 * 10  # every row holds its 10 steps at least
    assert 0 <= t["repeated_prefix_tokens"] < t["loss_tokens"]
