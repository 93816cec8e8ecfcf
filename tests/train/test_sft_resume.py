"""Preemption: SIGKILL after a checkpoint then ``resume=auto`` gives the uninterrupted run's weights;
SIGUSR1 saves a checkpoint and exits with the requeue status."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from data_builders.mixture import build_toy_mixture
from engine.checkpoints import complete_checkpoints
from infra.run_control import REQUEUE_EXIT_CODE
from train.sft.run import compose_config, train

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def toy_data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("sftdata")
    build_toy_mixture(root / "built", root / "toy", n=16, seed=0)
    return root


def overrides(data: Path, out: Path, steps: int = 14) -> list[str]:
    return [
        "experiment=toy_sft",
        f"paths.data_dir={data}",
        f"paths.cache_dir={data / 'cache'}",
        f"sft.output_dir={out}",
        "sft.per_device_batch_size=4",
        f"sft.max_steps={steps}",
        "sft.save_steps=4",
        "sft.save_total_limit=null",
        "sft.logging_steps=1",
        "sft.time_budget_s=null",
        "sft.num_threads=1",
        "sft.seed=3",
    ]


def start(data: Path, out: Path, steps: int = 14) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "train.sft", *overrides(data, out, steps)]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def wait_for_checkpoint(proc: subprocess.Popen, out: Path, timeout: float = 240.0) -> Path:
    t0 = time.time()
    while time.time() - t0 < timeout:
        done = complete_checkpoints(out)
        if done:
            return done[-1]
        if proc.poll() is not None:
            raise AssertionError(f"run ended before a checkpoint: {proc.stdout.read().decode()[-3000:]}")
        time.sleep(0.02)
    proc.kill()
    raise AssertionError("no checkpoint in time")


def kill_at_checkpoint(proc: subprocess.Popen, out: Path) -> int:
    wait_for_checkpoint(proc, out)
    proc.send_signal(signal.SIGKILL)
    return proc.wait(60)


def test_sigkill_then_resume_auto_matches_the_uninterrupted_run(toy_data, tmp_path):
    killed = start(toy_data, tmp_path / "killed")
    with ThreadPoolExecutor(max_workers=1) as pool:  # the reference trains here while that one starts
        status = pool.submit(kill_at_checkpoint, killed, tmp_path / "killed")
        reference = train(compose_config(overrides(toy_data, tmp_path / "reference")))
        assert status.result() == -signal.SIGKILL
    assert not (tmp_path / "killed" / "final").exists(), "the run finished before it was killed"
    resumed = train(compose_config(overrides(toy_data, tmp_path / "killed")))
    assert (tmp_path / "killed" / "resumes.jsonl").exists()
    a, b = load_file(resumed / "model.safetensors"), load_file(reference / "model.safetensors")
    assert a.keys() == b.keys()
    worst = max(float((a[k] - b[k]).abs().max()) for k in a)
    assert worst <= 1e-6, worst
    first = load_file(next(iter(complete_checkpoints(tmp_path / "killed"))) / "model.safetensors")
    assert any(not torch.equal(first[k], a[k]) for k in a)  # it did train after the resume


def test_sigusr1_saves_and_exits_with_the_requeue_status(toy_data, tmp_path):
    out = tmp_path / "run"
    proc = start(toy_data, out, steps=400)
    first = wait_for_checkpoint(proc, out)
    proc.send_signal(signal.SIGUSR1)
    assert proc.wait(120) == REQUEUE_EXIT_CODE == 75
    last = complete_checkpoints(out)[-1]
    assert int(last.name.split("-")[1]) >= int(first.name.split("-")[1])
    assert (last / "optimizer.pt").exists() and not (out / "final").exists()
    assert "saving a checkpoint" in proc.stdout.read().decode()
