"""Run control that keeps progress: checkpoint rotation, non-finite stops, signals during start-up,
and no silent fresh start."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from transformers import TrainerCallback

from data_builders.mixture import build_toy_mixture
from engine.checkpoints import (
    COMPLETE_MARKER,
    checkpoint_name,
    checkpoint_step,
    complete_checkpoints,
    named_step,
)
from infra.run_control import NonFiniteLoss
from train.run_dir import (
    NONFINITE_MARKER,
    UnexpectedFreshStart,
    checkpoint_dirs,
    resolve_resume,
    rotate_checkpoints,
    set_aside_previous_run,
)
from train.sft.run import build_trainer, compose_config, train

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def toy_data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("runcontrol")
    build_toy_mixture(root / "built", root / "toy", n=8, seed=0)
    return root


def sft_overrides(data: Path, out: Path, *extra: str) -> list[str]:
    return [
        "experiment=toy_sft",
        f"paths.data_dir={data}",
        f"paths.cache_dir={data / 'cache'}",
        f"sft.output_dir={out}",
        "sft.per_device_batch_size=4",
        "sft.logging_steps=1",
        "sft.num_threads=1",
        *extra,
    ]


def _checkpoints(run: Path, steps: dict[int, bool]) -> None:
    for step, complete in steps.items():
        (run / checkpoint_name(step)).mkdir(parents=True)
        if complete:
            (run / checkpoint_name(step) / COMPLETE_MARKER).write_text(f"{step}\n")


def test_one_checkpoint_name_is_written_and_parsed(tmp_path):
    """``checkpoint-<step>``: named by ``checkpoint_name``, read back by ``named_step``, and only
    whole names count (``checkpoint-3.bak``, ``final`` are not checkpoints)."""
    assert checkpoint_name(12) == "checkpoint-12" and named_step(tmp_path / "checkpoint-12") == 12
    assert [named_step(n) for n in ("checkpoint-3.bak", "final", "checkpoint-", "xcheckpoint-3")] == [
        None
    ] * 4
    _checkpoints(tmp_path, {3: True, 12: True})
    (tmp_path / "checkpoint-3.bak").mkdir()
    assert [p.name for p in checkpoint_dirs(tmp_path)] == ["checkpoint-3", "checkpoint-12"]
    assert [p.name for p in complete_checkpoints(tmp_path)] == ["checkpoint-3", "checkpoint-12"]
    assert checkpoint_step(tmp_path / "checkpoint-12") == 12


def test_rotation_keeps_the_newest_complete_checkpoints(tmp_path):
    _checkpoints(tmp_path, {2: True, 4: False, 6: True, 8: True, 10: False})
    gone = rotate_checkpoints(tmp_path, keep=1)
    assert [p.name for p in gone] == ["checkpoint-2", "checkpoint-4", "checkpoint-6"]
    assert [p.name for p in checkpoint_dirs(tmp_path)] == ["checkpoint-8", "checkpoint-10"]
    assert rotate_checkpoints(tmp_path, keep=None) == []
    with pytest.raises(ValueError, match="save_total_limit must be at least 1"):
        rotate_checkpoints(tmp_path, keep=0)


def test_a_kill_while_saving_leaves_the_last_complete_checkpoint(toy_data, tmp_path):
    """save_total_limit=1: the step-2 save dies before its checkpoint is complete; checkpoint-1, the
    last complete one, must still be there for resume=auto (the Trainer's own rotation deleted it
    before the new checkpoint was complete)."""

    class Killed(RuntimeError):
        pass

    class KillWhileSaving(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            if state.global_step == 2:
                raise Killed("killed while saving")

    run = tmp_path / "run"
    cfg = compose_config(
        sft_overrides(toy_data, run, "sft.max_steps=3", "sft.save_steps=1", "sft.save_total_limit=1")
    )
    trainer, _ = build_trainer(cfg)
    trainer.callback_handler.callbacks.insert(0, KillWhileSaving())
    with pytest.raises(Killed):
        trainer.train()
    assert [p.name for p in complete_checkpoints(run)] == ["checkpoint-1"]
    assert resolve_resume("auto", run) == str(run / "checkpoint-1")


def test_checkpoints_of_a_nonfinite_streak_are_not_resumed(toy_data, tmp_path):
    """The update of step 2 makes the weights NaN (its own loss was finite); steps 3 and 4 are
    non-finite and stop the run. Checkpoint 2 holds the NaN weights and 3 was saved during the
    streak: neither may stay complete, so resume=auto restarts from checkpoint 1."""
    run = tmp_path / "run"
    cfg = compose_config(
        sft_overrides(
            toy_data,
            run,
            "sft.max_steps=10",
            "sft.save_steps=1",
            "sft.save_total_limit=null",
            "sft.max_nonfinite_steps=2",
        )
    )
    trainer, _ = build_trainer(cfg)

    class Diverge(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 2:
                with torch.no_grad():
                    trainer.model.lm_head.weight.fill_(float("nan"))

    trainer.callback_handler.callbacks.insert(0, Diverge())
    with pytest.raises(NonFiniteLoss, match="2 non-finite losses in a row"):
        train_with(trainer, run)
    assert [p.name for p in complete_checkpoints(run)] == ["checkpoint-1"]
    assert (run / "checkpoint-2" / NONFINITE_MARKER).exists()
    assert not (run / "checkpoint-3" / COMPLETE_MARKER).exists()
    assert resolve_resume("auto", run) == str(run / "checkpoint-1")


def train_with(trainer, run: Path) -> None:
    """What ``train.sft.run.train`` does around ``trainer.train`` on a non-finite stop."""
    from train.run_dir import retire_nonfinite

    try:
        trainer.train()
    except NonFiniteLoss:
        retire_nonfinite(run)
        raise


def test_an_unexpected_fresh_start_is_an_error(tmp_path):
    assert resolve_resume("auto", tmp_path / "new") is None
    _checkpoints(tmp_path / "broken", {4: False})
    with pytest.raises(UnexpectedFreshStart, match="none is complete.*resume=none"):
        resolve_resume("auto", tmp_path / "broken")
    assert resolve_resume("none", tmp_path / "broken") is None  # asked for
    (tmp_path / "done" / "final").mkdir(parents=True)
    with pytest.raises(UnexpectedFreshStart, match="finished run"):
        resolve_resume("auto", tmp_path / "done")


@pytest.mark.slow
def test_a_signal_during_start_up_exits_for_requeue(toy_data, tmp_path):
    """SIGUSR1 while the model loads (after the run dir is made, before the first step): a clean
    exit 75 and no checkpoint, not a process killed by the signal."""
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "train.sft", *sft_overrides(toy_data, run, "sft.max_steps=50")]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    t0 = time.time()
    while not (run / "run_info.json").exists():
        assert proc.poll() is None and time.time() - t0 < 120, "the run did not start"
        time.sleep(0.01)
    proc.send_signal(signal.SIGUSR1)
    assert proc.wait(120) == 75, proc.stdout.read().decode()[-2000:]
    assert checkpoint_dirs(run) == [] and not (run / "final").exists()


def test_sft_refuses_to_restart_a_run_dir_it_cannot_resume(toy_data, tmp_path):
    run = tmp_path / "run"
    _checkpoints(run, {5: False})
    with pytest.raises(UnexpectedFreshStart):
        train(compose_config(sft_overrides(toy_data, run, "sft.max_steps=1")))


def test_a_fresh_start_sets_the_earlier_run_aside(toy_data, tmp_path):
    """resume=none in a run dir of an earlier run (checkpoint-4 and -8 complete, final/): a 2-step
    retrain. Left in place, the old checkpoint-8 would stay the newest complete one, which
    resume=auto and eval.watch would take for the new run's."""
    run = tmp_path / "run"
    _checkpoints(run, {4: True, 8: True})
    (run / "final").mkdir()
    (run / "final" / "marker").write_text("old")
    final = train(compose_config(sft_overrides(toy_data, run, "sft.max_steps=2", "sft.resume=none")))
    assert complete_checkpoints(run) == [run / "checkpoint-2"]
    assert resolve_resume("auto", run) == str(run / "checkpoint-2")
    assert not (final / "marker").exists()
    [aside] = (run / "superseded").iterdir()
    assert sorted(p.name for p in aside.iterdir()) == ["checkpoint-4", "checkpoint-8", "final"]
    assert (aside / "final" / "marker").read_text() == "old"  # moved whole, nothing deleted
    assert complete_checkpoints(aside) == [aside / "checkpoint-4", aside / "checkpoint-8"]


def test_a_fresh_start_keeps_its_own_start_checkpoint(tmp_path):
    run = tmp_path / "run"
    _checkpoints(run, {4: True})
    (run / "final").mkdir()
    aside = set_aside_previous_run(run, keep=run / "final")  # e.g. GRPO init= the run's own final/
    assert (run / "final").is_dir() and [p.name for p in aside.iterdir()] == ["checkpoint-4"]
    assert set_aside_previous_run(tmp_path / "empty") is None


def test_rerunning_a_finished_run_trains_nothing(toy_data, tmp_path, caplog):
    """The same command again after a run finished (resume=auto): the Trainer, resumed at
    max_steps in the middle of an epoch, used to train one step more (checkpoint-2 of 1,
    checkpoint-1 rotated away, final/ overwritten with other weights). A larger ``sft.max_steps``
    trains on, and says so in one line (it extended the run silently)."""
    run = tmp_path / "run"
    cfg = compose_config(sft_overrides(toy_data, run, "sft.max_steps=1", "sft.save_steps=1"))
    final = train(cfg)
    weights = (final / "model.safetensors").read_bytes()
    assert train(cfg) == final
    assert [p.name for p in checkpoint_dirs(run)] == ["checkpoint-1"]
    assert (final / "model.safetensors").read_bytes() == weights
    more = compose_config(sft_overrides(toy_data, run, "sft.max_steps=2", "sft.save_steps=1"))
    caplog.clear()
    with caplog.at_level("INFO", logger="train.sft"):
        train(more)  # a larger budget trains on from checkpoint-1
    said = [r.getMessage() for r in caplog.records if "finished run" in r.getMessage()]
    assert said == [f"{run}: resuming the finished run at step 1 to train on to sft.max_steps=2"]
    assert complete_checkpoints(run)[-1].name == "checkpoint-2"
    assert (final / "model.safetensors").read_bytes() != weights


def test_a_final_folder_cut_before_its_marker_is_not_a_finished_run(toy_data, tmp_path):
    """A run killed while its ranks saved ``final/`` (``config.json`` there, the weights cut, no
    ``COMPLETE``, which is written last once every rank's part is saved): the same command again
    is no finished run; it resumes as after a kill before ``final/`` and saves ``final/`` whole
    (before: ``config.json`` alone made the run finished, and the cut ``final/`` was returned)."""
    from safetensors.torch import load, load_file

    run = tmp_path / "run"
    cfg = compose_config(sft_overrides(toy_data, run, "sft.max_steps=1", "sft.save_steps=1"))
    final = train(cfg)
    whole = (final / "model.safetensors").read_bytes()
    (final / COMPLETE_MARKER).unlink()
    (final / "model.safetensors").write_bytes(whole[: len(whole) // 2])
    assert train(cfg) == final
    assert (final / COMPLETE_MARKER).is_file()
    assert load_file(final / "model.safetensors").keys() == load(whole).keys()


def test_the_time_budget_stops_sft_with_a_complete_checkpoint(toy_data, tmp_path):
    """A budget spent at the first step: the run control makes the Trainer save and stop there, the
    final weights are written, and progress.json says what stopped it (1 of 50 steps)."""
    from train.run_dir import read_progress

    run = tmp_path / "run"
    final = train(
        compose_config(
            sft_overrides(toy_data, run, "sft.max_steps=50", "sft.save_steps=100", "sft.time_budget_s=1e-6")
        )
    )
    assert read_progress(run) == {"done": 1, "planned": 50, "stopped_by": "time_budget"}
    assert [p.name for p in complete_checkpoints(run)] == ["checkpoint-1"]
    assert (final / COMPLETE_MARKER).read_text() == "1\n"
