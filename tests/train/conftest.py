"""Fixtures of the training tests: the 1-step DeepSpeed checkpoints several files read, and the GRPO tests' windows."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.train.deepspeed_runs import first_checkpoint


@pytest.fixture(scope="session")
def deepspeed_toy(tmp_path_factory) -> Path:
    """A root holding the 8-clip toy mixture (``toy/``) and the tiny model's cache of the runs."""
    from data_builders.mixture import build_toy_mixture

    root = tmp_path_factory.mktemp("ds_toy")
    build_toy_mixture(root / "built", root / "toy", n=8, seed=0)
    return root


@pytest.fixture(scope="session")
def deepspeed_checkpoint(deepspeed_toy, tmp_path_factory):
    """``deepspeed_checkpoint(stage, zero) -> run dir`` holding the honest ``checkpoint-1`` of a
    1-step run of that stage (``sft``, ``grpo``) and ZeRO level (``zero2``, ``zero3``): launched on
    first use, then shared by every test of the session. Tests change copies, never this folder."""
    runs: dict[tuple[str, str], Path] = {}

    def get(stage: str, zero: str) -> Path:
        if (stage, zero) not in runs:
            run = tmp_path_factory.mktemp(f"{stage}_{zero}") / "run"
            runs[stage, zero] = first_checkpoint(stage, zero, deepspeed_toy, run)
        return runs[stage, zero]

    return get


@pytest.fixture(scope="module")
def grpo_windows(tiny_model_and_processor, toy_dir):
    """The tiny model, a renderer at 64 x 64 and the toy streams' GRPO windows (10 steps, a quarter
    negative), as the GRPO tests share them."""
    from data_builders.config import RenderConfig
    from data_builders.frames import stream_frames
    from data_builders.record_io import load_streams
    from engine.render import TurnRenderer
    from train.grpo.rollout import make_windows

    model, processor = tiny_model_and_processor
    renderer = TurnRenderer(processor, RenderConfig(max_pixels=64 * 64))
    streams = load_streams(toy_dir / "records.jsonl")
    frames = {s.id: stream_frames(s, toy_dir / s.video, renderer.cfg) for s in streams}
    return model, renderer, make_windows(streams, frames, window_steps=10, negative_share=0.25, seed=0)
