"""What stops a training run, and how far it got: one object both training stages run under.

    control = RunControl("grpo", "update", time_budget_s=600, max_nonfinite=5, nonfinite_message=...)
    # ... the model loads; a signal now is recorded (control.received) ...
    control.begin(total=40, done=0)                # the clock and the progress bar start
    while step < 40:
        if control.over_budget(step, 40): break    # stopped_by = "time_budget"
        loss = update()
        control.check_loss(finite, step)           # N non-finite in a row -> NonFiniteLoss
        control.advance(reward=0.41)               # the bar (rank 0)
        if control.signalled(): save(); raise Preempted(...)   # stopped_by = "signal"
    control.finish()

- Pre-emption: :class:`SignalFlag` records SIGUSR1 / SIGTERM from the moment the control is made
  (model loading included) instead of dying on them; :meth:`RunControl.signalled` asks every rank
  (``infra.ranks.any_rank``), so every rank stops at the same step (a collective save would wait
  for ever on a rank that went on). The stage saves and raises :class:`Preempted`; the entry point
  exits with :data:`REQUEUE_EXIT_CODE` for the sbatch script to requeue.
- Time budget: :meth:`RunControl.over_budget` is true once ``time_budget_s`` seconds passed since
  :meth:`RunControl.begin` on any rank, while steps remain.
- The non-finite guard: :meth:`RunControl.check_loss` counts non-finite losses in a row (a finite
  one resets it) and raises :class:`NonFiniteLoss` with the stage's message at ``max_nonfinite``.
- Progress: a bar on rank 0 (``infra.progress.Progress``) of the steps done of those planned.
- ``stopped_by``: what ended the last run, ``max_steps``, ``time_budget`` or ``signal`` (the run
  dir's ``progress.json``).

SFT calls it from thin ``TrainerCallback`` adapters (``train.sft.trainer``), the GRPO loop
(``train.grpo.loop``) directly.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from infra.progress import Progress
from infra.ranks import any_rank, is_rank_zero

log = logging.getLogger(__name__)

#: Exit status of a run that saved a checkpoint on SIGUSR1 / SIGTERM and should be requeued. 75 is
#: the "temporary failure, try again" status of sysexits.h; 124 is left to ``timeout``'s own exit.
REQUEUE_EXIT_CODE = 75


class Preempted(RuntimeError):
    """A signal arrived: a checkpoint was saved (``checkpoint``, None if there was none to save) and
    the entry point exits with ``exit_code`` for the sbatch script to requeue."""

    def __init__(self, checkpoint: Path | None, exit_code: int = REQUEUE_EXIT_CODE):
        super().__init__(f"preempted: saved {checkpoint}; exit {exit_code} to be requeued")
        self.checkpoint = checkpoint
        self.exit_code = exit_code


class NonFiniteLoss(RuntimeError):
    """Too many NaN/inf losses in a row: the run is diverging or the data is broken."""


class SignalFlag:
    """Records SIGUSR1 / SIGTERM instead of dying on them, from construction until :meth:`restore`."""

    SIGNALS = (signal.SIGUSR1, signal.SIGTERM)

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous = {sig: signal.signal(sig, self._handle) for sig in self.SIGNALS}

    def _handle(self, signum, frame) -> None:
        self.received = signum
        log.warning("signal %s: saving a checkpoint at the end of this step, then exiting", signum)

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


class RunControl:
    """Pre-emption, time budget, the non-finite guard and progress of one run (module docstring).
    ``nonfinite_message`` is formatted with ``n`` (losses in a row) and ``step``."""

    def __init__(
        self,
        desc: str,
        unit: str,
        *,
        time_budget_s: float | None = None,
        max_nonfinite: int = 5,
        nonfinite_message: str = "{n} non-finite losses in a row (up to step {step})",
        requeue_exit_code: int = REQUEUE_EXIT_CODE,
    ):
        self.signals = SignalFlag()  # first: a signal while the model loads is recorded too
        self.desc, self.unit = desc, unit
        self.time_budget_s = time_budget_s
        self.max_nonfinite = max_nonfinite
        self.nonfinite_message = nonfinite_message
        self.requeue_exit_code = requeue_exit_code
        self.nonfinite_in_a_row = 0
        self.stopped_by: str | None = None
        self.bar: Progress | None = None
        self._start = time.perf_counter()

    @property
    def received(self) -> int | None:
        """The signal this process received, if any."""
        return self.signals.received

    def begin(self, total: int, done: int = 0) -> None:
        """Training starts at step ``done`` of ``total``: the budget's clock, and the bar on rank 0."""
        self._start = time.perf_counter()
        self.stopped_by = "max_steps"
        self.close_bar()
        self.bar = Progress(total, self.desc, unit=self.unit, initial=done) if is_rank_zero() else None

    def over_budget(self, done: int, total: int) -> bool:
        """Whether the time budget is spent on any rank while steps remain (every rank agrees)."""
        if not self.time_budget_s:
            return False
        over = done < total and time.perf_counter() - self._start >= self.time_budget_s
        if any_rank(over):
            self.stopped_by = "time_budget"
            return True
        return False

    def signalled(self) -> bool:
        """Whether any rank received SIGUSR1 / SIGTERM (every rank agrees: call it on every rank)."""
        if any_rank(self.received is not None):
            self.stopped_by = "signal"
            return True
        return False

    def check_loss(self, finite: bool, step: int, on_skip: Callable[[int], None] | None = None) -> bool:
        """Count a step's loss: a finite one resets the count; a non-finite one calls ``on_skip(n)``
        (``n`` in a row now) and raises :class:`NonFiniteLoss` at ``max_nonfinite``. Returns
        ``finite``."""
        if finite:
            self.nonfinite_in_a_row = 0
            return True
        self.nonfinite_in_a_row += 1
        if on_skip is not None:
            on_skip(self.nonfinite_in_a_row)
        if self.nonfinite_in_a_row >= self.max_nonfinite:
            raise NonFiniteLoss(self.nonfinite_message.format(n=self.nonfinite_in_a_row, step=step))
        return False

    def advance(self, n: int = 1, **figures: Any) -> None:
        """``n`` steps done (the bar, on rank 0, with the figures so far)."""
        if self.bar is not None:
            self.bar.update(n, **figures)

    def close_bar(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def finish(self) -> None:
        """The bar closed and the signal handlers put back."""
        self.close_bar()
        self.signals.restore()
