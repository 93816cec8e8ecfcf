"""The run control both training stages run under (``infra.run_control``), in one process: the
signal flag, the time budget, the non-finite guard, progress, and what stopped the run."""

from __future__ import annotations

import logging
import os
import signal
import time

import pytest

from infra.run_control import REQUEUE_EXIT_CODE, NonFiniteLoss, Preempted, RunControl, SignalFlag


def test_a_signal_is_recorded_until_the_handlers_are_put_back():
    before = signal.getsignal(signal.SIGUSR1)
    control = RunControl("sft", "step")
    assert control.received is None and control.signalled() is False and control.stopped_by is None
    os.kill(os.getpid(), signal.SIGUSR1)
    assert control.received == signal.SIGUSR1
    assert control.signalled() is True and control.stopped_by == "signal"
    control.finish()
    assert signal.getsignal(signal.SIGUSR1) is before
    flag = SignalFlag()
    os.kill(os.getpid(), signal.SIGTERM)  # the other signal the sbatch scripts send
    assert flag.received == signal.SIGTERM
    flag.restore()


def test_preempted_names_the_checkpoint_and_the_requeue_status(tmp_path):
    exc = Preempted(tmp_path / "checkpoint-3")
    assert exc.exit_code == REQUEUE_EXIT_CODE == 75
    assert str(exc) == f"preempted: saved {tmp_path / 'checkpoint-3'}; exit 75 to be requeued"
    assert Preempted(None, 99).exit_code == 99


def test_the_time_budget_stops_only_while_steps_remain():
    control = RunControl("grpo", "update", time_budget_s=0.05)
    control.begin(total=10, done=2)
    assert control.stopped_by == "max_steps" and control.over_budget(2, 10) is False
    time.sleep(0.06)
    assert control.over_budget(10, 10) is False  # the last step is done: not cut short
    assert control.stopped_by == "max_steps"
    assert control.over_budget(3, 10) is True and control.stopped_by == "time_budget"
    control.finish()
    unlimited = RunControl("grpo", "update")
    unlimited.begin(10)
    assert unlimited.over_budget(0, 10) is False
    unlimited.finish()


def test_the_nonfinite_guard_counts_in_a_row_and_stops_with_the_stages_message():
    control = RunControl("grpo", "update", max_nonfinite=3, nonfinite_message="{n} bad, last at {step}")
    skipped = []
    assert control.check_loss(False, 1, on_skip=skipped.append) is False
    assert control.check_loss(False, 2, on_skip=skipped.append) is False
    assert control.nonfinite_in_a_row == 2
    assert control.check_loss(True, 3) is True and control.nonfinite_in_a_row == 0  # a finite one resets
    control.check_loss(False, 4, on_skip=skipped.append)
    control.check_loss(False, 5, on_skip=skipped.append)
    with pytest.raises(NonFiniteLoss, match="^3 bad, last at 6$"):
        control.check_loss(False, 6, on_skip=skipped.append)
    assert skipped == [1, 2, 1, 2, 3]
    control.finish()


def test_progress_is_a_log_line_on_rank_zero_only(monkeypatch, caplog):
    monkeypatch.delenv("RANK", raising=False)
    control = RunControl("sft", "step")
    control.begin(total=4, done=1)
    with caplog.at_level(logging.INFO, logger="progress"):
        for _ in range(3):
            control.advance(1, loss=0.5)
    lines = [r.getMessage() for r in caplog.records if r.name == "progress"]
    assert lines[-1].startswith("sft: 4/4 step (100%)") and lines[-1].endswith("loss=0.5")
    control.finish()
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    other = RunControl("sft", "step")
    other.begin(total=4)
    assert other.bar is None
    other.advance(4)  # nothing to draw on another rank
    other.finish()
