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
  and ``max_nonfinite_steps`` of them in a row stop training with :class:`NonFiniteLoss`.
- :class:`PreemptionCallback`: SIGUSR1 / SIGTERM set a flag; at the end of the current step the
  Trainer saves a checkpoint and stops, and the entry point exits with the requeue status.
- :class:`CheckpointCallback`: writes ``render.json`` and ``COMPLETE`` into a checkpoint once the
  Trainer finished saving it (so ``resume=auto`` never picks a half-written one), then rotates the
  older ones, never the last complete one.
- :class:`TimeBudgetCallback`: stops (and saves) after a wall-clock budget.
- :func:`training_arguments`: ``TrainingArguments`` from the ``train`` block; under ``accelerate launch``
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

from eval.engine.checkpoints import COMPLETE_MARKER, checkpoint_name, write_render
from eval.tracking import remember_run
from infra.progress import Progress
from train.run_dir import NonFiniteLoss, SignalFlag, rotate_checkpoints
from train.safe_load import guarding_prepare
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
        gamma: float = 2.0,
        balance: str = "static",
        balance_power: float = 1.0,
        static_weights: torch.Tensor | None = None,
        decision_weight: float = 1.0,
        text_weight: float = 1.0,
        max_nonfinite_steps: int = 5,
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
        self.max_nonfinite_steps = max_nonfinite_steps
        self.nonfinite_in_a_row = 0
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
        if torch.isfinite(loss.detach()).item():
            self.nonfinite_in_a_row = 0
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
        self.nonfinite_in_a_row += 1
        self._parts[6] += 1
        log.warning(
            "non-finite loss (%s) at step %d: skipped (%d in a row)",
            float(loss.detach()),
            self.state.global_step,
            self.nonfinite_in_a_row,
        )
        if self.nonfinite_in_a_row >= self.max_nonfinite_steps:
            raise NonFiniteLoss(
                f"{self.nonfinite_in_a_row} non-finite losses in a row (up to step {self.state.global_step}): "
                "training stopped. Lower train.learning_rate, check the data, or resume from the last "
                "checkpoint."
            )
        return torch.zeros((), device=loss.device, requires_grad=True)

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


class PreemptionCallback(TrainerCallback):
    """SIGUSR1 / SIGTERM -> save a checkpoint at the end of the current step and stop. The handlers
    are installed when the callback is made (before the model loads), so a signal during start-up
    is recorded too (``train.sft`` then exits with the requeue status before training)."""

    def __init__(self) -> None:
        self.flag = SignalFlag()

    @property
    def received(self) -> int | None:
        return self.flag.received

    def on_step_end(self, args, state, control, **kwargs):
        if self._any_rank_received():
            control.should_save = True
            control.should_training_stop = True

    def _any_rank_received(self) -> bool:
        """Whether any rank got the signal: every rank must stop at the same step, or the
        collective checkpoint save would wait forever for the ranks that went on."""
        import torch
        import torch.distributed as dist

        flag = self.received is not None
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            backend = dist.get_backend()
            device = (
                torch.device("cuda", torch.cuda.current_device())
                if backend == "nccl"
                else torch.device("cpu")
            )
            t = torch.tensor([int(flag)], device=device)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            flag = bool(t.item())
        return flag

    def on_train_end(self, args, state, control, **kwargs):
        self.flag.restore()


class CheckpointCallback(TrainerCallback):
    """Completes a checkpoint once the Trainer has written all of it: saves the render block it was
    trained with (``render.json``, read back by evaluation), writes ``COMPLETE``, then rotates the
    older ones (``train.save_total_limit``; the Trainer's own rotation, which deletes before the new
    checkpoint is complete, is off). A checkpoint saved during a run of non-finite losses is left
    incomplete, so ``resume=auto`` never restarts from it."""

    def __init__(self, render=None, save_total_limit: int | None = None):
        self.render = render
        self.save_total_limit = save_total_limit
        self.trainer: DecisionTrainer | None = None

    def on_save(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        ckpt = Path(args.output_dir) / checkpoint_name(state.global_step)
        if not ckpt.is_dir():
            return
        if self.trainer is not None and self.trainer.nonfinite_in_a_row:
            log.warning("%s saved during a run of non-finite losses: not marked complete", ckpt)
            return
        if self.render is not None:
            write_render(ckpt, self.render)
        (ckpt / COMPLETE_MARKER).write_text(f"{state.global_step}\n")
        rotate_checkpoints(args.output_dir, self.save_total_limit)


class StepProgressCallback(TrainerCallback):
    """Training steps as a bar with rate and ETA (a log line every 30 s without a terminal), with the
    last logged loss and fire rate (``infra.progress.Progress``)."""

    def __init__(self) -> None:
        self.bar: Progress | None = None
        self.figures: dict[str, float] = {}

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self.bar = Progress(state.max_steps, "sft", unit="step", initial=state.global_step)

    def on_log(self, args, state, control, logs=None, **kwargs):
        for key in ("loss", "fire_rate"):
            if logs and key in logs:
                self.figures[key] = logs[key]

    def on_step_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.update(1, **self.figures)

    def on_train_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.close()


class WandbRunCallback(TrainerCallback):
    """Once the Trainer's W&B run exists (rank 0): add the whole resolved Hydra config to its config
    (loss, data, render, reward...: what defines the run, beyond the Trainer's arguments) and record
    its identity in ``<output_dir>/wandb.json``, where the checkpoint evaluations find it and log to
    the paired eval run (``eval.tracking``)."""

    def __init__(self, config: dict):
        self.config = config

    def on_train_begin(self, args, state, control, **kwargs):
        import wandb

        if not state.is_world_process_zero or wandb.run is None:
            return
        wandb.run.config.update(self.config, allow_val_change=True)
        remember_run(args.output_dir, wandb.run)


class TimeBudgetCallback(TrainerCallback):
    """Stops training (with a final save) once ``budget_s`` seconds of training have passed."""

    def __init__(self, budget_s: float):
        self.budget_s = budget_s
        self.start = 0.0
        self.fired = False

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        if time.perf_counter() - self.start >= self.budget_s and state.global_step < state.max_steps:
            self.fired = True
            control.should_training_stop = True
            control.should_save = True


def training_arguments(cfg: DictConfig, report_to: list[str]) -> TrainingArguments:
    t = cfg.train
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
            accumulation_steps(
                t.global_batch_size, t.per_device_batch_size, int(os.environ.get("WORLD_SIZE", "1"))
            )
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
    if torch.cuda.is_available() or int(os.environ.get("WORLD_SIZE", "1")) == 1 or not use_deepspeed:
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
        os.environ["WANDB_DIR"] = _wandb_dir_set_here = str(cfg.train.output_dir)
    import wandb

    wandb.teardown()  # settings are cached per process: a second run in it must read this run's env
    if cfg.logger.entity:
        os.environ.setdefault("WANDB_ENTITY", cfg.logger.entity)
    if cfg.logger.tags:
        os.environ.setdefault("WANDB_TAGS", ",".join(cfg.logger.tags))
    return ["wandb"]
