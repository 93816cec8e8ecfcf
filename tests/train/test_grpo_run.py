"""`python -m train.grpo` end to end on the tiny model: a 2x2 reward sweep and resume after a stop."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
#: conf/debug/tiny.yaml, at a learning rate that moves the tiny model and torch's own thread count
#: (each test sets its max_steps).
TINY = ["debug=tiny", "grpo.learning_rate=1e-3", "grpo.num_threads=null"]


@pytest.fixture(scope="module")
def toy_mixture(tmp_path_factory) -> Path:
    from data_builders.mixture import build_toy_mixture

    root = tmp_path_factory.mktemp("grpo_data")
    return build_toy_mixture(root / "built", root / "toy", n=8, seed=0)


def _run(args: list[str], tmp: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    flags = [a for a in args if a.startswith("-")]
    cmd = [
        sys.executable,
        "-m",
        "train.grpo",
        *flags,
        f"paths.root_dir={tmp}",
        *[a for a in args if a not in flags],
    ]
    environ = {**os.environ, **(env or {})}
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900, env=environ)


@pytest.mark.slow
def test_reward_sweep_points_compare_in_one_table_and_one_wandb_group(toy_mixture, tmp_path, offline_run):
    """A 2x2 reward sweep: one run dir per point named by the swept keys only, one W&B group named after
    the sweep (each run named by its point's values), and ``eval.sweep_table`` comparing the 4 points."""
    env_sweep = [
        "-m",
        f"data.dir={toy_mixture}",
        "grpo.max_steps=1",
        *TINY,
        "grpo.eval_split=train",  # the 8-clip toy mixture's val split may be empty
        "grpo.eval_every=1",
        "logger=wandb",
        "reward.reward_weights.prs=1,2",
        "reward.redundancy.penalty=0.1,0.2",
    ]
    out = _run(env_sweep, tmp_path, env={"WANDB_MODE": "offline", "WANDB_SILENT": "true"})
    assert out.returncode == 0, out.stderr[-3000:]
    sweep = tmp_path / "runs" / "grpo_sweep"
    points = sorted(p.name for p in sweep.iterdir() if p.is_dir() and not p.name.startswith("."))
    assert points == [
        f"reward.redundancy.penalty={lam},reward.reward_weights.prs={w}"
        for lam in ("0.1", "0.2")
        for w in (1, 2)
    ]  # the swept keys only: not init, data.dir, grpo.max_steps, logger ...
    groups, names = set(), set()
    for name in points:
        run = sweep / name
        assert (run / "final" / "model.safetensors").exists()
        cfg = yaml.safe_load((run / "config.yaml").read_text())
        point = dict(kv.split("=") for kv in name.split(","))
        assert cfg["reward"]["reward_weights"]["prs"] == float(point["reward.reward_weights.prs"])
        assert cfg["reward"]["redundancy"]["penalty"] == float(point["reward.redundancy.penalty"])
        [folder] = (run / "wandb").glob("offline-run-*")
        logged = offline_run(folder)
        groups.add(logged["run"]["group"])
        names.add(logged["run"]["name"])
        assert logged["run"]["job_type"] == "train"
        assert logged["config"]["sweep"]["point"] == point
        assert any("grpo/reward/mean" in row and row["train/global_step"] == 1 for row in logged["history"])
    assert groups == {"grpo_sweep"} and names == set(points)
    table = subprocess.run(
        [sys.executable, "-m", "eval.sweep_table", str(sweep)], cwd=ROOT, capture_output=True, text=True
    )
    assert table.returncode == 0, table.stderr
    result = json.loads(table.stdout.splitlines()[-1])
    assert result["swept"] == ["reward.redundancy.penalty", "reward.reward_weights.prs"]
    assert len(result["rows"]) == 4 and all(
        r["final_update"] == 1 and r["final"] is not None for r in result["rows"]
    )
    assert all(r["updates"] == "1/1" for r in result["rows"])
    assert len((sweep / "sweep.csv").read_text().splitlines()) == 5 and (sweep / "sweep.md").exists()


#: A 3-update run kept by its held-out score (evaluated before the first update, every 2 and after the
#: last), saving a checkpoint at every update: the keep-best test reads it, the resume test continues a
#: copy of it.
KEEP_BEST = [
    "grpo.max_steps=3",
    "grpo.eval_split=train",
    "grpo.eval_every=2",
    "grpo.keep_best=true",
    "grpo.save_every=1",
    "grpo.temperature=5.0",  # at 1 the random model's rollouts are all silent: no update
    *TINY,
]


@pytest.fixture(scope="module")
def kept(toy_mixture, tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """(the root its ``runs/grpo`` is under, the finished process) of the :data:`KEEP_BEST` run."""
    root = tmp_path_factory.mktemp("kept")
    out = _run([f"data.dir={toy_mixture}", *KEEP_BEST], root)
    assert out.returncode == 0, out.stderr[-3000:]
    return root, out


def updates(run: Path) -> list[int]:
    """The update of each row of ``history.jsonl`` an update logged (an evaluation logs rows of its own)."""
    rows = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    return [row["step"] for row in rows if "reward/mean" in row]


@pytest.mark.slow
def test_resume_continues_from_the_last_complete_checkpoint(toy_mixture, kept, tmp_path):
    shutil.copytree(kept[0] / "runs", tmp_path / "runs")
    run = tmp_path / "runs" / "grpo"
    assert (run / "checkpoint-3" / "COMPLETE").exists() and updates(run) == [1, 2, 3]
    again = _run([f"data.dir={toy_mixture}", *KEEP_BEST, "grpo.max_steps=4"], tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert updates(run) == [1, 2, 3, 4]  # the rerun did only update 4
    assert "resumed from" in again.stderr and "checkpoint-3" in again.stderr
    assert (run / "checkpoint-4" / "COMPLETE").exists()


@pytest.mark.slow
def test_keep_best_keeps_the_weights_of_the_best_held_out_evaluation(toy_mixture, kept):
    from safetensors.torch import load_file

    from benchmarks.runners import evaluate_model
    from data_builders.config import RenderConfig
    from data_builders.record_io import load_streams
    from data_builders.splits import split_records
    from engine.checkpoints import saved_render
    from engine.model import load_model_and_processor

    root, out = kept
    run = root / "runs" / "grpo"
    assert json.loads(out.stdout.splitlines()[-1]) == {"best_checkpoint": str(run / "best")}
    rows = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    evals = {r["step"]: r["eval/with_negatives/prs_b"] for r in rows if "eval/with_negatives/prs_b" in r}
    assert list(evals) == [0, 2, 3]  # before the first update, every 2, and after the last
    best = json.loads((run / "best" / "best.json").read_text())
    assert (run / "best" / "COMPLETE").read_text() == f"{best['step']}\n"  # written last (docs/design.md)
    assert (run / "final" / "COMPLETE").read_text() == "3\n"
    first_max = next(step for step, v in evals.items() if v == max(evals.values()))
    assert best == {"step": first_max, "metric": "with_negatives/prs_b", "value": evals[first_max]}
    # the saved weights are those of that evaluation: they score it again, and differ from the last
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    assert saved_render(run / "best") == cfg["render"]  # every checkpoint carries its render block
    model, processor = load_model_and_processor(
        {"name": "best", "kind": "pretrained", "path": str(run / "best"), "random_init": False}
    )
    records = split_records(toy_mixture / "train")
    again = evaluate_model(model, processor, load_streams(records), records, RenderConfig(**cfg["render"]))
    assert again["with_negatives"]["prs_b"] == pytest.approx(best["value"])
    weights, final = (load_file(run / d / "model.safetensors") for d in ("best", "final"))
    assert (best["step"] == 3) == all(bool((weights[k] == final[k]).all()) for k in final)
