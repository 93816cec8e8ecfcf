"""``python -m perf sft``: throughput and peak memory, vision tower frozen vs trained."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from perf.sft import run_variant

ROOT = Path(__file__).resolve().parents[2]


def test_variant_measures_a_training_step():
    frozen = run_variant(True, steps=1, batch=2, threads=1, warmup=0)
    trained = run_variant(False, steps=1, batch=2, threads=1, warmup=0)
    assert frozen["tokens_per_s"] > 0 and frozen["peak_memory_mb"] > 0
    assert frozen["tokens_per_batch"] == trained["tokens_per_batch"] > 0
    assert frozen["trainable_parameters"] < trained["trainable_parameters"]


@pytest.mark.slow
def test_cli_prints_one_json_object_last():
    out = subprocess.run(
        [sys.executable, "-m", "perf", "sft", "--steps", "1", "--batch", "2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    for variant in ("frozen_vision", "trained_vision"):
        assert result[variant]["tokens_per_s"] > 0 and result[variant]["peak_memory_mb"] > 0


def test_grpo_bench_counts_shared_and_unshared_frames_and_splits_an_update():
    from perf.grpo import bench_grpo

    out = bench_grpo(windows=1, group=3, threads=1)
    assert out["windows"] == 1 and "compiled" not in out
    assert out["unshared"]["frames_encoded"] == 3 * out["shared"]["frames_encoded"] == 3 * 1 * 20
    assert out["shared"]["windows_per_s"] > 0 and out["sharing_speedup"] > 0
    assert set(out["update_time_s"]) == {"rollout_s", "reward_s", "update_s"}
    assert abs(sum(out["update_time_share"].values()) - 1.0) < 1e-3


@pytest.mark.slow  # the rollouts compiled on CPU; one thread, as make test gives each worker
def test_grpo_bench_compares_compiled_rollouts():
    from perf.grpo import bench_grpo

    out = bench_grpo(windows=2, group=3, threads=1, compile=True)
    assert out["compiled"]["same_tokens"] is True and out["compiled"]["compile_s"] > 0
    assert out["compiled_speedup"] == pytest.approx(
        out["compiled"]["windows_per_s"] / out["compiled"]["eager_windows_per_s"], rel=0.01
    )


def test_memory_bench_bf16_stand_in_matches_the_native_linear():
    """``perf step_memory`` multiplies bf16 CPU tensors through ChunkedLinear: same values and
    gradients as ``F.linear`` (within bf16 rounding), bf16 in and out, over several output chunks."""
    import torch

    from perf.step_memory import ChunkedLinear, cpu_bf16_matmuls

    torch.manual_seed(0)
    x = torch.randn(3, 5, 64, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(200, 64, dtype=torch.bfloat16, requires_grad=True)
    b = torch.randn(200, dtype=torch.bfloat16, requires_grad=True)
    old, ChunkedLinear.CHUNK = ChunkedLinear.CHUNK, 64  # 4 chunks, the last one short
    try:
        with cpu_bf16_matmuls():
            out = torch.nn.functional.linear(x, w, b)
        out.float().square().sum().backward()
    finally:
        ChunkedLinear.CHUNK = old
    grads = [t.grad.clone() for t in (x, w, b)]
    for t in (x, w, b):
        t.grad = None
    ref = torch.nn.functional.linear(x.float(), w.float(), b.float())
    ref.square().sum().backward()
    assert out.dtype == torch.bfloat16 and out.shape == (3, 5, 200)
    assert torch.allclose(out.float(), ref, rtol=2e-2, atol=0.3)
    for got, t in zip(grads, (x, w, b), strict=True):
        assert got.dtype == torch.bfloat16
        want = t.grad.float()
        assert torch.allclose(got.float(), want, rtol=3e-2, atol=0.05 * float(want.abs().max()))


def test_memory_bench_stand_in_builds_no_gradient_for_a_frozen_weight():
    """The bench's activation runs freeze every parameter but the merger's: the stand-in then builds
    the input's gradient alone (a custom function is told at forward time which gradients to build,
    so ``backward(inputs=...)`` would not spare a weight-sized one)."""
    import torch

    from perf.step_memory import ChunkedLinear, cpu_bf16_matmuls

    built = []
    native = ChunkedLinear.backward

    def recording(ctx, grad):
        out = native(ctx, grad)
        built.append(tuple(g is not None for g in out))
        return out

    x = torch.randn(4, 64, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(32, 64, dtype=torch.bfloat16)
    ChunkedLinear.backward = staticmethod(recording)
    try:
        for trained in (True, False):
            w.requires_grad_(trained)
            with cpu_bf16_matmuls():
                torch.nn.functional.linear(x, w).float().sum().backward()
    finally:
        ChunkedLinear.backward = staticmethod(native)
    assert built == [(True, True, False), (True, False, False)]
    assert torch.allclose(x.grad.float(), 2 * w.float().sum(0).expand(4, 64), rtol=2e-2, atol=0.1)


def test_the_input_pipeline_bench_runs_sft_s_dataset_and_collator_on_a_cache_format(tmp_path):
    """``python -m perf sft_input``'s one-format measure: windows of the textured video, served
    from a ``jpeg90`` cache through SFT's dataset and collator."""
    from data_builders.synthetic.toy import write_mp4
    from perf.frame_cache import textured_frames
    from perf.sft_input import pipeline_rate

    video = tmp_path / "videos" / "textured.mp4"
    write_mp4(video, textured_frames(28), fps=2)
    rate, tokens = pipeline_rate(tmp_path, video, "jpeg90", n_samples=2, window=12)
    assert rate > 0
    assert tokens > 12 * 196  # 12 frames of 448 x 448 (196 merged patches each) and the text
    assert list((tmp_path / "jpeg90").rglob("*.frames"))  # served from compressed entries
