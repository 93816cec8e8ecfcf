"""``accelerate launch --num_processes 2`` with the DeepSpeed ZeRO-2 config on CPU (gloo): 2 steps whose
losses match a single process on the same global batch.

The training split holds exactly one global batch (4 windows), so every step sees the same windows
in one process or split over two, whatever order each sampler draws them in."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from data_builders.build import write_outputs
from data_builders.mixture import build_toy_mixture
from data_builders.record_io import load_streams
from tests.conftest import free_port, ranks_lock
from train.sft.run import compose_config, train

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.ranks]


def losses(run: Path) -> list[float]:
    ckpt = max(run.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    state = json.loads((ckpt / "trainer_state.json").read_text())
    return [h["loss"] for h in state["log_history"] if "loss" in h]


#: The runs' shared overrides; the data under ``paths.data_dir``.
COMMON = [
    "experiment=toy_sft",
    "sft.max_steps=2",
    "sft.logging_steps=1",
    "sft.save_steps=2",
    "sft.time_budget_s=null",
    "sft.num_threads=1",
    "sft.resume=none",
]


@pytest.fixture(scope="module")
def single(tmp_path_factory) -> tuple[Path, list[str]]:
    """The one-batch training split and the one-process run on it (its folder, the overrides both
    runs share): a module fixture, so it runs before the test takes the ranks lock alone, beside
    other tests (``ranks_lock`` shared)."""
    tmp_path = tmp_path_factory.mktemp("sft_dist")
    with ranks_lock(tmp_path_factory):
        build_toy_mixture(tmp_path / "built", tmp_path / "mix", n=16, seed=0)
        split = tmp_path / "toy" / "train"
        streams = load_streams(tmp_path / "mix" / "train" / "records.jsonl")[:4]
        write_outputs(
            split,
            [
                s.__class__.from_dict(
                    {**s.to_dict(), "video": str((tmp_path / "mix" / "train" / s.video).resolve())}
                )
                for s in streams
            ],
        )
        common = [*COMMON, f"paths.data_dir={tmp_path}", f"paths.cache_dir={tmp_path / 'cache'}"]
        run = tmp_path / "single"
        train(compose_config([*common, f"sft.output_dir={run}", "sft.per_device_batch_size=4"]))
    return run, common


def test_zero2_two_processes_match_one_process(single, tmp_path):
    single, common = single
    accelerate = shutil.which("accelerate", path=str(Path(sys.executable).parent)) or "accelerate"
    two = tmp_path / "two"
    cmd = [
        accelerate,
        "launch",
        "--config_file",
        "conf/accelerate/zero2.yaml",
        "--num_processes",
        "2",
        "--main_process_port",
        str(free_port()),
        "-m",
        "train.sft",
        *common,
        f"sft.output_dir={two}",
        "sft.per_device_batch_size=2",
    ]
    out = subprocess.run(cmd, cwd=ROOT, env={**os.environ}, capture_output=True, text=True, timeout=500)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    a, b = losses(single), losses(two)
    assert len(a) == len(b) == 2
    assert a == pytest.approx(b, abs=1e-4)
    state = json.loads((two / "checkpoint-2" / "trainer_state.json").read_text())
    assert state["log_history"][0]["epoch"] == pytest.approx(1.0)  # 4 windows = one global batch
    assert (two / "final" / "model.safetensors").exists()
