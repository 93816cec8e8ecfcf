"""Pre-emption as the sbatch scripts rely on it, for GRPO: SIGUSR1 mid-run -> a COMPLETE checkpoint and
exit 75; rerunning the same command resumes from it. (SFT: tests/train/test_sft_resume.py covers USR1
-> exit 75 with a complete checkpoint, and SIGKILL -> resume=auto continuing the same run.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.checkpoints import complete_checkpoints

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def toy_mixture(tmp_path_factory) -> Path:
    from data_builders.mixture import build_toy_mixture

    root = tmp_path_factory.mktemp("preempt_data")
    return build_toy_mixture(root / "built", root / "toy", n=8, seed=0)


def command(data: Path, tmp: Path, max_steps: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "train.grpo",
        f"paths.root_dir={tmp}",
        f"data.dir={data}",
        "debug=tiny",  # conf/debug/tiny.yaml: the tiny model from a random init, one window per update
        "grpo.save_every=1000",
        f"grpo.max_steps={max_steps}",
    ]


def test_grpo_usr1_checkpoints_exits_75_and_the_rerun_resumes(toy_mixture, tmp_path):
    run = tmp_path / "runs" / "grpo"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        command(toy_mixture, tmp_path, 500),
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    history, t0 = run / "history.jsonl", time.time()
    while not (history.exists() and history.read_text().strip()):  # the first logged update
        assert proc.poll() is None, proc.stdout.read().decode()[-3000:]
        assert time.time() - t0 < 300, "no update logged"
        time.sleep(0.05)
    proc.send_signal(signal.SIGUSR1)
    assert proc.wait(120) == 75, proc.stdout.read().decode()[-3000:]
    (ckpt,) = complete_checkpoints(run)
    step = int(ckpt.name.split("-")[1])
    assert step >= 1 and not (run / "final").exists()

    again = subprocess.run(
        command(toy_mixture, tmp_path, step + 1),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"resumed from {ckpt} at update {step}" in again.stderr
    steps = [json.loads(line)["step"] for line in history.read_text().splitlines()]
    assert steps == list(range(1, step + 2))  # continued, nothing repeated
    assert (run / "final" / "model.safetensors").exists()
