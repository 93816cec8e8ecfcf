"""GRPO: on-policy log-probs with the frames in the loss forward, frame sharing, reward wiring."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from data_builders.records import Stream, Target
from data_builders.stream_steps import target_step
from engine.render import RESPONSE_CLASS
from engine.streaming import EngineConfig, StreamingEngine
from train.grpo.algorithm import (
    OBJECTIVES,
    UpdateCounts,
    batch_std,
    decision_advantages,
    group_advantages,
    grpo_loss,
    moments,
    token_advantages,
    token_weights,
)
from train.grpo.policy import policy_batch, token_logprobs
from train.grpo.rewards import build_reward, step_rewards
from train.grpo.rollout import make_windows, rollout_group


@pytest.fixture(scope="module")
def setup(grpo_windows):
    return grpo_windows


def _count_frames(model, store: dict):
    """Count the vision tower's frames and calls (its ``forward``, as the loss calls it) and the
    patches its ``patch_embed`` takes (every vision path runs it: the engine's own call too)."""

    def hook(module, args, kwargs):
        grid = kwargs.get("grid_thw", args[1] if len(args) > 1 else None)
        store["frames"] += int(grid.shape[0])
        store["calls"] += 1

    def patches(module, args):
        store["patches"] = store.get("patches", 0) + int(args[0].shape[0])

    visual = model.model.visual
    handles = [visual.register_forward_pre_hook(hook, with_kwargs=True)]
    handles.append(visual.patch_embed.register_forward_pre_hook(patches))
    return handles


def _target_group(setup, num_generations: int, max_new_tokens: int, seed: int):
    """A window with a target, ``num_generations`` rollouts sampled at temperature 1, and their batch."""
    model, renderer, windows = setup
    window = next(w for w in windows if w.targets)
    rollouts, _ = rollout_group(model, renderer, window, num_generations, 1.0, max_new_tokens, seed)
    return window, rollouts, policy_batch(rollouts, renderer)


def test_on_policy_logprobs_need_the_frames(setup):
    model, renderer, _ = setup
    window, rollouts, batch = _target_group(setup, num_generations=4, max_new_tokens=6, seed=5)
    assert int(batch.is_decision.sum()) == 4 * len(window.frames)
    with torch.no_grad():
        new = token_logprobs(model, renderer, rollouts, batch, temperature=1.0)
        blind = token_logprobs(model, renderer, rollouts, batch, temperature=1.0, frames=False)
        everywhere = token_logprobs(model, renderer, rollouts, batch, temperature=1.0, select=False)
    assert (new - batch.old_logprobs).abs().max() < 1e-4
    assert (new - everywhere).abs().max() < 1e-5  # logits at the generated positions only: the same values
    assert int(batch.keep_mask().sum()) == len(batch.targets) < 0.2 * batch.input_ids.numel()
    assert (blind - batch.old_logprobs).abs().max() > 1e-3  # a loss forward without frames is off-policy


def test_frames_are_encoded_once_per_window(setup):
    model, renderer, windows = setup
    window = windows[0]
    counts = {"frames": 0, "calls": 0}
    handles = _count_frames(model, counts)
    try:
        rollouts, engine = rollout_group(
            model, renderer, window, num_generations=4, temperature=1.0, max_new_tokens=4, seed=1
        )
        assert engine.frames_encoded == len(window.frames)
        rolled = counts["patches"]  # the engine's vision call (engine.vision_tower) skips visual.forward
        counts.update(frames=0, calls=0, patches=0)
        batch = policy_batch(rollouts, renderer)
        token_logprobs(model, renderer, rollouts, batch, temperature=1.0)
        assert (counts["frames"], counts["calls"]) == (len(window.frames), 1)
        assert rolled == counts["patches"] > 0  # the four rollouts encoded each frame once, as the loss
    finally:
        for handle in handles:
            handle.remove()


def test_loss_gradient_reaches_merger_and_language_model(setup):
    model, renderer, _ = setup
    window, rollouts, batch = _target_group(setup, num_generations=4, max_new_tokens=4, seed=2)
    model.zero_grad(set_to_none=True)
    loss, parts = grpo_loss(
        token_logprobs(model, renderer, rollouts, batch, 1.0),
        batch,
        token_advantages(batch, [[a] * len(window.frames) for a in (1.0, -1.0, 0.5, -0.5)]),
        0.2,
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
            "reward_weights": {"prs": 1.0, "redundancy": 1.0},
            "redundancy": {"penalty": 0.2, "tasks": ["accident_warning"]},
        }
    )
    target = Target(
        time=8.0,
        window=(8.0, 11.0),
        content="Warning: the two squares are about to collide.",
        label="Warning",
    )
    say = "</Response> Warning: the two squares are about to collide."

    def value(turns):
        return reward(turns, [target], "accident_warning").value

    on_time, late, never = value(_turns({8.0: say})), value(_turns({18.0: say})), value(_turns({}))
    assert on_time > late > never == 0.0
    once, thrice = value(_turns({8.0: say})), value(_turns({7.0: say, 8.0: say, 9.0: say}))
    assert once - thrice >= 2 * 0.2
    assert group_advantages([on_time, late, never, late])[0] > 0


def test_static_step_rollouts_sample_what_eager_rollouts_sample(setup):
    """The same seed, sampled decisions and replies over a window that starts mid-clip (``first_steps``):
    the static step draws the eager step's tokens, with log-probs within 1e-4."""
    model, renderer, windows = setup
    window = next(w for w in windows if w.targets and w.start > 0)
    runs = {}
    for step in ("eager", "static"):
        rollouts, engine = rollout_group(model, renderer, window, 4, 1.0, 4, seed=3, step=step)
        runs[step] = [r.result for r in rollouts]
        assert type(engine.kv).__name__ == {"eager": "KVWindow", "static": "StaticKV"}[step]
    assert any(s.fired for r in runs["eager"] for s in r.steps)
    for a, b in zip(runs["eager"], runs["static"], strict=True):
        assert a.tokens == b.tokens and [s.text for s in a.steps] == [s.text for s in b.steps]
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) < 1e-4


def test_the_loop_rolls_out_with_the_configured_engine_step(setup, tmp_path, caplog):
    """``grpo.engine_step`` reaches the rollouts' engine (its choice logged), and an unknown one
    fails before any rollout."""
    from engine import step_choice
    from train.grpo.config import GRPOStageConfig
    from train.grpo.loop import GRPOLoop

    model, renderer, windows = setup
    with pytest.raises(ValueError, match="grpo.engine_step='fast': choose one of auto, eager, static"):
        GRPOLoop(GRPOStageConfig(engine_step="fast"), model, None, renderer, None, windows, tmp_path)
    cfg = GRPOStageConfig(engine_step="static", num_generations=2, max_new_tokens=2)
    loop = GRPOLoop(cfg, model, None, renderer, None, windows, tmp_path)
    step_choice._said.clear()
    with caplog.at_level("INFO", logger="engine.step_choice"):
        [(j, rollouts)] = loop._rollouts(windows[:1])
    assert j == 0 and len(rollouts) == 2
    assert [r.getMessage() for r in caplog.records] == ["engine step: static"]


def test_sft_and_grpo_windows_share_the_clip_clock(setup):
    """One windowing rule: on a 40 s stream cut into 20-step windows, step 20 shows ``<20.0 seconds>``
    in its SFT window, in its GRPO rollout and at evaluation, and a target at 19.5 s lands on step 20
    (the first frame after it) in all three, so it belongs to the second window."""
    model, renderer, _ = setup
    stream = Stream(
        id="s40",
        source="toy",
        task="event_monitoring",
        video="v.mp4",
        clip_start=0.0,
        clip_end=40.0,
        instruction="Tell me.",
        targets=[Target(time=19.5, content="now")],
    )
    frames = np.zeros((40, 64, 64, 3), dtype=np.uint8)
    assert target_step(stream, stream.targets[0]) == 20
    # SFT: the window [20, 40) of the renderer
    sft = renderer.render(stream, frames[20:40], (20, 40))
    text = renderer.tokenizer.decode(sft.input_ids)
    assert text.startswith("<|im_start|>user\nTell me.\n<20.0 seconds><|vision_start|>")
    assert sft.decision_mask[sft.decision_positions[0]] == RESPONSE_CLASS
    # GRPO: the windows of make_windows, rolled out by the engine
    windows = make_windows([stream], {stream.id: frames}, window_steps=20, negative_share=1.0, seed=0)
    by_start = {w.start: w for w in windows}
    assert sorted(by_start) == [0, 20] and by_start[0].targets == []
    assert [t.time for t in by_start[20].targets] == [19.5]
    rollouts, _ = rollout_group(model, renderer, by_start[20], 2, 1.0, 4, seed=0)
    first = rollouts[0].result.steps[0]
    assert (first.step, first.time) == (20, 20.0)
    rolled = renderer.tokenizer.decode(rollouts[0].result.tokens)
    assert rolled.startswith("<|im_start|>user\nTell me.\n<20.0 seconds><|vision_start|>")
    # evaluation: the whole stream through the engine
    [whole] = StreamingEngine(model, renderer, EngineConfig(threshold=2.0)).run([stream], [frames])
    assert (whole.steps[20].step, whole.steps[20].time) == (20, 20.0)
    assert "<20.0 seconds>" in renderer.tokenizer.decode(whole.tokens)


def test_decision_credit_rewards_the_first_reply_that_sequence_credit_punishes():
    """An over-firing group: sequence credit gives the on-time first reply of an over-firing rollout
    a negative advantage; decision credit credits it and charges each repeat."""
    reward = build_reward({"reward_weights": {"prs": 1.0, "redundancy": 1.0}, "redundancy": {"penalty": 0.2}})
    target = Target(time=8.0, content="", label="Warning")
    say = "</Response> Warning!"
    group = [
        _turns({t: say for t in (8.0, 9.0, 10.0, 11.0)}),  # over-fires from the event on
        _turns({t: say for t in (8.0, 9.0)}),
        _turns({8.0: say}),  # the policy we want
        _turns({}),  # silent
    ]

    def values(turns):
        return [reward(t, [target], "accident_warning").value for t in turns]

    def steps(turns):
        return [step_rewards(reward, t, [target], "accident_warning") for t in turns]

    seq = group_advantages(values(group))
    dec = decision_advantages(steps(group), gamma=0.0)
    assert seq[0] < 0  # its on-time first reply is pushed down with its repeats
    assert seq[3] < 0 < seq[2]
    assert dec[0][8] == dec[1][8] == dec[2][8] > 0 > dec[3][8]  # firing at the event, in every rollout
    assert dec[0][9] < 0 < dec[2][9]  # the repeat is charged, staying silent after a reply credited
    assert dec[0][11] < 0 and all(a == 0 for a in dec[0][:8])  # steps before the event: no signal
    assert decision_advantages(steps([group[2]] * 4), 0.5) == [[0.0] * 20] * 4
    # rollouts that differ at one step only: that step gets GRPO's advantages, whatever the window length
    pair = [_turns({8.0: say}, steps=60), _turns({8.0: say, 9.0: say}, steps=60)] * 2
    dec = decision_advantages(steps(pair), 0.0)
    seq = group_advantages(values(pair))
    assert [row[9] for row in dec] == pytest.approx(seq, abs=1e-3) and seq[0] == pytest.approx(1.0, abs=1e-3)
    assert all(a == 0 for row in dec for k, a in enumerate(row) if k != 9)


def test_token_advantages_follow_each_tokens_decision_step(setup):
    window, _, batch = _target_group(setup, num_generations=2, max_new_tokens=4, seed=3)
    n = len(window.frames)
    per_step = [[float(10 * b + k) for k in range(n)] for b in range(2)]
    adv = token_advantages(batch, per_step)
    assert adv.tolist() == [10.0 * r + s for r, s in zip(batch.rows.tolist(), batch.steps.tolist())]
    for b in range(2):  # every step has its decision token, in order
        steps = batch.steps[(batch.rows == b) & batch.is_decision].tolist()
        assert steps == list(range(n))
    assert token_advantages(batch, [[1.0] * n, [-1.0] * n]).tolist() == [
        1.0 if r == 0 else -1.0 for r in batch.rows.tolist()
    ]


def test_undiscounted_returns_value_waiting_for_the_event_over_an_early_guess():
    """PRS-B credits a reply 3 s before the target with exp(-0.15) at once; only a return that
    counts the on-time reply still to come (gamma above exp(-alpha)) prefers staying silent."""
    reward = build_reward({"reward_weights": {"prs": 1.0, "redundancy": 1.0}, "redundancy": {"penalty": 0.2}})
    say = "</Response> Warning!"
    group = [_turns({5.0: say}), _turns({8.0: say}), _turns({5.0: say, 8.0: say}), _turns({})]
    target = Target(time=8.0, content="", label="Warning")
    steps = [step_rewards(reward, t, [target], "accident_warning") for t in group]
    myopic, full = decision_advantages(steps, 0.0), decision_advantages(steps, 1.0)
    early, on_time = 0, 1
    assert myopic[early][5] > 0 > myopic[on_time][5]  # gamma=0: guessing early beats waiting
    assert full[on_time][5] > full[early][5]  # gamma=1: waiting wins
    assert full[on_time][8] > 0 and full[2][8] < 0  # the on-time reply is credited, the repeat charged


def test_an_unknown_credit_fails_before_any_rollout(setup, tmp_path):
    from train.grpo.config import GRPOStageConfig
    from train.grpo.loop import GRPOLoop

    model, renderer, windows = setup
    with pytest.raises(ValueError, match="grpo.credit='token': choose one of sequence, decision"):
        GRPOLoop(GRPOStageConfig(credit="token"), model, None, renderer, None, windows, tmp_path)


def test_keep_best_without_held_out_evaluations_fails_before_any_rollout(setup, tmp_path):
    from train.grpo.config import GRPOStageConfig
    from train.grpo.loop import GRPOLoop

    model, renderer, windows = setup
    with pytest.raises(ValueError, match="keep_best needs held-out evaluations"):
        GRPOLoop(
            GRPOStageConfig(keep_best=True, eval_every=10), model, None, renderer, None, windows, tmp_path
        )


def test_a_full_disk_at_checkpoint_time_names_the_checkpoint(setup, tmp_path, monkeypatch):
    """torch's own message for a write that ran out of space ("enforce fail ... unexpected pos")
    becomes an error naming the checkpoint folder and the free space; nothing is marked complete."""
    from train.grpo.config import GRPOStageConfig
    from train.grpo.loop import GRPOLoop
    from train.run_dir import CheckpointWriteError

    model, renderer, windows = setup
    loop = GRPOLoop(GRPOStageConfig(), model, renderer.processor, renderer, None, windows, tmp_path)

    def full_disk(*args, **kwargs):
        raise RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 4352 vs 4240")

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(
        CheckpointWriteError, match=r"cannot write checkpoint .*checkpoint-0 \(.* GiB free; is the disk full"
    ):
        loop.save()
    assert not (tmp_path / "checkpoint-0" / "COMPLETE").exists()


def test_loss_types_weight_the_tokens_as_trl_defines_them(setup):
    """Two windows' groups of one update: each loss type's weights, summed over the update's tokens,
    give trl's normalizations; ``grpo`` keeps the rollout-mean-then-mean loss of one window."""
    LOSS_TYPES = OBJECTIVES.names()
    assert LOSS_TYPES == ["grpo", "bnpo", "dr_grpo", "dapo"]
    (_, r1, b1), (_, r2, b2) = (_target_group(setup, 2, 4, seed) for seed in (11, 12))
    rows = [int(n) for b in (b1, b2) for n in torch.bincount(b.rows)]
    counts = UpdateCounts(rollouts=4, groups=2, tokens=sum(rows), max_tokens=10 * (4 + 2))
    w = {t: [token_weights(b, t, counts) for b in (b1, b2)] for t in LOSS_TYPES}
    total = {t: sum(float(x.sum()) for x in w[t]) for t in LOSS_TYPES}
    assert total["grpo"] == pytest.approx(1.0) and total["bnpo"] == pytest.approx(1.0)
    assert total["dapo"] == pytest.approx(1.0)
    assert total["dr_grpo"] == pytest.approx(
        sum(rows) / (4 * 60)
    )  # a constant divisor: shorter rollouts weigh less
    assert w["dapo"][0].unique().tolist() == pytest.approx([1 / sum(rows)])
    per_row = [float(w["grpo"][0][b1.rows == r].sum()) for r in (0, 1)]
    assert per_row == pytest.approx([0.25, 0.25])  # each rollout weighs 1 / rollouts, whatever its length
    # on one window, loss_type=grpo is the mean over rollouts of each rollout's token mean
    new = b1.old_logprobs + 0.05 * torch.arange(len(b1.targets)) / len(b1.targets)
    adv = token_advantages(b1, [[1.0] * 10, [-1.0] * 10])
    loss, _ = grpo_loss(new, b1, adv, 0.2)
    per_token = -torch.minimum(
        torch.exp(new - b1.old_logprobs) * adv, torch.exp(new - b1.old_logprobs).clamp(0.8, 1.2) * adv
    )
    expected = sum(float(per_token[b1.rows == r].mean()) for r in (0, 1)) / 2
    # the two rollouts' means are about +-1 and cancel to ~0.01: float32's rounding of terms of size 1
    assert float(loss) == pytest.approx(expected, abs=1e-6)
    high, _ = grpo_loss(b1.old_logprobs + 0.3, b1, torch.ones(len(b1.targets)), 0.2, epsilon_high=0.28)
    assert float(high) == pytest.approx(-1.28, rel=1e-6)  # clip-higher: the ratio e^0.3 stops at 1 + 0.28


def test_scale_rewards_group_batch_none():
    rewards = [[1.0, 0.0, 0.0, 1.0], [3.0, 1.0, 1.0, 3.0]]
    grouped = [group_advantages(r) for r in rewards]
    assert grouped[0] == pytest.approx([1.0, -1.0, -1.0, 1.0], abs=1e-3) == grouped[1]
    std = batch_std(*[sum(x) for x in zip(*(moments(r) for r in rewards), strict=True)])
    assert std == pytest.approx((sum((x - 1.25) ** 2 for r in rewards for x in r) / 8) ** 0.5)
    batch = [group_advantages(r, std=std) for r in rewards]
    assert batch[1] == pytest.approx([1 / std, -1 / std, -1 / std, 1 / std], rel=1e-3)  # one spread for all
    assert group_advantages(rewards[1], std=1.0 - 1e-4) == pytest.approx([1.0, -1.0, -1.0, 1.0])  # none


def test_updates_pass_over_every_window_once_per_epoch(setup, tmp_path):
    """n // windows_per_step updates see distinct windows (one epoch); a new loop (a resumed run)
    draws the same ones, and the next epoch is another order."""
    from train.grpo.config import GRPOStageConfig
    from train.grpo.loop import GRPOLoop

    model, renderer, windows = setup
    loop = GRPOLoop(GRPOStageConfig(windows_per_step=3), model, None, renderer, None, windows, tmp_path)
    n = len(windows)
    epoch = [id(w) for step in range(n // 3) for w in loop._windows_for(step)]
    assert len(set(epoch)) == len(epoch) == n // 3 * 3
    again = GRPOLoop(GRPOStageConfig(windows_per_step=3), model, None, renderer, None, windows, tmp_path)
    assert [id(w) for w in again._windows_for(1)] == epoch[3:6]
    second = [id(w) for step in range(n, 2 * n) for w in loop._windows_for(step)]  # epochs 3..5
    assert sorted(second[:n]) == sorted(id(w) for w in windows) and second[: len(epoch)] != epoch


@pytest.mark.parametrize(
    "step, message",
    [
        (-3, r"step -3 is outside \[0, grpo.max_steps=4\]$"),
        (1_000_000, r"step 1000000 is outside \[0, grpo.max_steps=4\]: raise grpo.max_steps"),
        (2, r"step 2, but its directory is checkpoint-0"),
        (1.5, r"'step' is 1.5, not a whole number of updates"),
    ],
)
def test_a_resumed_step_outside_the_run_is_refused_naming_the_file(setup, tmp_path, step, message):
    """``grpo_state.pt``'s step is the update the run continues from: it must lie in
    ``[0, grpo.max_steps]`` and match its ``checkpoint-<step>`` directory."""
    import re

    from train.grpo.checkpoints import STATE_FILE
    from train.grpo.config import GRPOStageConfig
    from train.grpo.loop import GRPOLoop

    model, renderer, windows = setup
    cfg = GRPOStageConfig(max_steps=4)
    ckpt = GRPOLoop(cfg, model, renderer.processor, renderer, None, windows, tmp_path).save()
    file = ckpt / STATE_FILE
    torch.save({**torch.load(file, weights_only=True), "step": step}, file)
    loop = GRPOLoop(cfg, model, renderer.processor, renderer, None, windows, tmp_path)
    with pytest.raises(ValueError, match=re.escape(f"{file}: ") + message):
        loop.load_state(ckpt)
    assert loop.step == 0


class _Payload:
    """Pickles as a call of ``exec`` that writes ``marker``: what a planted checkpoint would run."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"open({str(self.marker)!r}, 'w').write('ran')",))


def test_a_planted_pickle_in_grpo_state_is_refused_naming_the_file(setup, tmp_path):
    import re

    from train.grpo.checkpoints import STATE_FILE
    from train.grpo.config import GRPOStageConfig
    from train.grpo.loop import GRPOLoop
    from train.safe_load import UnsafeCheckpoint

    model, renderer, windows = setup
    loop = GRPOLoop(GRPOStageConfig(), model, renderer.processor, renderer, None, windows, tmp_path / "run")
    ckpt = loop.save()
    file, marker = ckpt / STATE_FILE, tmp_path / "marker"
    torch.save({**torch.load(file, weights_only=True), "note": _Payload(marker)}, file)
    with pytest.raises(
        UnsafeCheckpoint, match=re.escape(f"{file}: refused to load: it calls or builds builtins.exec")
    ):
        loop.load_state(ckpt)
    assert not marker.exists()


def test_the_run_control_stops_the_loop_on_its_time_budget(setup, tmp_path):
    """The GRPO loop runs under the same run control as SFT (``infra.run_control``): a budget spent
    before the first update stops the loop there, with a complete checkpoint and ``time_budget`` as
    the reason; the signal handlers it installed are put back."""
    import signal

    from train.grpo.config import GRPOStageConfig
    from train.grpo.loop import GRPOLoop

    model, renderer, windows = setup
    before = signal.getsignal(signal.SIGUSR1)
    cfg = GRPOStageConfig(max_steps=3, time_budget_s=1e-9, eval_split=None)
    loop = GRPOLoop(cfg, model, renderer.processor, renderer, None, windows, tmp_path)
    last = loop.train()
    assert last == tmp_path / "checkpoint-0" and (last / "COMPLETE").read_text() == "0\n"
    assert loop.step == 0 and loop.history == [] and loop.stopped_by == "time_budget"
    assert signal.getsignal(signal.SIGUSR1) is before
