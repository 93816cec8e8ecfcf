"""A fake Slurm cluster for the sbatch scripts (fixture ``cluster``): ``srun``, ``scontrol``, ``scancel``,
``accelerate`` and ``python`` stand-ins first on PATH, and the environment Slurm gives a batch job (2 nodes x 4 GPUs).

The fake ``srun`` runs its command once per node, all nodes at once as Slurm does (the nodes of a real
launch rendezvous with each other), each with its own ``SLURM_NODEID``, and exits with the worst status; the fake
launchers record their exact argv (NUL-separated) and a few environment variables per node, then
behave as ``FAKE_MODE`` says: ``ok`` (exit 0), ``exit75`` (the requeue status), ``fail`` (exit 1), or
``wait`` (block until the fake ``scancel`` delivers USR1 to them, then exit 1 like torch's elastic
launcher after its workers saved and exited 75).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
JOB_ID = 4242
HOSTS = ("gpu-07", "gpu-08")
ENV_KEYS = (
    "WANDB_RUN_ID",
    "WANDB_RESUME",
    "SRUN_CPUS_PER_TASK",
    "NUM_MACHINES",
    "ACCELERATE_CONFIG",
    "NCCL_DEBUG",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    "OMP_NUM_THREADS",
)

SRUN = r"""#!/bin/bash
printf '%s\0' "$@" > "$FAKE_LOG/srun.args"
while [[ $1 == -* ]]; do shift; done
pids=()
for ((node = 0; node < SLURM_NNODES; node++)); do
  SLURM_NODEID=$node SLURM_PROCID=$node SLURM_LOCALID=0 "$@" &
  pids+=($!)
done
worst=0
for pid in "${pids[@]}"; do
  status=0
  wait "$pid" || status=$?
  if ((status > worst)); then worst=$status; fi
done
exit "$worst"
"""

SCONTROL = r"""#!/bin/bash
printf '%s\n' "$*" >> "$FAKE_LOG/scontrol.calls"
if [[ $1 == show && $2 == hostnames ]]; then
  printf '%s\n' $FAKE_HOSTS
fi
if [[ $1 == show && $2 == job ]]; then
  printf '%s\n' "${FAKE_JOB_INFO:-JobId=$3 JobName=x}"
fi
"""

SCANCEL = r"""#!/bin/bash
printf '%s\n' "$*" >> "$FAKE_LOG/scancel.calls"
for pid_file in "$FAKE_LOG"/*.pid; do
  kill -USR1 "$(cat "$pid_file")" || true
done
touch "$FAKE_LOG/stop"
"""

LAUNCHER = r"""#!/bin/bash
name="$(basename "$0").${SLURM_NODEID:-0}"
printf '%s\0' "$@" > "$FAKE_LOG/$name.args"
for key in __ENV_KEYS__; do printf '%s=%s\n' "$key" "${!key-<unset>}"; done > "$FAKE_LOG/$name.env"
case "$FAKE_MODE" in
  ok) exit 0 ;;
  exit75) exit 75 ;;
  fail) exit 1 ;;
  wait)
    echo $$ > "$FAKE_LOG/$name.pid"
    until [[ -e $FAKE_LOG/stop ]]; do sleep 0.05; done
    sleep 0.2  # a USR1 that was not ignored would have ended us by now
    touch "$FAKE_LOG/$name.survived"
    exit 1 ;;
esac
""".replace("__ENV_KEYS__", " ".join(ENV_KEYS))


@dataclass
class FakeCluster:
    """Where the fakes live and what they recorded."""

    bin: Path
    log: Path
    spool: Path
    env: dict[str, str]

    def args(self, name: str) -> list[str]:
        """The argv a fake recorded (``srun``, ``accelerate.0``, ``python.0``, ...)."""
        raw = (self.log / f"{name}.args").read_bytes()
        return [a.decode() for a in raw.split(b"\0")[:-1]]

    def recorded_env(self, name: str) -> dict[str, str]:
        lines = (self.log / f"{name}.env").read_text().splitlines()
        return dict(line.split("=", 1) for line in lines)

    def calls(self, tool: str) -> list[str]:
        path = self.log / f"{tool}.calls"
        return path.read_text().splitlines() if path.exists() else []

    def sbatch(self, script: str, *args: str, cwd: Path | None = None, **env: str) -> subprocess.Popen:
        """Run ``slurm/<script>`` the way sbatch does: a copy in a spool dir, started from ``cwd`` (sbatch
        starts it in the submit dir; the spool dir by default, where a path relative to it would fail)."""
        copy = self.spool / script
        shutil.copy(ROOT / "slurm" / script, copy)
        return subprocess.Popen(
            ["bash", str(copy), *args],
            cwd=cwd or self.spool,
            env={**self.env, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def wait_for(self, name: str, timeout: float = 20.0) -> None:
        t0 = time.time()
        while not (self.log / name).exists():
            if time.time() - t0 > timeout:
                raise AssertionError(f"{name} never appeared in {self.log}")
            time.sleep(0.02)


def make_cluster(tmp: Path, mode: str = "ok", **slurm: str) -> FakeCluster:
    """Fakes under ``tmp`` and a batch job's environment; ``slurm`` adds or replaces variables.
    The Slurm commands are on PATH; the launchers (``accelerate``, ``python``) only in a fake virtual
    environment (``VENV``), which the scripts must activate themselves."""
    bin_dir, venv, log, spool = tmp / "bin", tmp / "venv", tmp / "log", tmp / "spool"
    for d in (bin_dir, venv / "bin", log, spool):
        d.mkdir(parents=True)
    for folder, name, text in [
        (bin_dir, "srun", SRUN),
        (bin_dir, "scontrol", SCONTROL),
        (bin_dir, "scancel", SCANCEL),
        (venv / "bin", "accelerate", LAUNCHER),
        (venv / "bin", "python", LAUNCHER),
    ]:
        (folder / name).write_text(text)
        (folder / name).chmod(0o755)
    (venv / "bin" / "activate").write_text(f'export PATH="{venv / "bin"}:$PATH"\n')
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLURM_", "SRUN_", "SBATCH_", "WANDB_RUN_ID", "WANDB_RESUME"))
        and k
        not in (
            "MAIN_PORT",
            "GPUS_PER_NODE",
            "ACCELERATE_CONFIG",
            "EVAL_MODULE",
            "MAX_REQUEUES",
            "VIRTUAL_ENV",
            "CUDA_VISIBLE_DEVICES",
            "NCCL_DEBUG",
            "OMP_NUM_THREADS",
            "CONDA_ENV",
            "VENV",
        )
    }
    system = ":".join(p for p in os.environ["PATH"].split(":") if not (Path(p) / "accelerate").exists())
    env = base | {
        "PATH": f"{bin_dir}:{system}",
        "VENV": str(venv),
        "FAKE_LOG": str(log),
        "FAKE_MODE": mode,
        "FAKE_HOSTS": " ".join(HOSTS),
        "SLURM_JOB_ID": str(JOB_ID),
        "SLURM_JOB_NAME": "sft",
        "SLURM_NNODES": "2",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_JOB_NODELIST": "gpu-[07-08]",
        "SLURM_GPUS_PER_NODE": "gpu:4",
        "SLURM_CPUS_PER_TASK": "32",
        "SLURM_SUBMIT_DIR": str(ROOT),
    }
    return FakeCluster(bin_dir, log, spool, env | slurm)


@pytest.fixture
def cluster(tmp_path):
    """``cluster(mode="ok", **slurm_env)`` -> a fresh :class:`FakeCluster` under ``tmp_path``."""
    made = []

    def make(mode: str = "ok", **slurm: str) -> FakeCluster:
        made.append(make_cluster(tmp_path / f"cluster{len(made)}", mode, **slurm))
        return made[-1]

    return make


#: The real-Slurm test (tests/slurm/test_real_slurm.py) starts Slurm daemons: only ``make test-slurm``
#: (PROACTIVE_REAL_SLURM=1) collects it, so ``make test`` neither runs nor skips it.
collect_ignore = [] if os.environ.get("PROACTIVE_REAL_SLURM") == "1" else ["test_real_slurm.py"]


@pytest.fixture
def tiny_grpo() -> list[str]:
    """GRPO overrides for one update of the tiny model on toy windows (2 windows x 2 rollouts of 2
    tokens): the shortest run that still writes a checkpoint."""
    return [
        "grpo.max_steps=1",
        "grpo.save_every=1",
        "grpo.windows_per_step=2",
        "grpo.num_generations=2",
        "grpo.window_steps=6",
        "grpo.max_new_tokens=2",
        "grpo.eval_split=null",
        "grpo.keep_best=false",
        "grpo.num_threads=1",
    ]
