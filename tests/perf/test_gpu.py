"""The accelerator benchmark runs end to end on the tiny model on CPU (so it cannot rot between GPU runs)."""

from __future__ import annotations

import json

import pytest

from perf.gpu import main


# compiled: the graphs built on CPU take minutes (166-199 s on a loaded 2-core machine)
@pytest.mark.parametrize("compiled", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_bench_gpu_on_tiny_cpu(capsys, compiled):
    out = main(
        [
            "--model",
            "conf/model/tiny.yaml",
            "--device",
            "cpu",
            "--size",
            "64",
            "--steps",
            "6",
            "--stream-steps",
            "8",
            "--batch",
            # compiled: one stream (the batch's graphs are test_streaming's compiled-engine test's)
            "1" if compiled else "2",
            "--window-steps",
            "40",
            "--repeats",
            "1",
        ]
        + ["--compile"] * compiled
    )
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith('{"model": "tiny"')
    assert out["frame_tokens"] == 4
    assert out["sft"]["tokens"] > 6 * 4 and out["sft"]["step_s"] > 0
    stream = out["stream"]
    assert stream["same_decisions"] and stream["fires"] == 0
    assert stream["steps"] == 8 and stream["window_steps"] == 40
    assert stream["max_decision_logit_diff"] < 1e-4  # float32 on CPU
    assert stream["steps_per_s"] > 0 and stream["batched_stream_steps_per_s"] > 0
    assert stream["compile"] is compiled and stream["warmup_s"] > 0


def test_the_sft_step_bench_times_the_trainers_loss():
    """``bench_sft``'s step is the SFT trainer's: its loss is ``train.sft.losses``' (the focal
    decision loss of the recipe's gamma at the labelled positions) on the same toy window, not the
    model's own next-token loss. With lr 0 the weights stay as built, so every step's loss is the
    first's."""
    import torch

    from perf.gpu import bench_sft, build_model, toy_stream
    from train.sft.losses import loss_at_labels, selected_logits

    model, renderer, _ = build_model("conf/model/tiny.yaml", "cpu", 64)
    out = bench_sft(model, renderer, "cpu", 4, 64, 1, lr=0.0)
    batch = renderer.render(*toy_stream(0, 4, 64))
    inputs, labels, decision = batch.as_model_inputs(), batch.labels[None], batch.decision_mask[None]
    ids = (renderer.silence_id, renderer.response_id)
    with torch.no_grad():
        trainer = loss_at_labels(
            *selected_logits(model, inputs, labels, decision), decision_ids=ids, gamma=2.0
        )
        own = model(**inputs, labels=labels).loss
    assert out["loss"] == pytest.approx(float(trainer.loss), rel=1e-5)
    assert abs(float(own) - float(trainer.loss)) > 1e-3  # the two losses differ: the check can tell


@pytest.mark.slow  # four profiled streams (13 s loaded)
def test_profile_splits_a_silent_and_a_firing_step_on_tiny_cpu(capsys):
    from perf.profile import main as profile

    out = profile(
        ["--model", "conf/model/tiny.yaml", "--device", "cpu", "--size", "64", "--at", "6,12"]
        + ["--window", "4"]
    )
    printed = capsys.readouterr().out.strip().splitlines()
    assert json.loads(printed[-1]) == out
    assert printed[0].startswith("| T | window | step | wall ms | host ms |")
    rows = out["profiles"]
    assert [(r["steps"], r["window"]) for r in rows] == [(6, None), (6, 4), (12, None), (12, 4)]
    for row in rows:
        silent, firing = row["silent"], row["firing"]
        for step in (silent, firing):
            assert step["model_cpu_ms"] > 0 and step["host_ms"] > 0 and len(step["top_ops"]) == 8
            assert step["wall_ms"] >= step["model_cpu_ms"] + step["head_cpu_ms"]
        # no op of a decision's forward reads a device value back (engine.image_merge): on a GPU the
        # silent step's one wait is the read of its two logits
        assert silent["syncing_ops"] == 0
        # a reply's one-token forwards each check their mask (transformers), after the host read the
        # last token anyway: at most one per token of the reply (8) and its first (</Response>)
        assert 0 < firing["syncing_ops"] <= 9
        # a silent step is one forward; a firing step decodes its reply after the decision's forward:
        # one per token, 8 at most, and the one whose logits close it (counted: a time would follow
        # what else runs on the machine)
        assert silent["model_calls"] == 1 and 2 <= firing["model_calls"] <= 10
    # the window bounds the cache: at step 12 it holds fewer tokens than the whole stream's
    assert rows[3]["cache_tokens"] < rows[2]["cache_tokens"]


@pytest.mark.slow  # four compiled graphs on CPU (174 s on a loaded 2-core machine)
def test_compile_bench_compares_eager_and_compiled_steps(capsys):
    from perf.compile import main as compile_bench

    out = compile_bench(["--steps", "6", "--batch", "2", "--window", "3", "--repeats", "1"])
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == out
    assert list(out["cases"]) == ["silent_batch1", "silent_batch2", "firing_batch1", "firing_batch2"]
    for name, case in out["cases"].items():
        assert case["same_decisions"] and case["max_decision_logit_diff"] < 1e-4  # float32 on CPU
        assert case["fires"] == (0 if name.startswith("silent") else 6 * case["rows"])
        assert case["eager_step_ms"] > 0 and case["compiled_step_ms"] > 0
    assert out["layers"] == 2 and out["graphs"] <= 4
