"""``slurm/sft.sh`` and ``slurm/grpo.sh`` as a 2-node job on this machine with the REAL ``accelerate launch``
and DeepSpeed (the repository's conf/accelerate/zero2.yaml / zero3.yaml, gloo on CPU, one process per
node); only ``srun`` (both node commands at once) and ``scontrol`` are fakes (tests/slurm/conftest.py).

What it proves: the two nodes form ONE 2-rank job (every rank logs ``rank R/2``; the checkpoint holds one
DeepSpeed optimizer shard per rank), the job writes one complete checkpoint, and the launch writes the
job's environment nowhere: no ``.deepspeed_env`` (where DeepSpeed's multi-node runners copy every
variable, API keys included) in the submit dir, and the secrets set for the job appear in no file under
the repository, the run and the job's temp dir, nor in the job's log."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from engine.checkpoints import complete_checkpoints
from tests.conftest import free_port

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.ranks]
#: The secrets a training job has in its environment: W&B's key and the judge's (conf/benchmark/*.yaml
#: judge_key_env). Made up at run time so that this file itself never holds the value searched for.
SECRET_VARS = ("WANDB_API_KEY", "JUDGE_API_KEY")
ENV_FILE = ".deepspeed_env"


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> Path:
    from data_builders.mixture import build_toy_mixture

    root = tmp_path_factory.mktemp("multinode")
    build_toy_mixture(root / "built", root / "toy", n=8, seed=0)
    return root / "toy"


@pytest.fixture
def submit_dir_kept_clean():
    """The job runs from the repository root (sbatch's submit dir); an environment file it leaves
    there is removed afterwards so one failing run cannot leak into the next or into a commit."""
    existed = (ROOT / ENV_FILE).exists()
    yield ROOT
    if not existed:
        (ROOT / ENV_FILE).unlink(missing_ok=True)


def kill_job(pid: int) -> None:
    """SIGKILL the batch shell and every process under it: srun, the launchers and their workers (which
    torch's launcher starts in sessions of their own, out of reach of a process-group kill)."""
    table = subprocess.run(["ps", "-eo", "pid=,ppid="], capture_output=True, text=True).stdout.split()
    children: dict[int, list[int]] = {}
    for child, parent in zip(table[::2], table[1::2], strict=True):
        children.setdefault(int(parent), []).append(int(child))
    job, todo = [], [pid]
    while todo:
        job.append(todo.pop())
        todo += children.get(job[-1], [])
    for each in job:
        with contextlib.suppress(ProcessLookupError):
            os.kill(each, signal.SIGKILL)


def failure_lines(out: str) -> str:
    """What a failed job's log says about the failure: every line that names an error, a signal or a
    traceback (from any rank, however early), then the log's end."""
    said = re.compile(r"Error|error:|Traceback|terminate|what\(\)|Signal|signal|Abort|Killed")
    found = [line for line in out.splitlines() if said.search(line) and "FutureWarning" not in line]
    return "\n".join(found[:60]) + "\n--- the log's end:\n" + out[-3000:]


def files_holding(text: str, *roots: Path) -> list[str]:
    found = []
    for root in roots:
        out = subprocess.run(
            ["grep", "-rlIF", "--exclude-dir=.git", text, str(root)], capture_output=True, text=True
        )
        assert out.returncode in (0, 1), out.stderr
        found += out.stdout.split()
    return found


STAGES = {
    "sft": (
        "conf/accelerate/zero2.yaml",
        lambda toy, run, tiny_grpo: [
            "experiment=toy_sft",
            f"data.dir={toy}",
            f"sft.output_dir={run}",
            "sft.max_steps=1",
            "sft.save_steps=1",
            "sft.logging_steps=1",
            "sft.per_device_batch_size=1",
            "sft.num_threads=1",
            "sft.resume=none",
        ],
    ),
    "grpo": (
        "conf/accelerate/zero3.yaml",
        lambda toy, run, tiny_grpo: [
            "experiment=toy_grpo",
            "init=random",
            f"data.dir={toy}",
            f"grpo.output_dir={run}",
            *tiny_grpo,
        ],
    ),
}


@pytest.mark.parametrize("stage", ["sft", "grpo"])
def test_two_nodes_form_one_job_and_write_no_secret(
    cluster, toy, tmp_path, submit_dir_kept_clean, stage, tiny_grpo
):
    config, overrides = STAGES[stage]
    run = tmp_path / "run"
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    secrets = {name: f"{name.lower()}-{uuid.uuid4().hex}" for name in SECRET_VARS}
    c = cluster(
        FAKE_HOSTS="localhost localhost",
        SLURM_JOB_NODELIST="localhost",
        SLURM_CPUS_PER_TASK="1",
        GPUS_PER_NODE="1",  # one CPU process per "node"
        MAIN_PORT=str(free_port()),
        ACCELERATE_CONFIG=config,
        VENV=str(Path(sys.executable).parent.parent),
        PYTHONPATH=str(ROOT),
        PROACTIVE_CACHE=str(tmp_path / "cache"),
        TMPDIR=str(tmp),
        WANDB_MODE="offline",
        **secrets,
    )
    proc = c.sbatch(f"{stage}.sh", *overrides(toy, run, tiny_grpo), cwd=submit_dir_kept_clean)
    try:
        out, _ = proc.communicate(timeout=540)
    except subprocess.TimeoutExpired:
        kill_job(proc.pid)
        out = proc.communicate()[0]
        raise AssertionError(f"the 2-node {stage} job did not finish:\n{failure_lines(out)}") from None
    tail = failure_lines(out)

    # No secret anywhere the job could write, and no environment file.
    for name, value in secrets.items():
        assert value not in out, f"{name} printed in the job's log:\n{tail}"
        written = files_holding(value, ROOT, tmp_path)
        assert not written, f"{name} written to {written}"
    assert not (submit_dir_kept_clean / ENV_FILE).exists(), f"{ENV_FILE} written in the submit dir:\n{tail}"

    # One job of 2 ranks: every rank's log lines say "rank R/2" (a 1-rank world prints no rank).
    ranks = sorted(set(re.findall(r" rank (\d+)/(\d+) ", out)))
    assert ranks == [("0", "2"), ("1", "2")], f"ranks {ranks}, not one 2-rank job:\n{tail}"
    assert proc.returncode == 0, tail

    # One complete checkpoint, holding one optimizer shard from each rank.
    (ckpt,) = complete_checkpoints(run)
    assert ckpt.name == "checkpoint-1", ckpt
    shards = sorted(p.name for p in ckpt.rglob("*_optim_states.pt"))
    assert shards == [f"zero_pp_rank_{r}_mp_rank_00_optim_states.pt" for r in (0, 1)], shards
