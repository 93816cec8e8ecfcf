"""GRPO: on-policy log-probs with the frames in the loss forward, frame sharing, reward wiring."""

from __future__ import annotations

import pytest
import torch

from data_builders.records import Stream, Target, load_streams
from rewards.grpo import build_reward
from train.grpo_loss import grpo_loss, policy_batch, token_logprobs
from train.render import RenderConfig, TurnRenderer, stream_frames
from train.rollout import group_advantages, make_windows, rollout_group


@pytest.fixture(scope="module")
def setup(tiny_model_and_processor, toy_dir):
    model, processor = tiny_model_and_processor
    renderer = TurnRenderer(processor, RenderConfig(max_pixels=64 * 64))
    streams = load_streams(toy_dir / "records.jsonl")
    frames = {s.id: stream_frames(s, toy_dir / s.video, renderer.cfg) for s in streams}
    windows = make_windows(streams, frames, renderer, window_steps=10, negative_share=0.25, seed=0)
    return model, renderer, windows


def _count_frames(model, store: dict):
    def hook(module, args, kwargs):
        grid = kwargs.get("grid_thw", args[1] if len(args) > 1 else None)
        store["frames"] += int(grid.shape[0])
        store["calls"] += 1

    return model.model.visual.register_forward_pre_hook(hook, with_kwargs=True)


def test_on_policy_logprobs_need_the_frames(setup):
    model, renderer, windows = setup
    window = next(w for w in windows if w.stream.targets)
    rollouts, _ = rollout_group(
        model, renderer, window, group_size=4, temperature=1.0, max_new_tokens=6, seed=5
    )
    batch = policy_batch(rollouts, renderer)
    assert int(batch.is_decision.sum()) == 4 * len(window.frames)
    with torch.no_grad():
        new = token_logprobs(model, renderer, rollouts, batch, temperature=1.0)
        blind = token_logprobs(model, renderer, rollouts, batch, temperature=1.0, frames=False)
    assert (new - batch.old_logprobs).abs().max() < 1e-4
    assert (blind - batch.old_logprobs).abs().max() > 1e-3  # a loss forward without frames is off-policy


def test_frames_are_encoded_once_per_window(setup):
    model, renderer, windows = setup
    window = windows[0]
    counts = {"frames": 0, "calls": 0}
    handle = _count_frames(model, counts)
    try:
        rollouts, engine = rollout_group(
            model, renderer, window, group_size=4, temperature=1.0, max_new_tokens=4, seed=1
        )
        assert counts["frames"] == len(window.frames) == engine.frames_encoded
        counts.update(frames=0, calls=0)
        batch = policy_batch(rollouts, renderer)
        token_logprobs(model, renderer, rollouts, batch, temperature=1.0)
        assert (counts["frames"], counts["calls"]) == (len(window.frames), 1)
    finally:
        handle.remove()


def test_loss_gradient_reaches_merger_and_language_model(setup):
    model, renderer, windows = setup
    window = next(w for w in windows if w.stream.targets)
    rollouts, _ = rollout_group(
        model, renderer, window, group_size=4, temperature=1.0, max_new_tokens=4, seed=2
    )
    batch = policy_batch(rollouts, renderer)
    model.zero_grad(set_to_none=True)
    loss, parts = grpo_loss(
        token_logprobs(model, renderer, rollouts, batch, 1.0), batch, [1.0, -1.0, 0.5, -0.5], 0.2
    )
    loss.backward()
    assert parts["ratio_mean"] == pytest.approx(1.0, abs=1e-5) and parts["clip_fraction"] == 0.0
    assert model.model.visual.merger.linear_fc1.weight.grad.abs().sum() > 0
    assert model.model.language_model.layers[0].mlp.up_proj.weight.grad.abs().sum() > 0
    assert all(p.grad is None for n, p in model.model.visual.named_parameters() if n.startswith("blocks"))
    model.zero_grad(set_to_none=True)


def _turns(fires: dict[float, str], steps: int = 20) -> list[dict]:
    return [{"time": float(t), "text": fires.get(float(t), "</Silence>")} for t in range(steps)]


def test_reward_orders_on_time_late_never_and_penalizes_repeats():
    reward = build_reward(
        {
            "weights": {"prs": 1.0, "redundancy": 1.0},
            "redundancy": {"lambda": 0.2, "tasks": ["accident_warning"]},
        }
    )
    target = Target(
        time=8.0,
        window=(8.0, 11.0),
        content="Warning: the two squares are about to collide.",
        label="Warning",
    ).to_dict()
    say = "</Response> Warning: the two squares are about to collide."
    cols = {"targets": [[target]] * 3, "task": ["accident_warning"] * 3}
    on_time, late, never = reward([_turns({8.0: say}), _turns({18.0: say}), _turns({})], **cols)
    assert on_time > late > never == 0.0
    once, thrice = reward(
        [_turns({8.0: say}), _turns({7.0: say, 8.0: say, 9.0: say})], **{k: v[:2] for k, v in cols.items()}
    )
    assert once - thrice >= 2 * 0.2
    assert group_advantages([on_time, late, never, late])[0] > 0


def test_windows_keep_targets_inside():
    s = Stream(
        id="s",
        source="toy",
        task="event_monitoring",
        video="v.mp4",
        clip_start=0.0,
        clip_end=40.0,
        instruction="Tell me.",
        targets=[Target(time=5.0, content="a"), Target(time=25.0, content="b")],
    )
    from train.rollout import window_stream

    w = window_stream(s, 20, 40, 1.0)
    assert (w.clip_start, w.clip_end, w.instruction_time) == (20.0, 40.0, 20.0)
    assert [t.time for t in w.targets] == [25.0]
