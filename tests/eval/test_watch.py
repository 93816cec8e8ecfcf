"""eval.watch: each complete checkpoint of a run is evaluated exactly once, across restarts, logged to
the training run's W&B project against the checkpoint's training step."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from omegaconf import DictConfig

from engine.checkpoints import COMPLETE_MARKER
from eval.watch import LEDGER, load_config, read_ledger, run_dir_wait, watch
from infra import tracking
from pipeline.config import SCHEMAS
from tests.conftest import by_checkpoint


def make_checkpoint(run_dir: Path, step: int, complete: bool = True, source: Path | None = None) -> Path:
    ckpt = run_dir / f"checkpoint-{step}"
    if source is not None:
        shutil.copytree(source, ckpt)
    ckpt.mkdir(parents=True, exist_ok=True)
    if complete:
        (ckpt / COMPLETE_MARKER).write_text(f"{step}\n")
    return ckpt


def make_run(tmp: Path, logger: str = "wandb") -> Path:
    run_dir = tmp / "runs" / "sft_a"
    run_dir.mkdir(parents=True)
    logged = {"name": logger, "project": "train-project", "entity": "team", "mode": "online", "tags": ["t"]}
    (run_dir / "config.yaml").write_text(yaml.safe_dump({"run_name": "sft_a", "logger": logged}))
    return run_dir


class Recorder:
    """A stand-in for ``eval.run.evaluate`` that records the configs it gets; ``then`` runs a hook."""

    def __init__(self, then=None):
        self.seen: list[DictConfig] = []
        self.then = then or {}

    def __call__(self, cfg: DictConfig) -> dict:
        self.seen.append(cfg)
        hook = self.then.get(Path(cfg.checkpoint).name)
        if hook:
            hook()
        return {"overall": {"prs_b": float(cfg.step)}}

    @property
    def steps(self) -> list[int]:
        return [c.step for c in self.seen]


def cfg_for(run_dir: Path, *extra: str) -> DictConfig:
    return load_config([f"run_dir={run_dir}", "poll_s=0.01", *extra])


def test_watch_config_composes_into_its_schema():
    cfg = cfg_for(Path("runs/x"))
    assert SCHEMAS["watch"].__name__ == "WatchConfig"
    assert cfg.run_dir == "runs/x" and cfg.once is False and cfg.benchmark.name == "p3i"


def test_new_checkpoints_are_evaluated_once_until_the_run_finishes(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_RUN_ID", "slurm-1")  # inherited from a training job: must not leak
    monkeypatch.setenv("WANDB_MODE", "offline")
    run_dir = make_run(tmp_path)
    make_checkpoint(run_dir, 2)
    make_checkpoint(run_dir, 4, complete=False)  # being written: not evaluated yet

    def more():  # while checkpoint-2 is evaluated, checkpoint-4 completes and checkpoint-6 lands
        (run_dir / "checkpoint-4" / COMPLETE_MARKER).write_text("4\n")
        make_checkpoint(run_dir, 6)

    def finish():
        (run_dir / "final").mkdir()

    ev = Recorder({"checkpoint-2": more, "checkpoint-6": finish})
    env_seen = []
    ev.then["checkpoint-4"] = lambda: env_seen.append(__import__("os").environ.get("WANDB_RUN_ID"))
    assert by_checkpoint(watch(cfg_for(run_dir), evaluate=ev)) == [
        "p3i/checkpoint-2",
        "p3i/checkpoint-4",
        "p3i/checkpoint-6",
    ]
    assert ev.steps == [2, 4, 6] and env_seen == [None]
    first = ev.seen[0]
    assert first.checkpoint == str(run_dir / "checkpoint-2")
    assert first.out_dir == str(run_dir / "eval" / "p3i" / "checkpoint-2")
    assert (first.logger.name, first.logger.project, first.logger.entity) == (
        "wandb",
        "train-project",
        "team",
    )
    assert first.logger.mode == "offline" and list(first.logger.tags) == ["t"]
    assert "run_dir" not in first and "poll_s" not in first  # a plain eval.run config
    ledger = by_checkpoint(read_ledger(run_dir))
    assert sorted(ledger) == ["p3i/checkpoint-2", "p3i/checkpoint-4", "p3i/checkpoint-6"]
    assert ledger["p3i/checkpoint-4"]["step"] == 4 and ledger["p3i/checkpoint-4"]["status"] == "done"
    assert ledger["p3i/checkpoint-6"]["metrics"] == {"overall": {"prs_b": 6.0}}

    again = Recorder()  # a restarted watcher: nothing twice, only what is new
    assert by_checkpoint(watch(cfg_for(run_dir, "once=true"), evaluate=again)) == [] and again.seen == []
    make_checkpoint(run_dir, 8)
    assert by_checkpoint(watch(cfg_for(run_dir, "once=true"), evaluate=again)) == ["p3i/checkpoint-8"]
    assert again.steps == [8] and len(by_checkpoint(read_ledger(run_dir))) == 4
    other = Recorder()  # another benchmark keeps its own record
    assert len(watch(cfg_for(run_dir, "once=true", "benchmark=propermem"), evaluate=other)) == 4


def test_a_run_without_wandb_keeps_the_watchers_logger(tmp_path):
    run_dir = make_run(tmp_path, logger="none")
    make_checkpoint(run_dir, 1)
    ev = Recorder()
    watch(cfg_for(run_dir, "once=true", f"out_dir={tmp_path / 'evals'}"), evaluate=ev)
    assert ev.seen[0].logger.name == "none" and ev.seen[0].out_dir == str(tmp_path / "evals" / "checkpoint-1")


def test_a_checkpoint_deleted_during_its_evaluation_is_recorded_and_skipped(tmp_path):
    run_dir = make_run(tmp_path)
    ckpt = make_checkpoint(run_dir, 3)

    def rotated(cfg):
        shutil.rmtree(ckpt)
        raise FileNotFoundError(cfg.checkpoint)

    watch(cfg_for(run_dir, "once=true"), evaluate=rotated)
    assert by_checkpoint(read_ledger(run_dir))["p3i/checkpoint-3"]["status"] == "deleted"

    def broken(cfg):
        raise RuntimeError("a real failure")

    make_checkpoint(run_dir, 5)
    with pytest.raises(RuntimeError):
        watch(cfg_for(run_dir, "once=true"), evaluate=broken)
    assert "p3i/checkpoint-5" not in by_checkpoint(read_ledger(run_dir))  # retried by the next watcher


@pytest.mark.slow
def test_real_evaluations_of_two_tiny_checkpoints(tiny_checkpoint, toy_dir, tmp_path, monkeypatch):
    logged: list[tuple[str, str, int, str]] = []

    class Captured(tracking.EvalLogger):
        def __init__(self, cfg, run_name, config=None, group=None, run_dir=None, job_type="eval"):
            self.project, self.run_name = cfg.project, run_name

        def log_metrics(self, metrics, step, prefix):
            logged.append((self.project, self.run_name, step, prefix))

    monkeypatch.setattr(tracking.LOGGERS, "get", {"none": tracking.EvalLogger, "wandb": Captured}.__getitem__)
    run_dir = make_run(tmp_path)
    for step in (1, 3):
        make_checkpoint(run_dir, step, source=tiny_checkpoint)
    overrides = [
        f"records={toy_dir / 'records.jsonl'}",
        f"paths.cache_dir={tmp_path / 'cache'}",
        "render.max_pixels=4096",
        "max_new_tokens=4",
        "limit=2",
        "timelines=1",
        "once=true",
    ]
    assert by_checkpoint(watch(cfg_for(run_dir, *overrides))) == ["p3i/checkpoint-1", "p3i/checkpoint-3"]
    for step in (1, 3):
        out = run_dir / "eval" / "p3i" / f"checkpoint-{step}"
        assert (
            json.loads((out / "metrics.json").read_text())
            == by_checkpoint(read_ledger(run_dir))[f"p3i/checkpoint-{step}"]["metrics"]
        )
    assert logged == [
        ("train-project", "sft_a_checkpoint-1/p3i", 1, "eval/p3i"),
        ("train-project", "sft_a_checkpoint-3/p3i", 3, "eval/p3i"),
    ]
    assert by_checkpoint(watch(cfg_for(run_dir, *overrides))) == [] and (run_dir / LEDGER).exists()


def test_launch_accelerate_hands_each_checkpoint_its_whole_config(tmp_path, monkeypatch):
    """``launch=accelerate``: each evaluation is an ``accelerate launch -m eval.run`` whose config file,
    composed as eval.run composes it, is the inline evaluation's config."""
    from eval.config import EvalConfig
    from eval.watch import checkpoint_config, launch_command
    from infra.schema import compose

    run_dir = make_run(tmp_path)
    ckpt = make_checkpoint(run_dir, 7)
    cfg = cfg_for(run_dir, "launch=accelerate", "num_processes=2", "threshold=0.3", "logger.name=none")
    point = checkpoint_config(cfg, run_dir, ckpt)
    cmd = launch_command(point, tmp_path, 2)
    assert cmd[1:3] == ["launch", "--config_file"] and cmd[4:6] == ["--num_processes", "2"]
    assert cmd[-6:] == ["-m", "eval.run", "--config-path", str(tmp_path), "--config-name", "eval"]
    composed = compose("eval", [], EvalConfig, config_dir=tmp_path)
    assert composed == point and composed.threshold == 0.3 and composed.step == 7
    assert composed.out_dir == str(run_dir / "eval" / "p3i" / "checkpoint-7")
    launched = []
    monkeypatch.setattr(
        "eval.watch.launch_evaluate", lambda p, num_processes: launched.append(num_processes) or {}
    )
    assert by_checkpoint(watch(cfg_for(run_dir, "launch=accelerate", "num_processes=2", "once=true"))) == [
        "p3i/checkpoint-7"
    ]
    assert launched == [2]
    with pytest.raises(ValueError, match="launch='slurm': give inline or accelerate"):
        watch(cfg_for(run_dir, "launch=slurm", "once=true"))


def test_a_run_dir_that_appears_later_is_waited_for(tmp_path, caplog):
    """The watcher submitted with (or before) its training job: the run dir is made 0.3 s later, and
    the watcher goes on with it instead of failing (its log says until when it would wait)."""
    import threading

    run_dir = tmp_path / "runs" / "sft_later"
    cfg = cfg_for(run_dir, "once=true", "run_dir_wait_s=20", "logger_from_run=false")
    maker = threading.Timer(0.3, lambda: make_checkpoint(run_dir, 2))
    maker.start()
    recorder = Recorder()
    try:
        with caplog.at_level("INFO", logger="eval.watch"):
            assert by_checkpoint(watch(cfg, recorder)) == ["p3i/checkpoint-2"]
    finally:
        maker.cancel()
    assert recorder.steps == [2]
    assert f"run_dir={run_dir} does not exist yet: waiting until" in caplog.text
    assert "(run_dir_wait_s=20)" in caplog.text


def test_a_run_dir_that_never_appears_fails_at_the_deadline(tmp_path):
    import time

    run_dir = tmp_path / "runs" / "never"
    t0 = time.time()
    with pytest.raises(FileNotFoundError, match=r"run_dir=.*never: no such folder after waiting 0.2 s"):
        watch(cfg_for(run_dir, "once=true", "run_dir_wait_s=0.2"), Recorder())
    assert 0.2 <= time.time() - t0 < 5
    assert run_dir_wait(cfg_for(run_dir)) == 86400.0  # the default: a day
    assert run_dir_wait(cfg_for(run_dir, "once=true")) == 0.0  # once: what is there now


def test_the_command_waits_before_composing_and_names_the_deadline(tmp_path):
    """``python -m eval.watch`` waits for the run dir before it reads the run's render block (the
    command line path of a watcher submitted with its training job); at the deadline: exit 2."""
    import subprocess
    import sys

    missing = tmp_path / "runs" / "queued"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "eval.watch",
            f"run_dir={missing}",
            "run_dir_wait_s=0.3",
            "poll_s=0.1",
            "once=true",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert out.returncode == 2, out.stderr[-2000:]
    assert f"run_dir={missing} does not exist yet: waiting until" in out.stderr
    assert f"eval.watch: run_dir={missing}: no such folder after waiting 0.3 s" in out.stderr


def test_a_watcher_with_another_config_evaluates_again_into_its_own_folder(tmp_path):
    """A second watcher of one run dir with another threshold and limit evaluates every checkpoint
    (it evaluated none and exited 0), into a folder of its own, and keeps entries of its own; the
    first config run again evaluates nothing."""
    from omegaconf import OmegaConf

    run_dir = make_run(tmp_path, logger="none")
    make_checkpoint(run_dir, 2)
    make_checkpoint(run_dir, 4)

    def saves(cfg: DictConfig) -> dict:  # writes the folder's config.yaml as eval.run does
        Path(cfg.out_dir).mkdir(parents=True, exist_ok=True)
        OmegaConf.save(cfg, Path(cfg.out_dir) / "config.yaml")
        return {"threshold": cfg.threshold, "limit": cfg.limit}

    keys_a = watch(cfg_for(run_dir, "once=true"), evaluate=saves)
    keys_b = watch(cfg_for(run_dir, "once=true", "threshold=0.3", "limit=2"), evaluate=saves)
    assert by_checkpoint(keys_a) == by_checkpoint(keys_b) == ["p3i/checkpoint-2", "p3i/checkpoint-4"]
    assert set(keys_a).isdisjoint(keys_b)
    ledger = read_ledger(run_dir)
    assert sorted(ledger) == sorted(keys_a + keys_b)
    assert [ledger[k]["metrics"] for k in keys_b] == [{"threshold": 0.3, "limit": 2}] * 2
    assert {Path(ledger[k]["out_dir"]).parent for k in keys_a} == {run_dir / "eval" / "p3i"}
    (own,) = {Path(ledger[k]["out_dir"]).parent for k in keys_b}
    assert own.parent == run_dir / "eval" and own.name.startswith("p3i@")
    assert watch(cfg_for(run_dir, "once=true"), evaluate=saves) == []
    assert watch(cfg_for(run_dir, "once=true", "threshold=0.3", "limit=2"), evaluate=saves) == []


def test_the_training_runs_config_is_read_as_text(tmp_path, monkeypatch):
    """``${oc.env:...}`` in the watched run's config.yaml (its W&B project) stays that text in each
    evaluation's config, inline and in the file a multi-process launch composes."""
    from eval.config import EvalConfig
    from eval.watch import checkpoint_config, launch_command
    from infra.schema import compose

    monkeypatch.setenv("WATCH_SECRET", "s3cr3t")
    run_dir = make_run(tmp_path)
    saved = run_dir / "config.yaml"
    saved.write_text(saved.read_text().replace("train-project", "${oc.env:WATCH_SECRET}"))
    point = checkpoint_config(cfg_for(run_dir), run_dir, make_checkpoint(run_dir, 3))
    assert point.logger.project == "${oc.env:WATCH_SECRET}"
    launch_command(point, tmp_path, 2)
    assert compose("eval", [], EvalConfig, config_dir=tmp_path).logger.project == "${oc.env:WATCH_SECRET}"
