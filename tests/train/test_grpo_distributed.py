"""GRPO over 2 processes (``accelerate launch``, DeepSpeed on CPU, gloo): the update equals the
one-process update over the same windows, under ZeRO-2 and under ZeRO-3 with compiled rollouts
(``grpo.compile_rollouts``: the graphs run the weights ZeRO-3 gathers); SIGUSR1 to one rank makes every
rank save its part and exit 75, and the rerun continues from that checkpoint.

The runs use ``loss_type=dapo`` and ``scale_rewards=batch``: both normalize by totals over every
rank (generated tokens, reward moments), so a rank that normalized by its own share would differ."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.checkpoints import complete_checkpoints
from tests.conftest import free_port, ranks_lock

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.ranks]
#: Four windows per update (two per rank), seed 16: every window of update 1 has signal (with the
#: reply tokens drawn by the engine's own generator; seed 8 was the one before).
SETTINGS = [
    "init=random",
    "grpo.windows_per_step=4",
    "grpo.num_generations=2",
    "grpo.window_steps=10",
    "grpo.max_new_tokens=4",
    "grpo.eval_split=null",
    "grpo.learning_rate=1e-3",
    "grpo.temperature=5.0",
    "grpo.num_threads=1",
    "grpo.seed=16",
    "grpo.loss_type=dapo",
    "grpo.scale_rewards=batch",
]
TIMINGS = ("rollout_s", "reward_s", "update_s")


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> Path:
    from data_builders.mixture import build_toy_mixture

    root = tmp_path_factory.mktemp("grpo_dist")
    build_toy_mixture(root / "built", root / "toy", n=8, seed=0)
    return root


def accelerate(config: str, processes: int = 2) -> list[str]:
    exe = shutil.which("accelerate", path=str(Path(sys.executable).parent)) or "accelerate"
    return [
        exe,
        "launch",
        "--config_file",
        f"conf/accelerate/{config}.yaml",
        "--num_processes",
        str(processes),
        "--main_process_port",
        str(free_port()),
    ]


def grpo(launcher: list[str], toy: Path, run: Path, *extra: str) -> list[str]:
    return [
        *launcher,
        "-m",
        "train.grpo",
        f"paths.root_dir={toy}",
        f"paths.cache_dir={toy / 'cache'}",
        f"data.dir={toy / 'toy'}",
        f"grpo.output_dir={run}",
        *SETTINGS,
        *extra,
    ]


def history(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]


def weights(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(folder / "model.safetensors")


def max_difference(a: dict, b: dict) -> float:
    assert set(a) == set(b)
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


@pytest.fixture(scope="module")
def single(toy, tmp_path_factory) -> Path:
    """The one-process reference, run in this process (``python -m train.grpo`` starts fresh in
    tests/train/test_grpo_run.py) at its own thread count, put back after; a module fixture, so it
    runs before the test takes the ranks lock alone, beside other tests (``ranks_lock`` shared)."""
    import torch

    from train.grpo.run import compose_config, run

    single = tmp_path_factory.mktemp("grpo_single") / "single"
    threads = torch.get_num_threads()
    try:
        with ranks_lock(tmp_path_factory):
            run(compose_config(grpo([], toy, single, "grpo.max_steps=2")[2:]), single)
    finally:
        torch.set_num_threads(threads)
    return single


def test_two_processes_equal_one_process_under_zero2_and_zero3(toy, single, tmp_path):
    one = history(single)
    assert [row["zero_std_groups"] for row in one][0] == 0  # update 1: every window has signal
    start = weights(next((toy / "cache").glob("tiny-*")))
    moved = max_difference(weights(single / "final"), start)
    assert moved > 5e-4  # the updates changed the weights: the comparison below means something
    figures = {}
    for stage, compiled in (("zero2", "false"), ("zero3", "true")):
        run = tmp_path / stage
        out = subprocess.run(
            grpo(accelerate(stage), toy, run, "grpo.max_steps=2", f"grpo.compile_rollouts={compiled}"),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        assert f"DeepSpeed ZeRO-{stage[-1]}" in out.stderr
        two = history(run)
        assert len(two) == len(one) == 2
        if compiled == "true":  # a frame step's graph and a reply token's, built at update 1 only
            assert [row["rollout_graphs"] for row in two] == [2, 2]
        assert "loss" in one[0]  # update 1 trains; an update whose groups have no signal has no loss
        for a, b in zip(one, two, strict=True):
            assert a.keys() - {"rollout_graphs"} == b.keys() - {"rollout_graphs"}
            if "loss" in a:
                assert a["loss"] == pytest.approx(b["loss"], abs=1e-4) and abs(a["loss"]) > 1e-3
            for key in a.keys() - {*TIMINGS, "loss"}:
                assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6), key
        diff = max_difference(weights(single / "final"), weights(run / "final"))
        assert diff < 1e-4
        losses = [b["loss"] - a["loss"] for a, b in zip(one, two) if "loss" in a]
        figures[stage] = {"loss": losses, "weights": diff}
    print(f"weights moved {moved:.2e} from the start; 2 processes vs 1: {figures}")  # quoted in docs/grpo.md


def workers(launcher: subprocess.Popen) -> dict[int, int]:
    """rank -> pid of the launcher's worker processes."""
    found = {}
    for line in subprocess.run(
        ["ps", "-o", "pid=", "--ppid", str(launcher.pid)], capture_output=True, text=True
    ).stdout.split():
        env = Path(f"/proc/{line}/environ").read_bytes().split(b"\0")
        rank = [e.split(b"=", 1)[1] for e in env if e.startswith(b"RANK=")]
        if rank:
            found[int(rank[0])] = int(line)
    return found


def test_usr1_to_one_rank_saves_every_rank_exits_75_and_the_rerun_continues(toy, tmp_path):
    run = tmp_path / "run"
    proc = subprocess.Popen(
        grpo(accelerate("zero2"), toy, run, "grpo.max_steps=500", "grpo.save_every=1000"),
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    t0 = time.time()
    while not ((run / "history.jsonl").exists() and (run / "history.jsonl").read_text().strip()):
        assert proc.poll() is None, proc.stdout.read().decode()[-3000:]
        assert time.time() - t0 < 300, "no update logged"
        time.sleep(0.05)
    ranks = workers(proc)
    assert sorted(ranks) == [0, 1]
    os.kill(ranks[1], signal.SIGUSR1)  # rank 1 only
    output = proc.communicate(timeout=300)[0].decode()
    assert proc.returncode != 0  # the launcher reports failed workers, not their status
    # Every rank saved its part and set out to exit 75; the launcher reports the first worker to
    # exit and may stop a slower one on its way out, so its summary can show one 75 or two.
    for rank in (0, 1):
        assert f"rank {rank}/2 WARNING train.grpo: preempted: saved" in output, output[-3000:]
    assert 1 <= output.count("exitcode  : 75") <= 2, output[-3000:]
    (ckpt,) = complete_checkpoints(run)
    step = int(ckpt.name.split("-")[1])
    shards = sorted(p.name for p in (ckpt / "deepspeed" / "state").glob("zero_pp_rank_*_optim_states.pt"))
    assert shards == [f"zero_pp_rank_{r}_mp_rank_00_optim_states.pt" for r in (0, 1)]
    assert (ckpt / "model.safetensors").exists() and not (run / "final").exists()

    again = subprocess.run(
        grpo(accelerate("zero2"), toy, run, f"grpo.max_steps={step + 1}", "grpo.save_every=1000"),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert f"resumed from {ckpt} at update {step}" in again.stderr
    assert [row["step"] for row in history(run)] == list(range(1, step + 2))  # continued, nothing repeated
    assert (run / "final" / "model.safetensors").exists()
