"""The settings both training stages share (``sft`` in ``conf/sft.yaml``, ``grpo`` in
``conf/grpo.yaml``): seed, optimizer, precision and run control, defined once.

:class:`StageConfig` is the base of ``train.sft.config.SFTStageConfig`` and
``train.grpo.config.GRPOStageConfig``, so the YAML keys and attribute names are the same in both stages;
:func:`run_control` makes either stage's ``infra.run_control.RunControl`` from them.
The keys whose default differs by stage (``output_dir``, ``learning_rate``, ``eval_split``,
``window_steps``, ``max_steps``, ``save_total_limit``) are declared by each stage.
"""

from __future__ import annotations

from dataclasses import dataclass

from infra.run_control import REQUEUE_EXIT_CODE, RunControl
from infra.schema import bounded


@dataclass
class StageConfig:
    """Seed, optimizer, precision and run-control knobs of a training stage."""

    seed: int = 0
    train_split: str = "train"
    """Split of the mixture to train on (``<data.dir>/<train_split>``)."""
    weight_decay: float = bounded(0.0, ge=0)
    max_grad_norm: float = bounded(1.0, gt=0)
    bf16: str = "auto"
    """``auto``: bf16 when a CUDA device is present (fp32 on CPU); ``true`` / ``false`` force it. SFT
    runs under bf16 autocast. GRPO under DeepSpeed fills the config's ``bf16.enabled`` (bf16 weights,
    fp32 master copy in the optimizer); without it the weights stay fp32 and rollouts and loss
    forwards run under bf16 autocast."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward (GRPO: of the loss forward, as ``sft.gradient_checkpointing``)."""
    time_budget_s: float | None = bounded(None, gt=0)
    """Stop (and save) after this many seconds of training (SFT steps, GRPO updates), whatever the
    step count."""
    resume: str = "auto"
    """``auto``: newest complete checkpoint in ``output_dir`` if any; ``none``; or a checkpoint dir."""
    max_nonfinite_steps: int = bounded(5, ge=1)
    """Stop with an error after this many NaN/inf losses in a row (each one is skipped)."""
    requeue_exit_code: int = REQUEUE_EXIT_CODE
    """Exit status after a SIGUSR1 / SIGTERM checkpoint (75, EX_TEMPFAIL); the sbatch scripts
    (``slurm/sft.sh``, ``slurm/grpo.sh``) requeue on it."""
    num_threads: int | None = bounded(None, ge=1)
    """CPU threads for torch (None: torch's default); the toy runs use 1-2."""


def run_control(settings: StageConfig, desc: str, unit: str, nonfinite_message: str) -> RunControl:
    """The run control of a stage (``infra.run_control``) from its settings: the time budget, the
    non-finite limit and the requeue status; its signal handlers are installed now."""
    return RunControl(
        desc,
        unit,
        time_budget_s=settings.time_budget_s,
        max_nonfinite=settings.max_nonfinite_steps,
        nonfinite_message=nonfinite_message,
        requeue_exit_code=settings.requeue_exit_code,
    )
