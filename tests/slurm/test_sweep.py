"""GRPO reward-weight sweeps through the submitit launcher: ``hydra/launcher=slurm`` writes one job array
task per point (under a fake ``sbatch``), and ``hydra/launcher=local`` runs every point as a submitit
job with its own run dir and result."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
TINY = ["debug=tiny"]  # conf/debug/tiny.yaml: one update of the tiny model from a random init
FAKE_SLURM = {
    "sbatch": 'if [[ $1 == --test-only ]]; then echo "$*" > "$FAKE_LOG/test-only.args"; exit 0; fi\n'
    'cp "$1" "$FAKE_LOG/sbatch.sh"\necho "Submitted batch job 4242"\n',
    "sacct": 'echo "JobID|State|NodeList"\nfor i in 0 1 2; do echo "4242_$i|PENDING|None"; done\n',
    "srun": "exit 0\n",
}


def grpo_sweep(tmp: Path, *args: str, env: dict | None = None) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "train.grpo", "-m", f"paths.root_dir={tmp}", *args]
    return subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=env or os.environ.copy(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_slurm_launcher_submits_one_array_task_per_point(toy_mixture, tmp_path):
    bin_dir, log = tmp_path / "bin", tmp_path / "log"
    bin_dir.mkdir()
    log.mkdir()
    for name, body in FAKE_SLURM.items():
        (bin_dir / name).write_text("#!/bin/bash\n" + body)
        (bin_dir / name).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_"))}
    env |= {"PATH": f"{bin_dir}:{env['PATH']}", "FAKE_LOG": str(log)}
    proc = grpo_sweep(
        tmp_path,
        "hydra/launcher=slurm",
        "init=random",
        f"data.dir={toy_mixture}",
        "reward.reward_weights.prs=1,2,4",
        env=env,
    )  # what the pre-flight checks before anything is submitted: the init and the data
    folder = tmp_path / "runs" / "grpo_sweep" / ".submitit"
    t0 = time.time()
    try:  # the jobs stay PENDING under the fake sacct: stop waiting once all three are submitted
        while len(list(folder.glob("4242_*/4242_*_submitted.pkl"))) < 3:
            assert proc.poll() is None, proc.stdout.read()[-3000:]
            assert time.time() - t0 < 120, "no submission"
            time.sleep(0.1)
    finally:
        proc.kill()
        proc.communicate()
    script = (log / "sbatch.sh").read_text()
    for line in (
        "#SBATCH --array=0-2%3",  # min(points, array_parallelism)
        "#SBATCH --gpus-per-node=1",
        "#SBATCH --time=1440",
        "#SBATCH --requeue",
        "#SBATCH --signal=USR2@120",
        "export WANDB_RUN_ID=slurm-$SLURM_ARRAY_JOB_ID-$SLURM_ARRAY_TASK_ID",
        "export WANDB_RESUME=allow",
    ):
        assert line in script.splitlines(), line
    assert "--partition" not in script and "--account" not in script
    assert "-m submitit.core._submit" in script.splitlines()[-1]
    # asked first whether such a job can ever start (tests/slurm/test_real_slurm.py: refused)
    asked = (log / "test-only.args").read_text().split()
    assert asked == [
        "--test-only",
        *(f"--{k}=1" for k in ("nodes", "ntasks-per-node")),
        "--cpus-per-task=16",
        "--gpus-per-node=1",
        "--time=1440",
        "--wrap=true",
    ], asked
    points = []
    for task in range(3):
        with (folder / f"4242_{task}" / f"4242_{task}_submitted.pkl").open("rb") as fh:
            delayed = pickle.load(fh)
        assert delayed._timeout_countdown == 20  # max_num_timeout requeues after time-outs
        points.append(delayed.args[0][-1])  # the job's overrides: paths.root_dir, then the point
    assert points == [f"reward.reward_weights.prs={w}" for w in (1, 2, 4)]


@pytest.fixture(scope="module")
def toy_mixture(tmp_path_factory) -> Path:
    from data_builders.mixture import build_toy_mixture

    root = tmp_path_factory.mktemp("sweep_data")
    return build_toy_mixture(root / "built", root / "toy", n=8, seed=0)


@pytest.mark.slow
def test_local_launcher_runs_every_point_as_a_submitit_job(toy_mixture, tmp_path):
    proc = grpo_sweep(
        tmp_path, "hydra/launcher=local", f"data.dir={toy_mixture}", *TINY, "reward.reward_weights.prs=1,2"
    )
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-3000:]
    sweep = tmp_path / "runs" / "grpo_sweep"
    jobs = sorted(p for p in (sweep / ".submitit").iterdir() if p.name.isdigit())
    assert len(jobs) == 2, jobs
    for job in jobs:
        assert (job / f"{job.name}_submitted.pkl").exists()
        assert (job / f"{job.name}_0_result.pkl").exists()
        with (job / f"{job.name}_0_result.pkl").open("rb") as fh:
            status, _ = pickle.load(fh)
        assert status == "success"
    for weight in (1, 2):
        (run,) = sweep.glob(
            f"*reward.reward_weights.prs={weight}*"
        )  # <override_dirname>: one run dir per point
        assert (run / "final" / "model.safetensors").exists()
        assert yaml.safe_load((run / "config.yaml").read_text())["reward"]["reward_weights"]["prs"] == weight
        assert len((run / "history.jsonl").read_text().splitlines()) == 1
    result = json.loads(out.strip().splitlines()[-1])  # the sweep's table, printed on this terminal
    assert result["sweep_dir"] == str(sweep) and result["swept"] == ["reward.reward_weights.prs"]
    assert [row["reward.reward_weights.prs"] for row in result["rows"]] == ["1", "2"]
