"""SFT stage: Qwen3-VL on silence/response streams with a focal, frequency-balanced decision loss.

    python -m train.sft model=tiny data=toy experiment=toy_sft                  # the demo's settings, CPU
    python -m train.sft experiment=p3i_4b_sft data.dir=/data/mix_p3i   # the recipe (lr 1e-5, 1 epoch)
    accelerate launch --config_file conf/accelerate/zero2.yaml -m train.sft experiment=p3i_4b_sft data.dir=/data/mix_p3i ...
    sbatch --gpus-per-node=8 slurm/sft.sh experiment=p3i_4b_sft data.dir=/data/mix_p3i

Assembles the parts and hands them to the Trainer: the model (``engine.model``; vision tower frozen,
merger and language model trained, or LoRA adapters), the training split of a built mixture as
rendered windows (``train.sft.data``), the decision loss (``train.sft.losses``) inside a narrow Trainer
subclass (``train.sft.trainer``). Checkpoints are HF directories (model + processor, safetensors);
``sft.resume=auto`` continues from the newest complete one. On SIGUSR1 / SIGTERM the run saves and
exits with ``sft.requeue_exit_code`` (75) for the sbatch script to requeue. The final weights go to
``<sft.output_dir>/final``, which ``train(cfg)`` returns.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import hydra
import torch
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from data_builders.config import RenderConfig
from data_builders.frame_cache import FrameCache
from data_builders.records import RecordError
from engine.checkpoints import COMPLETE_MARKER, checkpoint_name, checkpoint_step, write_render
from engine.model import count_parameters, load_model_and_processor
from engine.preflight import check_stage
from engine.render import TurnRenderer
from infra.entry import quiet_libraries, run_command
from infra.files import OutputLock, OutputLocked, refuse_if_held
from infra.progress import console
from infra.ranks import is_rank_zero
from infra.run_control import NonFiniteLoss, Preempted, RunControl
from infra.schema import CONF_DIR, compose, validate
from train.preflight import SFT
from train.run_dir import (
    CheckpointWriteError,
    is_write_failure,
    leave_launch,
    resolve_resume,
    retire_nonfinite,
    set_aside_previous_run,
    write_progress,
    write_run_info,
)
from train.sft.config import SFTConfig
from train.sft.data import StreamWindowDataset, WindowCollator
from train.sft.losses import class_weights, counts_from_stats
from train.sft.trainer import (
    NONFINITE_MESSAGE,
    CheckpointCallback,
    DecisionTrainer,
    RunControlCallback,
    WandbRunCallback,
    logger_report_to,
    training_arguments,
)
from train.stage_config import run_control

log = logging.getLogger("train.sft")


def apply_lora(model, lora_cfg, decision_ids: list[int]):
    """Wrap the language model's projections in LoRA adapters; the decision-token embedding rows
    (new tokens) and, by default, the vision merger stay trainable."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=lora_cfg.r,
        lora_alpha=lora_cfg.alpha,
        lora_dropout=lora_cfg.dropout,
        target_modules=lora_cfg.target_modules,
        trainable_token_indices={"embed_tokens": list(decision_ids)},
        modules_to_save=["merger"] if lora_cfg.train_merger else None,
    )
    return get_peft_model(model, config)


def build_trainer(cfg: DictConfig) -> tuple[DecisionTrainer, RunControl]:
    """The Trainer of a validated config (model, data, loss, callbacks), ready to ``train()``, and
    the run control it trains under."""
    t = cfg.sft
    run = run_control(
        t, "sft", "step", NONFINITE_MESSAGE
    )  # first: a signal while the model loads is caught too
    quiet_libraries()
    if t.num_threads:
        torch.set_num_threads(t.num_threads)
    out = Path(t.output_dir)
    if is_rank_zero():
        write_run_info(out, cfg)
    torch.manual_seed(t.seed)
    model, processor = load_model_and_processor(cfg.model, cache_dir=cfg.paths.cache_dir)
    render = RenderConfig(**OmegaConf.to_container(cfg.render, resolve=True))
    renderer = TurnRenderer(processor, render, cfg.data.steps_per_second)
    decision_ids = (renderer.silence_id, renderer.response_id)
    if cfg.lora.enabled:
        model = apply_lora(model, cfg.lora, list(decision_ids))
    model.config.use_cache = False
    cache = FrameCache(cfg.paths.frame_cache_dir)
    split_dir = Path(cfg.data.dir) / t.train_split
    train_set = StreamWindowDataset.from_split(
        split_dir, renderer, cache, keep_rendered=t.keep_rendered, window_steps=t.window_steps
    )
    eval_set = None
    if t.eval_split:
        eval_set = StreamWindowDataset.from_split(
            Path(cfg.data.dir) / t.eval_split, renderer, cache, window_steps=t.window_steps
        )
    static = None
    if cfg.loss.balance == "static":
        static = class_weights(counts_from_stats(split_dir / "stats.json"), cfg.loss.balance_power)
    params = count_parameters(model)
    log.info("model %s: %s parameters, %s trainable", cfg.model.name, params["total"], params["trainable"])
    log.info("train windows: %d from %s; class weights %s", len(train_set), split_dir, static)
    callbacks = [RunControlCallback(run), CheckpointCallback(render, t.save_total_limit, run)]
    if cfg.logger.name == "wandb":
        callbacks.append(WandbRunCallback(OmegaConf.to_container(cfg, resolve=True)))
    trainer = DecisionTrainer(
        model=model,
        args=training_arguments(cfg, logger_report_to(cfg)),
        data_collator=WindowCollator(processor.tokenizer.pad_token_id),
        train_dataset=train_set,
        eval_dataset=eval_set,
        processing_class=processor,
        callbacks=callbacks,
        decision_ids=decision_ids,
        gamma=cfg.loss.gamma,
        balance=cfg.loss.balance,
        balance_power=cfg.loss.balance_power,
        static_weights=static,
        decision_weight=cfg.loss.decision_weight,
        text_weight=cfg.loss.text_weight,
        run_control=run,
    )
    return trainer, run


def train(cfg: DictConfig) -> Path:
    """Run the SFT stage of a validated config; returns the final checkpoint dir (model + processor).
    The pre-flight (``engine.preflight.check_stage``) runs first: a split or data dir that is missing,
    or a plan that would not fit the GPU, stops it before the model loads."""
    check_stage(SFT, cfg)
    return train_checked(cfg)


def train_checked(cfg: DictConfig) -> Path:
    """:func:`train` on a config the pre-flight has passed (the command line checks it once, first)."""
    t = cfg.sft
    out = Path(t.output_dir)
    resume = resolve_resume(t.resume, out)
    lock = OutputLock(out, "train.sft").acquire() if is_rank_zero() else None
    if lock is not None and resume is None:
        set_aside_previous_run(out, keep=cfg.model.get("path"))
    try:
        if resume and _finished(out, resume, t.max_steps):
            log.info(
                "%s: %s already reached the run's %d steps (%s) and final/ is saved: nothing to train "
                "(raise sft.max_steps to train on, or sft.resume=none to start over)",
                out,
                Path(resume).name,
                _planned_steps(resume, t.max_steps),
                f"sft.max_steps={t.max_steps}" if t.max_steps > 0 else f"sft.num_epochs={t.num_epochs:g}",
            )
            return out / "final"
        if resume and _extends(out, resume, t.max_steps):
            log.info(
                "%s: resuming the finished run at step %d to train on to sft.max_steps=%d",
                out,
                checkpoint_step(resume),
                t.max_steps,
            )
        return _train(cfg, out, resume)
    finally:
        if lock is not None:
            lock.release()


def _finished(out: Path, resume: str, max_steps: int) -> bool:
    """Whether the run in ``out`` is done: the checkpoint to resume from is at ``max_steps`` and
    ``final/`` was saved after it, whole (its ``COMPLETE``, written once every rank's part is saved;
    a ``config.json`` is there before the weights are). The Trainer, resumed there, would train one
    step more."""
    step, planned = checkpoint_step(resume), _planned_steps(resume, max_steps)
    return None not in (step, planned) and step >= planned and (out / "final" / COMPLETE_MARKER).is_file()


def _extends(out: Path, resume: str, max_steps: int) -> bool:
    """Whether resuming trains on past a finished run: ``final/`` was saved at the step count the
    checkpoint's run planned, and ``sft.max_steps`` is now larger."""
    step, earlier = checkpoint_step(resume), _planned_steps(resume, -1)
    finished = None not in (step, earlier) and step >= earlier and (out / "final" / "config.json").is_file()
    return finished and max_steps > step


def _planned_steps(resume: str, max_steps: int) -> int | None:
    """The run's step count: ``sft.max_steps``, or under ``-1`` (epochs) the count the Trainer
    planned, in the checkpoint's ``trainer_state.json``."""
    if max_steps > 0:
        return max_steps
    state = Path(resume) / "trainer_state.json"
    return json.loads(state.read_text()).get("max_steps") if state.is_file() else None


def _train(cfg: DictConfig, out: Path, resume: str | None) -> Path:
    t = cfg.sft
    trainer, run = build_trainer(cfg)
    processor = trainer.processing_class
    if run.received is not None:  # during start-up: nothing trained, nothing to save
        run.finish()
        raise Preempted(None, t.requeue_exit_code)
    if resume:
        log.info("resuming from %s", resume)
    try:
        trainer.train(resume_from_checkpoint=resume)
    except NonFiniteLoss:
        if trainer.is_world_process_zero():
            retire_nonfinite(out)
        raise
    except (OSError, RuntimeError) as exc:
        if not is_write_failure(exc):
            raise
        raise CheckpointWriteError(out / checkpoint_name(trainer.state.global_step), exc) from exc
    if run.stopped_by == "signal" or run.received is not None:
        ckpt = out / checkpoint_name(trainer.state.global_step)
        raise Preempted(ckpt if ckpt.is_dir() else None, t.requeue_exit_code)
    if trainer.is_world_process_zero():
        write_progress(out, trainer.state.global_step, trainer.state.max_steps, run.stopped_by)
    final = out / "final"
    if cfg.lora.enabled and cfg.lora.merge_on_save:
        if trainer.is_world_process_zero():
            trainer.accelerator.unwrap_model(trainer.model).merge_and_unload().save_pretrained(final)
            processor.save_pretrained(final)
    else:
        trainer.save_model(str(final))
    if trainer.is_world_process_zero():
        write_render(final, cfg.render)
    trainer.accelerator.wait_for_everyone()
    if trainer.is_world_process_zero():  # written last, once every rank's part is saved (docs/design.md)
        (final / COMPLETE_MARKER).write_text(f"{trainer.state.global_step}\n")
    if "wandb" in trainer.args.report_to and trainer.is_world_process_zero():
        import wandb

        # ends the run before the demo's evaluation starts; W&B's service writes and closes the
        # offline run's file after this returns (tests wait for its exit record: offline_run)
        wandb.finish()
    return final


def compose_config(overrides: list[str] | None = None) -> DictConfig:
    """``conf/sft.yaml`` composed with command-line style ``overrides`` and validated (for the demo
    and tests: ``train(compose_config(["experiment=toy_sft", "sft.seed=1"]))``)."""
    return compose("sft", overrides or [], SFTConfig)


@hydra.main(config_path=str(CONF_DIR), config_name="sft", version_base="1.3")
def _main(cfg: DictConfig) -> None:
    """A point of a sweep (``-m``): Hydra composed it, it is validated and checked here."""
    try:
        cfg = validate(cfg, SFTConfig)
        _check_start(cfg)
    except (ValueError, FileNotFoundError, OutputLocked, OmegaConfBaseException) as exc:
        print(f"train.sft: {exc}", file=sys.stderr)
        sys.exit(2)
    _command(cfg)


def _command(cfg: DictConfig, _checked: object = None) -> None:
    """The command's work on its validated, checked config: train, print the final checkpoint."""
    console(str(Path(cfg.sft.output_dir) / "sft.log") if is_rank_zero() else None)
    try:
        final = train_checked(cfg)
    except OutputLocked as exc:  # another run holds the folder: its path and holder, one line
        print(f"train.sft: {exc}", file=sys.stderr)
        sys.exit(2)
    except Preempted as exc:
        log.warning("%s", exc)
        leave_launch(exc.exit_code)
    except RecordError as exc:  # a record of the split that cannot be trained on: one line naming it
        print(f"train.sft: {exc}", file=sys.stderr)
        sys.exit(2)
    print(json.dumps({"final_checkpoint": str(final)}))
    leave_launch()


def _check_start(cfg: DictConfig) -> None:
    """The stage's pre-flight, then the output folder: one another run holds is refused before Hydra
    writes its ``.hydra/`` into it (rank zero asks: it is the one that takes the lock)."""
    check_stage(SFT, cfg)
    if is_rank_zero():
        refuse_if_held(cfg.sft.output_dir)


def main() -> None:
    """The command line: composed, validated and pre-flighted once (``engine.preflight``: the splits,
    the data dir, the memory plan on a GPU) before Hydra runs it, so a mistake is one line, exit 2."""
    run_command("train.sft", "sft", SFTConfig, _command, _main, check=_check_start)


if __name__ == "__main__":
    main()
