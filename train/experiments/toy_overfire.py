"""``python -m train.grpo experiment=toy_overfire``: the failure GRPO exists to fix, on CPU.

The experiment config sets ``entry.target`` to :func:`run_experiment`, so ``train.grpo`` hands it the
composed config; its own settings are ``entry.options`` (:class:`OverfireConfig`).

1. Toy data (``n_streams`` clips, split by video), then an *over-firing* copy of the
   training split: every positive stream's target is repeated at every step from the event to the
   end of the clip, as the papers' adapted models behave (they keep talking once something happened).
2. SFT on that copy (``conf/sft.yaml`` + ``sft_overrides``): a checkpoint that looks at the
   frames and speaks at the event, then at every later step too. It is kept in
   ``<runs>/toy_overfire_sft/final`` and reused when there, so every GRPO seed starts from it.
3. Held-out evaluation before GRPO, GRPO from that checkpoint (``grpo`` block, reward ``reward``),
   evaluation after. ``<grpo.output_dir>/summary.json`` holds ``before`` and ``after``: P3I metrics
   as ``eval.score`` prints them (plus ``with_negatives``) and ``redundant_replies``, the count of
   replies beyond the first per target (and every reply on a negative), over the held-out streams;
   and ``curve``: held-out PRS-B and mean reward along the updates.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from benchmarks.config import BenchmarkConfig
from benchmarks.runners import evaluate_model
from data_builders.build import write_outputs
from data_builders.config import RenderConfig
from data_builders.mixture import build_toy_mixture
from data_builders.record_io import load_streams, resolve_video
from data_builders.records import Target
from data_builders.splits import split_records
from data_builders.stream_steps import step_times, target_step
from infra.files import json_lines
from infra.schema import typed
from train.run_dir import read_progress

#: The over-firing copy of the training split, next to the mixture's splits in ``data.dir``.
OVERFIRE_SPLIT = "train_overfire"


@dataclass
class OverfireConfig:
    """``entry.options`` of ``experiment=toy_overfire``."""

    n_streams: int = 96
    """Toy clips to generate (split by video)."""
    sft_overrides: list[str] = field(default_factory=list)
    """Overrides of ``conf/sft.yaml`` when training the over-firing checkpoint."""


def held_out_metrics(
    checkpoint: Path, split: Path, render: RenderConfig, steps_per_second: float, threshold: float
) -> dict:
    """P3I metrics of a saved checkpoint on a split (``benchmarks.runners.evaluate_model``)."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    processor = AutoProcessor.from_pretrained(str(checkpoint))
    model = AutoModelForImageTextToText.from_pretrained(str(checkpoint))
    records = split_records(split)
    bench = BenchmarkConfig(steps_per_second=steps_per_second)
    return evaluate_model(
        model, processor, load_streams(records), records, render, bench=bench, threshold=threshold
    )


def overfire_split(src_dir: Path, out_dir: Path, steps_per_second: float = 1.0) -> Path:
    """Copy a split with each target repeated at every step from its step to the clip's end."""
    records = split_records(src_dir)
    streams = []
    for s in load_streams(records):
        times = step_times(s, steps_per_second)
        targets: list[Target] = []
        for t in s.targets:
            k = target_step(s, t, steps_per_second)
            targets += [replace(t, time=times[j], window=None) for j in range(k, len(times))]
        video = str(resolve_video(s, records).resolve())
        streams.append(replace(s, targets=targets, video=video))
    write_outputs(out_dir, streams, steps_per_second=steps_per_second)
    return out_dir


def sft_config(cfg: DictConfig, options: OverfireConfig) -> DictConfig:
    """``conf/sft.yaml`` for the over-firing checkpoint: SFT on :data:`OVERFIRE_SPLIT` of ``data.dir``,
    a split this experiment writes (the mixture draws no share of the videos for it)."""
    from hydra.core.global_hydra import GlobalHydra

    from train.sft.run import compose_config

    GlobalHydra.instance().clear()  # composing conf/sft.yaml from inside the train.grpo app
    return compose_config(
        [
            f"paths.root_dir={cfg.paths.root_dir}",
            f"data.dir={cfg.data.dir}",
            f"+data.splits.{OVERFIRE_SPLIT}=0",
            f"sft.train_split={OVERFIRE_SPLIT}",
            f"sft.output_dir={Path(cfg.paths.runs_dir) / 'toy_overfire_sft'}",
            *options.sft_overrides,
        ]
    )


def preflight(cfg: DictConfig) -> OverfireConfig:
    """The experiment's options, and the SFT stage it runs checked on its config alone (``train.grpo``
    calls this before Hydra runs; :func:`run_experiment` again before building any data)."""
    from engine.preflight import check_stage
    from train.preflight import SFT

    options = typed(OverfireConfig, OmegaConf.to_container(cfg.entry.options, resolve=True), "entry.options")
    check_stage(SFT, sft_config(cfg, options), on_disk=False, memory=False)
    return options


def run_experiment(cfg: DictConfig) -> dict:
    """The three stages above; returns (and writes) the summary."""
    from train.grpo.run import run as run_grpo
    from train.sft.run import train as run_sft

    options = preflight(cfg)
    out = Path(cfg.grpo.output_dir)
    data_dir = Path(cfg.data.dir)
    sps = cfg.data.steps_per_second
    build_toy_mixture(Path(cfg.data.root), data_dir, n=options.n_streams, seed=cfg.data.seed)
    overfire_split(data_dir / "train", data_dir / OVERFIRE_SPLIT, sps)
    sft_dir = Path(cfg.paths.runs_dir) / "toy_overfire_sft"
    init = sft_dir / "final"
    if not (init / "model.safetensors").exists():  # made once, shared by every GRPO seed
        init = run_sft(sft_config(cfg, options))
    render = RenderConfig(**OmegaConf.to_container(cfg.render, resolve=True))
    held_out = data_dir / cfg.grpo.eval_split
    threshold = cfg.grpo.eval_threshold
    before = held_out_metrics(init, held_out, render, sps, threshold)
    grpo_cfg = OmegaConf.merge(cfg, {"init": str(init)})
    final = run_grpo(grpo_cfg, out)
    after = held_out_metrics(final, held_out, render, sps, threshold)
    history = [json.loads(line) for line in json_lines((out / "history.jsonl").read_text())]
    curve = [
        {"step": h["step"], "prs_b": h["eval/with_negatives/prs_b"]}
        for h in history
        if "eval/with_negatives/prs_b" in h
    ]
    rewards = {h["step"]: h["reward/mean"] for h in history if "reward/mean" in h}
    for point in curve:
        point["reward"] = rewards.get(point["step"])
    summary = {
        "before": before,
        "after": after,
        "curve": curve,
        "training": read_progress(out),
        "init": str(init),
        "final": str(final),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary
