"""GRPO stage: streaming rollouts scored with the evaluator's own PRS, clipped-ratio updates.

    python -m train.grpo init=runs/sft/final data=toy
    python -m train.grpo -m reward.weights.prs=1,2 reward.redundancy.lambda=0.1,0.2   # a 2x2 sweep
    python -m train.grpo experiment=toy_overfire                                     # CPU learning check

Config -> model (from the SFT checkpoint ``init``) -> rollout windows of the training split ->
reward functions (``conf/reward/``) -> the update loop (``train.grpo_trainer``) -> final checkpoint.
trl's ``GRPOTrainer`` is not used: its loss forward cannot see the frames of a streaming rollout
(see ``train/grpo_loss.py``); the loop here is pinned to nothing but torch and transformers.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import sys
from pathlib import Path

import hydra
import torch
from omegaconf import DictConfig, OmegaConf

from data_builders.records import load_streams, resolve_video
from data_builders.video import FrameCache
from eval.tracking import make_logger
from rewards.grpo import build_reward
from train.config import quiet_libraries, validate
from train.data import split_records
from train.grpo_config import GRPOConfig
from train.grpo_trainer import GRPOLoop, Preempted
from train.model import load_model_and_processor
from train.render import RenderConfig, TurnRenderer, stream_frames
from train.rollout import make_windows
from train.run_dir import resolve_resume, write_run_info
from train.toy_eval import evaluate_streams

log = logging.getLogger("train.grpo")


def _output_dir(cfg: DictConfig) -> Path:
    """The run dir: ``grpo.output_dir``, or the sweep point's own dir under ``-m``."""
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized() and HydraConfig.get().mode.name == "MULTIRUN":
        return Path(HydraConfig.get().runtime.output_dir)
    return Path(cfg.grpo.output_dir)


def run(cfg: DictConfig, out: Path | None = None) -> Path:
    """Train from a validated config; returns the final checkpoint dir (model + processor), or with
    ``grpo.keep_best`` the best one on the held-out split."""
    quiet_libraries()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise RuntimeError(
            "train.grpo runs as a single process (its rollout/update loop is not distributed yet); "
            "launch it with one process per run (slurm/grpo.sh asks for one GPU)"
        )
    g = cfg.grpo
    out = Path(out or g.output_dir)
    if g.num_threads:
        torch.set_num_threads(g.num_threads)
    torch.manual_seed(g.seed)
    write_run_info(out, cfg)
    resume = resolve_resume(g.resume, out)
    model_cfg = OmegaConf.to_container(cfg.model, resolve=True)
    start = resume or cfg.init
    if start:
        model_cfg |= {"kind": "pretrained", "path": str(start), "random_init": False}
    model, processor = load_model_and_processor(model_cfg, cache_dir=cfg.paths.cache_dir)
    render_cfg = RenderConfig(**OmegaConf.to_container(cfg.render, resolve=True))
    renderer = TurnRenderer(processor, render_cfg)
    cache = FrameCache(cfg.paths.frame_cache_dir)

    records = split_records(Path(cfg.data.dir) / g.train_split)
    streams = load_streams(records)
    frames = {s.id: stream_frames(s, resolve_video(s, records), render_cfg, cache) for s in streams}
    windows = make_windows(streams, frames, renderer, g.window_steps, g.negative_share, g.seed)
    reward_fn = build_reward(OmegaConf.to_container(cfg.reward, resolve=True))
    ref_model = None
    if g.beta > 0:
        ref_model = copy.deepcopy(model).eval().requires_grad_(False)
    evaluate = None
    if g.eval_split:
        split = Path(cfg.data.dir) / g.eval_split

        def evaluate(m):
            return evaluate_streams(m, processor, render_cfg, split, cache, threshold=g.eval_threshold)

    logger = make_logger(cfg.logger, run_name=out.name, config=OmegaConf.to_container(cfg, resolve=True))
    history = (out / "history.jsonl").open("a")

    def on_log(row: dict, step: int) -> None:
        history.write(json.dumps({"step": step, **row}) + "\n")
        history.flush()
        logger.log_metrics(row, step=step, prefix="grpo")

    loop = GRPOLoop(g, model, processor, renderer, reward_fn, windows, out, ref_model, evaluate, on_log)
    if resume:
        loop.load_state(resume)
        log.info("resumed from %s at update %d", resume, loop.step)
    log.info(
        "%d windows (%d with a target), %d updates of %d windows x %d rollouts",
        len(windows),
        sum(bool(w.stream.targets) for w in windows),
        g.max_steps,
        g.windows_per_step,
        g.group_size,
    )
    try:
        last = loop.train()
    finally:
        history.close()
        logger.finish()
    final = out / "final"
    model.save_pretrained(final, safe_serialization=True)
    processor.save_pretrained(final)
    log.info("final checkpoint %s (last update checkpoint %s)", final, last)
    if g.keep_best:
        log.info(
            "best held-out PRS-B %.2f at update %d: %s", loop.best["prs_b"], loop.best["step"], loop.best_dir
        )
        return loop.best_dir
    return final


@hydra.main(config_path="../conf", config_name="grpo", version_base="1.3")
def main(cfg: DictConfig) -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", force=True)
    cfg = validate(cfg, GRPOConfig)
    try:
        if cfg.overfire.enabled:
            from train.toy_overfire import run_experiment

            summary = run_experiment(cfg)
            print(json.dumps(summary))
            return
        selected = run(cfg, _output_dir(cfg))
    except Preempted as exc:
        log.warning("%s", exc)
        sys.exit(cfg.grpo.requeue_exit_code)
    key = "best_checkpoint" if cfg.grpo.keep_best else "final_checkpoint"
    print(json.dumps({key: str(selected)}))


if __name__ == "__main__":
    main()
