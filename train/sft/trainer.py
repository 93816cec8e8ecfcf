"""A narrow ``transformers.Trainer`` subclass for the SFT stage, and the callbacks that run with it.

- :class:`DecisionTrainer` overrides ``compute_loss`` to compute the decision loss
  (:func:`train.sft.losses.loss_at_labels`: focal, frequency-balanced decision tokens + text
  cross-entropy) from the logits of the labelled positions alone (:func:`train.sft.losses.selected_logits`:
  the model's forward, so DDP and DeepSpeed see it, with a ``logits_to_keep`` mask), and ``log`` to add the parts it
  accumulated since the last log: ``loss_decision``, ``loss_text``, ``ce_decision``,
  ``decision_accuracy``, ``recall_silence``, ``recall_response``, ``fire_rate``, ``tokens_per_s``,
  ``nonfinite_skipped``; and, under DeepSpeed, makes the engine load checkpoints with
  ``weights_only=True`` (``create_accelerator_and_postprocess``; the Trainer's own loads of
  ``optimizer.pt``, ``scheduler.pt``, ``rng_state.pth`` already are). Everything else (optimizer,
  scheduler, checkpoints with optimizer / scheduler / RNG state, resume with data skipping, DDP and
  DeepSpeed through accelerate) is the Trainer's own.
- NaN guard: a non-finite loss is replaced by a zero that touches no parameter, so the step leaves
  every gradient empty and AdamW leaves the weights (and its moments) as they were; it is logged,
  and ``max_nonfinite_steps`` of them in a row stop training with ``NonFiniteLoss`` (the run
  control's guard, ``infra.run_control.RunControl.check_loss``).
- :class:`RunControlCallback`: the Trainer's adapter of ``infra.run_control.RunControl``: the
  progress bar, then at the end of each step SIGUSR1 / SIGTERM on any rank (save a checkpoint and
  stop; the entry point exits with the requeue status) or the time budget (save and stop).
- :class:`CheckpointCallback`: writes ``render.json`` and ``COMPLETE`` into a checkpoint once the
  Trainer finished saving it (so ``resume=auto`` never picks a half-written one), then rotates the
  older ones, never the last complete one.
- :func:`training_arguments`: ``TrainingArguments`` from the ``sft`` block; under ``accelerate launch``
  with a DeepSpeed config it hands the JSON to the Trainer (and, on CPU, forms the gloo ranks).
"""

from __future__ import annotations

import logging
import math
import os
import time
from pathlib import Path

import torch
from omegaconf import DictConfig
from transformers import Trainer, TrainerCallback, TrainingArguments

from engine.checkpoints import COMPLETE_MARKER, checkpoint_name, write_render
from infra.ranks import Ranks
from infra.run_control import RunControl
from infra.tracking import remember_run
from train.run_dir import rotate_checkpoints
from train.safe_load import guarding_prepare
from train.sft.config import FOCAL_GAMMA
from train.sft.losses import WEIGHT_MODES, decision_metrics, loss_at_labels, selected_logits
from train.steps import accumulation_steps

log = logging.getLogger(__name__)


class DecisionTrainer(Trainer):
    """``Trainer`` with the decision loss (see the module docstring)."""

    #: The loss is normalized by the labelled tokens of the whole accumulated batch already.
    loss_is_scaled_for_ga = True

    def __init__(
        self,
        *args,
        decision_ids: tuple[int, int],
        gamma: float = FOCAL_GAMMA,
        balance: str = "static",
        balance_power: float = 1.0,
        static_weights: torch.Tensor | None = None,
        decision_weight: float = 1.0,
        text_weight: float = 1.0,
        run_control: RunControl,
        **kwargs,
    ):
        super().__init__(*args, **kwargs)
        # compute_loss consumes the labelled-token count of the whole accumulated, all-rank batch
        # (the model itself never sees it): ask the Trainer to count it whatever the model declares.
        self.model_accepts_loss_kwargs = True
        if balance not in WEIGHT_MODES:
            raise ValueError(f"loss.balance={balance!r}: choose one of {sorted(WEIGHT_MODES)}")
        self.decision_ids = decision_ids
        self.gamma = gamma
        self.balance = balance
        self.balance_power = balance_power
        self.static_weights = static_weights
        self.decision_weight = decision_weight
        self.text_weight = text_weight
        self.run_control = run_control  # its guard counts the non-finite losses in a row
        self._reset_parts()

    def create_accelerator_and_postprocess(self) -> None:
        """The Trainer's accelerator; under DeepSpeed its ``prepare`` makes the engine read checkpoints
        with ``weights_only=True`` (``train.safe_load``), so a resume runs no code from one."""
        super().create_accelerator_and_postprocess()
        if self.is_deepspeed_enabled:
            self.accelerator.prepare = guarding_prepare(self.accelerator.prepare)

    def _reset_parts(self) -> None:
        # sums since the last log: decision, text, decision CE, n decisions, n text, tokens, skipped, spare
        self._parts = torch.zeros(8, dtype=torch.float64)
        self._confusion = torch.zeros(2, 2, dtype=torch.float64)
        self._since = time.perf_counter()

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        inputs = dict(inputs)
        labels = inputs.pop("labels")
        decision_mask = inputs.pop("decision_mask")
        logits, targets, classes = selected_logits(model, inputs, labels, decision_mask)
        batch_classes = decision_mask[decision_mask >= 0].cpu()
        weights = WEIGHT_MODES[self.balance](self.static_weights, batch_classes, self.balance_power)
        parts = loss_at_labels(
            logits,
            targets,
            classes,
            decision_ids=self.decision_ids,
            gamma=self.gamma,
            weights=weights,
            decision_weight=self.decision_weight,
            text_weight=self.text_weight,
            n_items=num_items_in_batch,
        )
        loss = parts.loss
        if num_items_in_batch is not None and self.model.training:
            loss = loss * self.accelerator.num_processes  # DDP / DeepSpeed average gradients over ranks
        if model.training:
            loss = self._guard(loss, parts, int(inputs["attention_mask"].sum()))
        return (loss, {"logits": logits}) if return_outputs else loss

    def _guard(self, loss: torch.Tensor, parts, n_tokens: int) -> torch.Tensor:
        """Account the batch's parts; replace a non-finite loss by a parameter-free zero."""
        step = self.state.global_step
        if not self.run_control.check_loss(
            bool(torch.isfinite(loss.detach()).item()),
            step,
            on_skip=lambda n: log.warning(
                "non-finite loss (%s) at step %d: skipped (%d in a row)", float(loss.detach()), step, n
            ),
        ):
            self._parts[6] += 1
            return torch.zeros((), device=loss.device, requires_grad=True)
        self._parts += torch.tensor(
            [
                float(parts.decision_sum),
                float(parts.text_sum),
                float(parts.decision_ce_sum),
                parts.n_decisions,
                parts.n_text,
                n_tokens,
                0,
                0,
            ],
            dtype=torch.float64,
        )
        self._confusion += parts.confusion.cpu().double()
        return loss

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "loss" in logs and self.model.training:
            logs.update(self._logged_parts())
        super().log(logs, start_time)

    def _logged_parts(self) -> dict[str, float]:
        parts, confusion = self._parts.clone(), self._confusion.clone()
        if self.accelerator.num_processes > 1:
            device = self.accelerator.device
            parts = self.accelerator.reduce(parts.to(device), reduction="sum").cpu()
            confusion = self.accelerator.reduce(confusion.to(device), reduction="sum").cpu()
        elapsed = time.perf_counter() - self._since
        dec, text, ce_dec, n_dec, n_text, tokens, skipped, _ = parts.tolist()
        out = {
            "loss_decision": dec / n_dec if n_dec else math.nan,
            "loss_text": text / n_text if n_text else math.nan,
            "ce_decision": ce_dec / n_dec if n_dec else math.nan,
            "tokens_per_s": tokens / elapsed if elapsed > 0 else 0.0,
            "nonfinite_skipped": skipped,
        }
        out.update(decision_metrics(confusion))
        self._reset_parts()
        return out


#: What a stop on non-finite losses says (``n`` in a row, up to ``step``).
NONFINITE_MESSAGE = (
    "{n} non-finite losses in a row (up to step {step}): training stopped. Lower sft.learning_rate, "
    "check the data, or resume from the last checkpoint."
)


class RunControlCallback(TrainerCallback):
    """The Trainer's side of ``infra.run_control.RunControl``: the clock and the bar start with
    training; at the end of each step the bar moves (with the last logged loss and fire rate), then a
    signal on any rank, else a spent time budget, makes the Trainer save a checkpoint and stop. The
    control is made before the model loads, so a signal during start-up is recorded too
    (``train.sft`` then exits with the requeue status before training)."""

    def __init__(self, control: RunControl) -> None:
        self.run = control
        self.figures: dict[str, float] = {}

    def on_train_begin(self, args, state, control, **kwargs):
        self.run.begin(state.max_steps, state.global_step)

    def on_log(self, args, state, control, logs=None, **kwargs):
        for key in ("loss", "fire_rate"):
            if logs and key in logs:
                self.figures[key] = logs[key]

    def on_step_end(self, args, state, control, **kwargs):
        self.run.advance(1, **self.figures)
        if self.run.signalled() or self.run.over_budget(state.global_step, state.max_steps):
            control.should_save = True
            control.should_training_stop = True

    def on_train_end(self, args, state, control, **kwargs):
        self.run.finish()


class CheckpointCallback(TrainerCallback):
    """Completes a checkpoint once the Trainer has written all of it: saves the render block it was
    trained with (``render.json``, read back by evaluation), writes ``COMPLETE``, then rotates the
    older ones (``sft.save_total_limit``; the Trainer's own rotation, which deletes before the new
    checkpoint is complete, is off). A checkpoint saved during a run of non-finite losses is left
    incomplete, so ``resume=auto`` never restarts from it."""

    def __init__(self, render=None, save_total_limit: int | None = None, run: RunControl | None = None):
        self.render = render
        self.save_total_limit = save_total_limit
        self.run = run

    def on_save(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        ckpt = Path(args.output_dir) / checkpoint_name(state.global_step)
        if not ckpt.is_dir():
            return
        if self.run is not None and self.run.nonfinite_in_a_row:
            log.warning("%s saved during a run of non-finite losses: not marked complete", ckpt)
            return
        if self.render is not None:
            write_render(ckpt, self.render)
        (ckpt / COMPLETE_MARKER).write_text(f"{state.global_step}\n")
        rotate_checkpoints(args.output_dir, self.save_total_limit)


class WandbRunCallback(TrainerCallback):
    """Once the Trainer's W&B run exists (rank 0): add the whole resolved Hydra config to its config
    (loss, data, render, reward...: what defines the run, beyond the Trainer's arguments) and record
    its identity in ``<output_dir>/wandb.json``, where the checkpoint evaluations find it and log to
    the paired eval run (``infra.tracking``)."""

    def __init__(self, config: dict):
        self.config = config

    def on_train_begin(self, args, state, control, **kwargs):
        import wandb

        if not state.is_world_process_zero or wandb.run is None:
            return
        wandb.run.config.update(self.config, allow_val_change=True)
        remember_run(args.output_dir, wandb.run)


def training_arguments(cfg: DictConfig, report_to: list[str]) -> TrainingArguments:
    t = cfg.sft
    bf16 = torch.cuda.is_available() if t.bf16 == "auto" else str(t.bf16).lower() == "true"
    ds_file = os.environ.get("ACCELERATE_DEEPSPEED_CONFIG_FILE")
    return TrainingArguments(
        deepspeed=ds_file,
        accelerator_config=_cpu_ranks(use_deepspeed=ds_file is not None),
        output_dir=t.output_dir,
        seed=t.seed,
        data_seed=t.seed,
        num_train_epochs=t.num_epochs,
        max_steps=t.max_steps,
        per_device_train_batch_size=t.per_device_batch_size,
        per_device_eval_batch_size=t.per_device_batch_size,
        gradient_accumulation_steps=(
            accumulation_steps(t.global_batch_size, t.per_device_batch_size, Ranks.from_env().world)
            if t.global_batch_size
            else t.gradient_accumulation_steps
        ),
        learning_rate=t.learning_rate,
        weight_decay=t.weight_decay,
        lr_scheduler_type=t.lr_scheduler,
        warmup_steps=t.warmup_steps,
        max_grad_norm=t.max_grad_norm,
        bf16=bf16,
        activation_checkpointing=t.gradient_checkpointing,
        logging_steps=t.logging_steps,
        save_strategy="steps",
        save_steps=t.save_steps,
        save_total_limit=None,  # rotated by CheckpointCallback once the new checkpoint is complete
        eval_strategy="steps" if t.eval_split else "no",
        eval_steps=t.save_steps if t.eval_split else None,
        prediction_loss_only=True,  # the eval split reports its loss; no logits kept across batches
        dataloader_num_workers=t.dataloader_num_workers,
        dataloader_pin_memory=torch.cuda.is_available(),
        remove_unused_columns=False,
        average_tokens_across_devices=True,
        ddp_find_unused_parameters=False,
        report_to=report_to,
        run_name=cfg.run_name,
        disable_tqdm=True,
    )


def _cpu_ranks(use_deepspeed: bool) -> dict | None:
    """accelerate forms DeepSpeed ranks only on accelerators; under ``accelerate launch`` on CPU (the
    distributed test, laptops) the gloo group is made here and handed to the Trainer as is."""
    if torch.cuda.is_available() or Ranks.from_env().world == 1 or not use_deepspeed:
        return None
    from accelerate import PartialState

    os.environ["ACCELERATE_USE_DEEPSPEED"] = "true"
    PartialState(backend="gloo")
    return {"use_configured_state": True}


_wandb_dir_set_here: str | None = None


def logger_report_to(cfg: DictConfig) -> list[str]:
    """The Trainer's ``report_to`` for the ``logger`` group (W&B settings go through its env vars)."""
    if cfg.logger.name != "wandb":
        return []
    global _wandb_dir_set_here
    os.environ.setdefault("WANDB_PROJECT", cfg.logger.project)
    os.environ.setdefault("WANDB_RUN_GROUP", cfg.run_name)  # the paired eval run joins this group
    os.environ["WANDB_MODE"] = cfg.logger.mode
    if os.environ.get("WANDB_DIR") in (None, _wandb_dir_set_here):  # the user's own WANDB_DIR wins
        os.environ["WANDB_DIR"] = _wandb_dir_set_here = str(cfg.sft.output_dir)
    import wandb

    wandb.teardown()  # settings are cached per process: a second run in it must read this run's env
    if cfg.logger.entity:
        os.environ.setdefault("WANDB_ENTITY", cfg.logger.entity)
    if cfg.logger.tags:
        os.environ.setdefault("WANDB_TAGS", ",".join(cfg.logger.tags))
    return ["wandb"]
