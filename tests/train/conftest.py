"""Fixtures of the training tests: the 1-step DeepSpeed checkpoints several files read."""

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
