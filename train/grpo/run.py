"""GRPO stage: streaming rollouts scored with the evaluator's own PRS, clipped-ratio updates.

    python -m train.grpo init=runs/sft/final data=toy
    python -m train.grpo -m init=runs/sft/final reward.reward_weights.prs=1,2 reward.redundancy.penalty=0.1,0.2 grpo.eval_every=20
    python -m train.grpo experiment=toy_overfire                                     # CPU learning check
    accelerate launch --config_file conf/accelerate/zero2.yaml -m train.grpo experiment=p3i_4b_grpo init=...

Config -> model (from the SFT checkpoint ``init``) -> rollout windows of the training split ->
reward functions (``conf/reward/``) -> the update loop (``train.grpo.loop``) -> final checkpoint.
Held-out evaluations (``grpo.eval_every``, ``keep_best``) stream and score the evaluation split
with ``benchmarks.runners.evaluate_model``, the code behind ``eval.run``. A config with
``entry.target`` (an experiment, e.g. ``experiment=toy_overfire``) hands itself to that function
instead. Under ``accelerate launch`` with a DeepSpeed config every process runs this with its
share of each update's windows (``train.grpo.parallel``); rank 0 writes the run dir's files.
trl's ``GRPOTrainer`` is not used (docs/grpo.md says what was tried): its loss forward cannot see
the frames of a streaming rollout; the config keeps trl's names where they mean the same thing.
"""

from __future__ import annotations

import copy
import importlib
import json
import logging
import sys
from functools import partial
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.utils import get_method
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from benchmarks.config import BenchmarkConfig
from benchmarks.runners import evaluate_model, get_runner
from data_builders.config import RenderConfig
from data_builders.frame_cache import FrameCache
from data_builders.frames import stream_frames
from data_builders.record_io import load_streams, resolve_video
from data_builders.records import RecordError
from data_builders.splits import split_records
from engine.checkpoints import (
    COMPLETE_MARKER,
    CheckpointError,
    check_checkpoint,
    check_render,
    model_dir,
    render_overrides,
    write_render,
)
from engine.preflight import check_stage
from infra.entry import quiet_libraries, rewrite_argv, run_command
from infra.files import OutputLock, OutputLocked
from infra.progress import console
from infra.ranks import barrier, is_rank_zero
from infra.run_control import NonFiniteLoss, Preempted, RunControl
from infra.schema import CONF_DIR, compose, validate
from infra.tracking import LoggerConfig, make_logger
from train.grpo.config import NONFINITE_MESSAGE, GRPOConfig, check_choices, reward_spec
from train.grpo.rewards import build_reward
from train.hydra_sweeps import sweep_identity
from train.preflight import GRPO
from train.run_dir import (
    leave_launch,
    resolve_resume,
    retire_nonfinite,
    set_aside_previous_run,
    write_progress,
    write_run_info,
)
from train.stage_config import run_control

log = logging.getLogger("train.grpo")


def _output_dir(cfg: DictConfig) -> Path:
    """The run dir: ``grpo.output_dir``, or the sweep point's own dir under ``-m``."""
    if HydraConfig.initialized() and HydraConfig.get().mode.name == "MULTIRUN":
        return Path(HydraConfig.get().runtime.output_dir)
    return Path(cfg.grpo.output_dir)


def run(cfg: DictConfig, out: Path | None = None) -> Path:
    """Train from a validated config; returns the final checkpoint dir (model + processor), or with
    ``grpo.keep_best`` the best one on the held-out split. The config's own checks
    (:func:`check_config`) and the stage's pre-flight run first."""
    return run_checked(cfg, out, check_run(cfg))


def run_checked(cfg: DictConfig, out: Path | None, reward_fn: object) -> Path:
    """:func:`run` on a config already checked (:func:`check_run` gave ``reward_fn``): the command
    line checks once, first."""
    control = run_control(
        cfg.grpo, "grpo", "update", NONFINITE_MESSAGE
    )  # first: a signal while the model loads is caught too
    main = is_rank_zero()
    lock = OutputLock(out or cfg.grpo.output_dir, "train.grpo").acquire() if main else None  # one run per dir
    try:
        return _run(cfg, out, control, reward_fn)
    finally:
        if lock is not None:
            lock.release()
        control.finish()


def check_config(cfg: DictConfig) -> object:
    """What can fail without loading anything, checked first: the start point (the init checkpoint's
    files, ``engine.checkpoints.check_checkpoint``) and the reward (its options are tried once);
    returns the reward function."""
    if cfg.init is None:
        raise ValueError(
            "GRPO needs init=<SFT checkpoint dir> (the model it improves), or init=random to start from "
            "the model config as it is"
        )
    if cfg.init != "random":
        check_checkpoint(cfg.init)  # every file it holds (a damaged one named), before anything loads
    check_choices(cfg.grpo)
    try:
        return build_reward(reward_spec(cfg.reward))
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"reward: {exc}") from None


# The phases below import torch and transformers inside: a bad config fails before they load.


def _run(cfg: DictConfig, out: Path | None, control: RunControl, reward_fn: object) -> Path:
    """Config -> model -> windows -> held-out evaluator -> the loop -> the final checkpoint."""
    from train.grpo.loop import GRPOLoop

    quiet_libraries()
    g = cfg.grpo
    out = Path(out or g.output_dir)
    parallel, resume = _start(cfg, out)
    model, processor = _load_model(cfg, resume, parallel)
    render_cfg = render_config(cfg)
    renderer = _renderer(processor, render_cfg, cfg.data.steps_per_second)
    cache = FrameCache(cfg.paths.frame_cache_dir)
    windows = load_windows(cfg, render_cfg, cache)
    ref_model = copy.deepcopy(model).eval().requires_grad_(False) if g.beta > 0 else None
    evaluate = held_out_evaluator(cfg, processor, render_cfg, cache)
    logger, history, on_log = _loggers(cfg, out, parallel)
    loop = GRPOLoop(
        g, model, processor, renderer, reward_fn, windows, out, ref_model, evaluate, on_log, parallel
    )
    if resume:
        loop.load_state(resume)
        log.info("resumed from %s at update %d", resume, loop.step)
    log.info(
        "%d windows (%d with a target), %d updates of %d windows x %d rollouts, %d process(es); frames "
        "at max_pixels=%d",
        len(windows),
        sum(bool(w.targets) for w in windows),
        g.max_steps,
        g.windows_per_step,
        g.num_generations,
        parallel.world,
        render_cfg.max_pixels,
    )
    if control.received is not None:  # during start-up: nothing trained, nothing to save
        raise Preempted(None, g.requeue_exit_code)
    try:
        last = loop.train(control)
    except NonFiniteLoss:
        retire_nonfinite(out)
        raise
    finally:
        if history is not None:
            history.close()
        logger.finish()
    return _save(loop, out, processor, render_cfg, last)


def _start(cfg: DictConfig, out: Path):
    """Threads, seed and processes; rank 0 writes ``run_info.json`` and, on a fresh start, sets a
    previous run aside. Returns the process runner (``train.grpo.parallel``) and the checkpoint to
    resume from (None: a fresh start)."""
    import torch

    from train.grpo.parallel import bf16_enabled, from_environment

    g = cfg.grpo
    if g.num_threads:
        torch.set_num_threads(g.num_threads)
    torch.manual_seed(g.seed)
    parallel = from_environment(bf16_enabled(g.bf16), g.dist_timeout_s)
    if parallel.is_main:
        write_run_info(out, cfg)
    resume = resolve_resume(g.resume, out)
    if parallel.is_main and resume is None:
        set_aside_previous_run(out, keep=cfg.init if cfg.init != "random" else None)
    return parallel, resume


def _load_model(cfg: DictConfig, resume: str | None, parallel):
    """The policy and its processor: from ``resume``, else ``init``, else the model config as it is."""
    from engine.model import load_model_and_processor

    model_cfg = OmegaConf.to_container(cfg.model, resolve=True)
    init = cfg.init if cfg.init != "random" else None
    if init:
        check_render(init, cfg.render)  # warns when render=... overrides the frames it was trained on
    start = resume or (model_dir(init) if init else None)
    if start:
        model_cfg |= {"kind": "pretrained", "path": str(start), "random_init": False}
    if not parallel.is_main:  # rank 0 first: it may build the model's files (model=tiny) in the cache
        barrier()
    model, processor = load_model_and_processor(model_cfg, cache_dir=cfg.paths.cache_dir)
    if parallel.is_main:
        barrier()
    if cfg.grpo.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model, processor


def render_config(cfg: DictConfig) -> RenderConfig:
    return RenderConfig(**OmegaConf.to_container(cfg.render, resolve=True))


def _renderer(processor, render_cfg: RenderConfig, steps_per_second: float):
    from engine.render import TurnRenderer

    return TurnRenderer(processor, render_cfg, steps_per_second)


def load_windows(cfg: DictConfig, render_cfg: RenderConfig, cache: FrameCache | None) -> list:
    """The rollout windows of ``grpo.train_split`` (``records.jsonl`` or parquet shards), with the
    frames of each stream through the frame cache (``train.grpo.rollout.make_windows``)."""
    from train.grpo.rollout import make_windows

    g, sps = cfg.grpo, cfg.data.steps_per_second
    records = split_records(Path(cfg.data.dir) / g.train_split)
    streams = load_streams(records)
    frames = {s.id: stream_frames(s, resolve_video(s, records), render_cfg, sps, cache) for s in streams}
    return make_windows(streams, frames, g.window_steps, g.negative_share, g.seed, sps)


def held_out_evaluator(cfg: DictConfig, processor, render_cfg: RenderConfig, cache: FrameCache | None):
    """``model -> metrics`` on ``grpo.eval_records`` or ``grpo.eval_split`` (``benchmarks.runners.evaluate_model``,
    the code behind ``eval.run``); None without a held-out set. Fails here on an empty set or a
    benchmark that cannot run (a judge without its URL), not at update 0."""
    g = cfg.grpo
    if not (g.eval_split or g.eval_records):
        return None
    held_out = Path(g.eval_records) if g.eval_records else split_records(Path(cfg.data.dir) / g.eval_split)
    streams = load_streams(held_out)
    if not streams:
        what = f"eval_records={g.eval_records}" if g.eval_records else f"eval_split={g.eval_split}"
        raise ValueError(f"grpo.{what}: {held_out} holds no records to evaluate")
    bench = held_out_benchmark(g.eval_benchmark, cfg.data.steps_per_second)
    get_runner(bench.protocol).check(bench)

    def evaluate(model) -> dict:
        return evaluate_model(
            model,
            processor,
            streams,
            held_out,
            render_cfg,
            bench=bench,
            threshold=g.eval_threshold,
            cache=cache,
        )

    return evaluate


def _loggers(cfg: DictConfig, out: Path, parallel):
    """The run's logger (one W&B run: rank 0's), ``history.jsonl`` (rank 0) and the loop's
    ``on_log(row, step)`` that writes both."""
    sweep = sweep_identity()
    plain = OmegaConf.to_container(cfg, resolve=True)
    logger = make_logger(
        cfg.logger if parallel.is_main else LoggerConfig(),
        run_name=sweep["name"] if sweep else cfg.run_name,
        config=plain | ({"sweep": sweep} if sweep else {}),
        group=sweep["sweep"] if sweep else cfg.run_name,
        run_dir=out,
        job_type="train",
    )
    history = (out / "history.jsonl").open("a") if parallel.is_main else None

    def on_log(row: dict, step: int) -> None:  # rank 0 only
        history.write(json.dumps({"step": step, **row}) + "\n")
        history.flush()
        logger.log_metrics(row, step=step, prefix="grpo")

    return logger, history, on_log


def _save(loop, out: Path, processor, render_cfg: RenderConfig, last: Path) -> Path:
    """``final/`` (every rank its part; rank 0 the processor, ``render.json`` and ``progress.json``);
    returns it, or with ``keep_best`` the best held-out checkpoint."""
    g, parallel = loop.cfg, loop.parallel
    final = out / "final"
    parallel.save_weights(final)
    if parallel.is_main:
        write_progress(out, loop.step, g.max_steps, loop.stopped_by)
        processor.save_pretrained(final)
        write_render(final, render_cfg)
    barrier()
    if parallel.is_main:  # written last, once every rank's part is saved (docs/design.md)
        (final / COMPLETE_MARKER).write_text(f"{loop.step}\n")
    log.info("final checkpoint %s (last update checkpoint %s)", final, last)
    if g.keep_best:
        best = loop.best
        log.info(
            "best held-out %s %.2f at update %d: %s",
            best["metric"],
            best["value"],
            best["step"],
            loop.best_dir,
        )
        return loop.best_dir
    return final


CONF = str(CONF_DIR)


def held_out_benchmark(name: str, steps_per_second: float):
    """The benchmark config of ``grpo.eval_benchmark`` (``conf/benchmark/<name>.yaml``); P3I's steps
    follow the training data's rate."""
    path = Path(CONF) / "benchmark" / f"{name}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in path.parent.glob("*.yaml")))
        raise ValueError(f"grpo.eval_benchmark={name}: no {path} (known: {known})")
    bench = BenchmarkConfig(**OmegaConf.to_container(validate(OmegaConf.load(path), BenchmarkConfig)))
    if bench.protocol == "p3i":
        bench.steps_per_second = steps_per_second
    return bench


def compose_config(overrides: list[str] | None = None) -> DictConfig:
    """``conf/grpo.yaml`` composed with command-line style ``overrides`` and validated (for the demo
    and tests: ``run(compose_config([f"init={sft}", "grpo.max_steps=1"]))``), at the render block the
    ``init`` checkpoint was trained with, as on the command line."""
    return compose("grpo", render_overrides(list(overrides or []), key="init"), GRPOConfig)


@hydra.main(config_path=CONF, config_name="grpo", version_base="1.3")
def _main(cfg: DictConfig) -> None:
    """A point of a sweep (``-m``): Hydra composed it, it is validated and checked here."""
    try:
        cfg = validate(cfg, GRPOConfig)
        reward_fn = check_start(cfg)
    except (ValueError, FileNotFoundError, OmegaConfBaseException) as exc:  # CheckpointError too
        print(f"train.grpo: {exc}", file=sys.stderr)
        sys.exit(2)
    _command(cfg, reward_fn)


def _command(cfg: DictConfig, reward_fn: object) -> None:
    """The command's work on its validated, checked config: an experiment's function, or the run."""
    out = _output_dir(cfg)
    main = is_rank_zero()
    console(None if cfg.entry.target or not main else str(out / "grpo.log"))
    try:
        if cfg.entry.target:
            print(json.dumps(get_method(cfg.entry.target)(cfg)))
            return
        selected = run_checked(cfg, out, reward_fn)
    except OutputLocked as exc:  # another run holds the folder: its path and holder, one line
        print(f"train.grpo: {exc}", file=sys.stderr)
        sys.exit(2)
    except Preempted as exc:
        log.warning("%s", exc)
        leave_launch(exc.exit_code)
    except RecordError as exc:  # a record of the split that cannot be trained on: one line naming it
        print(f"train.grpo: {exc}", file=sys.stderr)
        sys.exit(2)
    key = "best_checkpoint" if cfg.grpo.keep_best else "final_checkpoint"
    if main:
        print(json.dumps({key: str(selected)}))
    leave_launch()


def entry_preflight(cfg: DictConfig) -> None:
    """An experiment's own pre-flight: ``preflight(cfg)`` next to its ``entry.target``, when its
    module has one (``train.experiments.toy_overfire.preflight``: the SFT stage it runs)."""
    module = importlib.import_module(cfg.entry.target.rpartition(".")[0])
    check = getattr(module, "preflight", None)
    if check is not None:
        check(cfg)


def check_run(cfg: DictConfig) -> object:
    """Every check of a GRPO run's config, before anything loads: the config's own (init, reward,
    options: :func:`check_config`), then the stage's pre-flight (``engine.preflight``). Returns the
    reward function."""
    reward_fn = check_config(cfg)
    check_stage(GRPO, cfg)
    return reward_fn


def check_start(cfg: DictConfig) -> object:
    """What the command line checks, once: a run's config (:func:`check_run`, its reward function
    returned), or an experiment's own pre-flight (:func:`entry_preflight`, None returned)."""
    if cfg.entry.target:
        entry_preflight(cfg)
        return None
    return check_run(cfg)


def main() -> None:
    """The command line, with the ``init`` checkpoint's render block added as overrides
    (``engine.checkpoints.render_overrides``: the frames it was trained on; an explicit
    ``render`` override wins, with a warning), composed and checked once."""
    rewrite_argv("train.grpo", partial(render_overrides, key="init"), CheckpointError)
    run_command("train.grpo", "grpo", GRPOConfig, _command, _main, check=check_start)


if __name__ == "__main__":
    main()
