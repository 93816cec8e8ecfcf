"""The sbatch scripts under a REAL Slurm: ``make test-slurm`` (``.ci/run`` runs it after ``make test``).

Debian's slurm-wlm and munge on this machine (the make target installs them), a cluster started from
``tests/slurm/cluster/`` (its own state dir, munge socket and ports; the daemons stopped by their pids
at the end, pass or fail), and the project's own scripts submitted with ``slurm/submit.sh`` from the
repository root, as a user would. Only collected with ``PROACTIVE_REAL_SLURM=1`` (tests/slurm/conftest.py),
so ``make test`` keeps its time; run as root (the daemons, the stand-in GPU device files).

One node of 2 CPUs and 2 stand-in GPUs:

1. what a node that small can never run is refused at submission, naming the request and the node
   (the headers' 32 CPUs; the Slurm sweep launcher's 16), and the headers' smoke-test lines fit it;
2. a 2-point ``hydra/launcher=slurm`` GRPO sweep: one array task per point, both finish;
3. ``slurm/sft.sh`` with ``--gres=gpu:2`` (2 ranks) is pre-empted with ``scancel --batch
   --signal=USR1``: every rank saves, one line each and one from the launcher (no traceback), the job
   is requeued and resumes from that checkpoint; then ``slurm/grpo.sh`` with ``--gpus=2`` from its
   ``final/``, and ``slurm/eval.sh`` on it into ``<runs>/eval/<run>_final/<benchmark>``.

Two nodes (two slurmd on localhost, one GPU each): ``--nodes=2 slurm/sft.sh`` is one 2-rank job.

submitit (the sweep launcher) polls with ``sacct``; the cluster runs no slurmdbd (no database server
to install and start on 2 shared cores), so sacct says accounting is disabled, submitit logs that it
bypasses the error and goes by each point's result file, which a point writes when it ends, failed
or not. DeepSpeed's CPU communication op is JIT-built once per test run into its own
``TORCH_EXTENSIONS_DIR`` (half a minute on 2 idle cores), before the first DeepSpeed job.
Slurm holds a requeued job for two minutes (``BeginTime``); the test moves it forward
(``scontrol update StartTime=now``) as an administrator could.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.checkpoints import complete_checkpoints

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "tests" / "slurm" / "cluster" / "cluster.sh"
SUBMIT = ROOT / "slurm" / "submit.sh"
CPUS = 2  # per node, whatever this machine has: the node of a first job is small
pytestmark = pytest.mark.slow

SFT = [
    "experiment=toy_sft",
    "sft.per_device_batch_size=1",
    "sft.logging_steps=10",
    "sft.num_threads=1",
]


def tail(log: Path) -> str:
    return log.read_text()[-5000:] if log.exists() else f"(no log {log})"


class Slurm:
    """A running cluster: its ``SLURM_CONF`` and the environment jobs are submitted with."""

    def __init__(self, state: Path, env: dict[str, str]):
        self.state, self.env = state, env

    def run(self, *cmd: str | Path, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        out = subprocess.run(
            [str(c) for c in cmd], cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=timeout
        )
        if check and out.returncode != 0:
            raise AssertionError(
                f"{shlex.join(map(str, cmd))}: exit {out.returncode}\n{out.stdout}{out.stderr}"
            )
        return out

    def submit(self, *args: str | Path) -> str:
        """``slurm/submit.sh --parsable ARGS`` from the repository root: the job id."""
        return self.run(SUBMIT, "--parsable", *args).stdout.strip().split(";")[0]

    def job(self, job_id: str) -> dict[str, str]:
        line = self.run("scontrol", "show", "job", "-o", job_id).stdout
        return dict(f.split("=", 1) for f in line.split() if "=" in f)

    def wait(self, job_id: str, until, log: Path, timeout: float) -> dict[str, str]:
        """Poll the job until ``until(info)``; a job that ends otherwise or times out fails with its log."""
        t0 = time.time()
        while True:
            info = self.job(job_id)
            if until(info):
                return info
            ended = info["JobState"] in ("FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")
            if ended or info["JobState"] == "COMPLETED" or time.time() - t0 > timeout:
                raise AssertionError(f"job {job_id}: {info['JobState']} ({info.get('Reason')})\n{tail(log)}")
            time.sleep(0.5)

    def finish(self, job_id: str, log: Path, timeout: float = 300) -> str:
        info = self.wait(job_id, lambda i: i["JobState"] == "COMPLETED", log, timeout)
        assert info["ExitCode"] == "0:0", info
        return log.read_text()


def start_cluster(state: Path, base_env: dict[str, str], *nodes: str, port: int, gpus: int) -> Slurm:
    if os.geteuid() != 0:
        raise AssertionError("the real-Slurm test runs the Slurm daemons: run it as root (make test-slurm)")
    env = base_env | {"SLURM_CONF": str(state / "slurm.conf")}
    out = subprocess.run(
        ["bash", str(CLUSTER), "start", str(state), *nodes],
        env=env | {"CTLD_PORT": str(port), "GPUS": str(gpus), "CPUS": str(CPUS)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return Slurm(state, env)


def stop_cluster(state: Path) -> None:
    subprocess.run(["bash", str(CLUSTER), "stop", str(state)], timeout=120, check=True)
    left = [line.split()[0] for line in (state / "pids.stopped").read_text().splitlines()]
    assert not [pid for pid in left if Path(f"/proc/{pid}").exists()], f"daemons left running: {left}"


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("real_slurm")


@pytest.fixture(scope="module")
def toy(work) -> Path:
    from data_builders.mixture import build_toy_mixture

    return build_toy_mixture(work / "built", work / "toy", n=8, seed=0)


@pytest.fixture(scope="module")
def job_env(work) -> dict[str, str]:
    """What a user's shell would hand sbatch: the project's Python (VENV), offline W&B, a cache and a
    DeepSpeed extension folder of this test run's own."""
    base = {
        k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SRUN_", "WANDB_RUN"))
    }
    return base | {
        "VENV": str(Path(sys.executable).parent.parent),
        "PYTHONPATH": str(ROOT),
        "WANDB_MODE": "offline",
        "PROACTIVE_CACHE": str(work / "cache"),
        "TORCH_EXTENSIONS_DIR": str(work / "torch_extensions"),
        "PYTHONUNBUFFERED": "1",
    }


@pytest.fixture(scope="module")
def deepspeed_op(job_env) -> Path:
    """DeepSpeed's CPU communication op, built once for the run's jobs (which then load it)."""
    folder = Path(job_env["TORCH_EXTENSIONS_DIR"])
    venv_bin = Path(job_env["VENV"]) / "bin"
    build = subprocess.run(
        [
            sys.executable,
            "-c",
            "from deepspeed.accelerator import get_accelerator;"
            "get_accelerator().create_op_builder('ShareMemCommBuilder').load()",
        ],
        # with the job's PATH (its venv first): another ninja on PATH would keep another build log,
        # and each job would then build the op again
        env=job_env | {"PATH": f"{venv_bin}:{job_env['PATH']}"},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert build.returncode == 0, build.stdout[-2000:] + build.stderr[-3000:]
    (built,) = folder.glob("deepspeed_shm_comm*/deepspeed_shm_comm*.so")
    return built


@pytest.fixture(scope="module")
def slurm(work, job_env):
    state = work / "cluster1"
    try:
        yield start_cluster(state, job_env, "n1", port=16817, gpus=2)
    finally:
        stop_cluster(state)


def smoke_line(script: str) -> list[str]:
    """The sbatch flags of the script's header line marked ``(smoke test``."""
    for line in (ROOT / "slurm" / script).read_text().splitlines():
        if "(smoke test" in line:
            words = shlex.split(line.lstrip("# ").split("(smoke test")[0])
            return words[1 : words.index(f"slurm/{script}")]
    raise AssertionError(f"slurm/{script} has no smoke-test line")


def test_a_job_no_node_holds_is_refused_at_submission_naming_the_limit(slurm, toy, work):
    refused = slurm.run(SUBMIT, "--gpus-per-node=2", "slurm/sft.sh", "experiment=toy_sft", check=False)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "--cpus-per-task=32" in refused.stderr and f"n1: {CPUS} CPUs, gres gpu:2" in refused.stderr
    assert slurm.run("squeue", "-h", "-o", "%i").stdout.strip() == ""  # nothing left pending
    for script in ("sft.sh", "grpo.sh", "eval.sh"):  # the headers' smoke-test lines fit a small node
        flags = smoke_line(script)
        assert slurm.run(SUBMIT, "--check", *flags, f"slurm/{script}", check=False).returncode == 0, flags
    sweep = slurm.run(
        sys.executable,
        "-m",
        "train.grpo",
        "-m",
        "hydra/launcher=slurm",
        f"paths.root_dir={work / 'refused'}",
        "init=random",
        f"data.dir={toy}",  # the pre-flight's checks pass: the refusal is Slurm's
        "reward.reward_weights.prs=1,2",
        check=False,
        timeout=120,
    )
    assert sweep.returncode == 2, sweep.stdout + sweep.stderr
    assert "hydra/launcher=slurm: submit: Slurm can never start this job" in sweep.stderr
    assert "--cpus-per-task=16" in sweep.stderr and f"{CPUS} CPUs" in sweep.stderr
    assert not (work / "refused" / "runs" / "grpo_sweep" / ".submitit").exists()  # nothing submitted


def test_a_two_point_sweep_runs_as_slurm_array_tasks(slurm, toy, work, tiny_grpo):
    root = work / "sweep"
    out = slurm.run(
        sys.executable,
        "-m",
        "train.grpo",
        "-m",
        "hydra/launcher=slurm",
        "hydra.launcher.cpus_per_task=1",
        "hydra.launcher.timeout_min=10",
        f"paths.root_dir={root}",
        f"data.dir={toy}",
        "init=random",
        *tiny_grpo,
        "reward.reward_weights.prs=1,2",
        timeout=420,
    )
    sweep = root / "runs" / "grpo_sweep"
    tasks = sorted(p.name for p in (sweep / ".submitit").iterdir() if re.fullmatch(r"\d+_\d", p.name))
    assert len(tasks) == 2, (tasks, out.stderr[-3000:])  # one array task per point
    for weight in (1, 2):
        assert (sweep / f"reward.reward_weights.prs={weight}" / "final" / "model.safetensors").exists()


def test_sft_preempted_requeued_and_resumed_then_grpo_and_eval(slurm, toy, work, deepspeed_op, tiny_grpo):
    built = deepspeed_op.stat().st_mtime
    logs, run = work / "logs", work / "runs" / "sft_a"
    logs.mkdir()  # sbatch --output's folder must exist (else the job fails before it starts)
    job = slurm.submit(
        "--gres=gpu:2",
        f"--cpus-per-task={CPUS}",
        f"--output={logs}/%x-%j.log",
        "slurm/sft.sh",
        *SFT,
        f"data.dir={toy}",
        f"sft.output_dir={run}",
        "sft.max_steps=100",
        "sft.save_steps=10",
    )
    log = logs / f"sft-{job}.log"
    t0 = time.time()
    while not complete_checkpoints(run):
        assert slurm.job(job)["JobState"] in ("PENDING", "RUNNING"), tail(log)
        assert time.time() - t0 < 300, "no checkpoint"
        time.sleep(0.2)
    slurm.run("scancel", "--batch", "--signal=USR1", job)
    slurm.wait(job, lambda i: i["Restarts"] == "1" and i["JobState"] == "PENDING", log, 120)
    # Slurm holds a requeued job for 2 minutes; release it, but not within the second its old
    # credential was revoked (slurmd would refuse the new start: "Job credential revoked").
    time.sleep(2)
    slurm.run("scontrol", "update", f"JobId={job}", "StartTime=now")
    text = slurm.finish(job, log)

    first, second = text.split(f"launch: job {job} restart 1:")
    saved = sorted(set(re.findall(r"preempted: saved (\S+); exit 75 to be requeued", first)))
    assert len(saved) == 1 and len(re.findall(r"rank [01]/2 WARNING train.sft: preempted", first)) == 2, first
    step = int(saved[0].rsplit("-", 1)[1])
    assert 10 <= step < 100
    assert "launch: USR1 (time limit near)" in first
    assert "launch: pre-empted: 2 rank(s) of train.sft saved a checkpoint and exited 75" in first
    assert f"requeueing job {job}" in first
    assert "Traceback" not in text and "ChildFailedError" not in text, text[-4000:]
    assert f"resuming from {run}/checkpoint-{step}" in second
    assert "sft: 100/100 step" in second and (run / "final" / "model.safetensors").exists()
    assert deepspeed_op.stat().st_mtime == built  # the jobs loaded the op built once, never rebuilt it

    grpo_run = work / "runs" / "grpo_a"
    job = slurm.submit(
        "--gpus=2",
        f"--cpus-per-task={CPUS}",
        f"--output={logs}/%x-%j.log",
        "slurm/grpo.sh",
        "experiment=toy_grpo",
        f"init={run / 'final'}",
        f"data.dir={toy}",
        f"grpo.output_dir={grpo_run}",
        *tiny_grpo,
    )
    text = slurm.finish(job, logs / f"grpo-{job}.log")
    assert "1 machine(s) x 2 GPU(s)" in text and " rank 1/2 " in text
    assert (grpo_run / "final" / "model.safetensors").exists()

    job = slurm.submit(
        f"--cpus-per-task={CPUS}",
        f"--output={logs}/%x-%j.log",
        "slurm/eval.sh",
        f"checkpoint={run / 'final'}",
        f"records={toy / 'test' / 'records.jsonl'}",
        f"paths.runs_dir={work / 'runs'}",
        "limit=2",
        "max_new_tokens=4",
        "timelines=0",
    )
    text = slurm.finish(job, logs / f"eval-{job}.log")
    # named after the run (another run's final/ differs), the benchmark and, for records= and limit=, a label
    outs = sorted((work / "runs" / "eval" / "sft_a_final").glob("p3i@*"))
    assert len(outs) == 1, text[-3000:]
    out = outs[0]
    records = len((toy / "test" / "records.jsonl").read_text().splitlines())
    assert len((out / "predictions.jsonl").read_text().splitlines()) == min(2, records), text[-3000:]
    assert "1 machine(s) x 1 GPU(s)" in text and "sft_a_final on p3i" in text


def test_two_nodes_form_one_two_rank_job(work, toy, job_env, deepspeed_op):
    state, logs, run = work / "cluster2", work / "logs2", work / "runs" / "sft_2nodes"
    logs.mkdir()
    slurm = start_cluster(state, job_env, "n1", "n2", port=16827, gpus=1)
    try:
        job = slurm.submit(
            "--nodes=2",
            "--gpus-per-node=1",
            "--cpus-per-task=1",
            f"--output={logs}/%x-%j.log",
            "slurm/sft.sh",
            *SFT,
            f"data.dir={toy}",
            f"sft.output_dir={run}",
            "sft.max_steps=2",
            "sft.save_steps=2",
        )
        text = slurm.finish(job, logs / f"sft-{job}.log")
    finally:
        stop_cluster(state)
    assert "launch: job" in text and "2 machine(s) x 1 GPU(s)" in text
    ranks = sorted(set(re.findall(r"^([01]): .* rank (\d)/(\d) ", text, re.M)))
    assert ranks == [("0", "0", "2"), ("1", "1", "2")], ranks  # node 0 runs rank 0, node 1 rank 1
    (ckpt,) = complete_checkpoints(run)
    shards = sorted(p.name for p in ckpt.rglob("*_optim_states.pt"))
    assert shards == [f"zero_pp_rank_{r}_mp_rank_00_optim_states.pt" for r in (0, 1)], shards
