"""The whole pipeline on the tiny model and toy videos, on CPU.

    python -m pipeline.demo            (or: make demo)
    python -m pipeline.demo demo.n_streams=64 'demo.sft_overrides=["experiment=toy_sft","sft.max_steps=300"]'

1. Build toy clips (``source=toy``) and split them by video (``data=toy``), as the builders do.
2. Build the tiny Qwen3-VL checkpoint; render one stream and print what the model sees.
3. Evaluate the untrained model on the held-out streams (the causal KV-cache engine, P3I scoring).
4. SFT (``experiment=toy_sft``), then evaluate it, and again with every frame blanked.
5. GRPO from the SFT checkpoint, keeping the update with the best validation PRS-B (update 0, the
   SFT checkpoint itself, included: ``grpo.keep_best``), then evaluate that on the test streams.
6. Print one table and write ``<run dir>/summary.json``: per stage the P3I metrics as
   ``eval.score`` prints them (``with_negatives`` counts a silent negative as 1 in its task), and
   under ``training`` the steps each stage ran of those planned.

The stages train for a number of steps, not seconds: a slower machine takes longer, and each stage
logs its progress (steps, rate, ETA). A wall-clock budget is an option
(``sft.time_budget_s`` / ``grpo.time_budget_s``); when it cuts a stage short, the stage's line
and ``summary.json`` say how many steps ran of how many.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from data_builders.config import RenderConfig
from data_builders.frame_cache import FrameCache
from data_builders.frames import stream_frames
from data_builders.mixture import build_toy_mixture
from data_builders.record_io import load_streams, resolve_video
from data_builders.splits import split_records
from infra.entry import front_door, quiet_libraries, split_argv
from infra.schema import CONF_DIR
from infra.tracking import format_table
from pipeline.config import DemoConfig
from train.run_dir import read_progress

CONF = CONF_DIR


def _evaluate(
    cfg: DictConfig, run_dir: Path, records: Path, name: str, checkpoint: Path | None, blank: bool = False
) -> dict:
    overrides = [
        f"paths.root_dir={cfg.paths.root_dir}",
        f"records={records}",
        f"out_dir={run_dir / 'eval' / name}",
        f"checkpoint={checkpoint if checkpoint else 'null'}",
        f"blank_frames={str(blank).lower()}",
        f"threshold={cfg.demo.threshold}",
        "logger=none",
        "timelines=2",
    ]
    from eval.run import evaluate  # here, not at the top: --cfg job and a refusal load no model code
    from eval.run import load_config as eval_config

    return evaluate(eval_config(overrides), echo=False)


def _table(summary: dict) -> str:
    tasks = sorted({t for m in summary.values() for t in m.get("with_negatives", m)["per_task"]})
    rows = []
    for stage, m in summary.items():
        view = m.get("with_negatives", m)
        rows.append(
            [
                stage,
                view["prs_b"],
                view["prs_u"],
                *[view["per_task"].get(t, {}).get("prs_b") for t in tasks],
                m.get("redundant_replies"),
            ]
        )
    return format_table(["stage", "PRS-B", "PRS-U", *[f"{t} B" for t in tasks], "redundant"], rows)


def _ran(progress: dict | None, unit: str) -> str:
    """``1500 of 1500 steps`` (and what cut a run short, if something did)."""
    if progress is None:
        return f"no {unit} recorded"
    cut = (
        f", stopped by the {progress['stopped_by'].replace('_', ' ')}"
        if progress["done"] < progress["planned"]
        else ""
    )
    return f"{progress['done']} of {progress['planned']} {unit}{cut}"


def run_demo(cfg: DictConfig) -> dict:
    quiet_libraries()
    t0 = time.time()
    run_dir = Path(cfg.paths.runs_dir) / cfg.run_name
    data_dir, counts = _toy_data(cfg, run_dir)
    test = split_records(data_dir / "test")
    _show_model(cfg, test)

    summary = {"untrained": _evaluate(cfg, run_dir, test, "untrained", None)}
    print(
        f"[3/6] untrained: PRS-B {summary['untrained']['with_negatives']['prs_b']:.1f} ({time.time() - t0:.0f} s)"
    )
    sft, steps = _sft_stage(cfg, run_dir, data_dir, summary, t0)
    steps["grpo"] = _grpo_stage(cfg, run_dir, data_dir, sft, summary, t0)

    (run_dir / "summary.json").write_text(json.dumps({**summary, "training": steps}, indent=1) + "\n")
    print(f"[6/6] held-out toy streams ({counts['test']}), negatives included; {run_dir / 'summary.json'}")
    print(_table(summary))
    print(json.dumps({"summary": str(run_dir / "summary.json"), "seconds": round(time.time() - t0)}))
    return summary


def _toy_data(cfg: DictConfig, run_dir: Path) -> tuple[Path, dict[str, int]]:
    """Stage 1: build the toy clips and split them by video; the data folder and the clips per split."""
    data_dir = build_toy_mixture(
        run_dir / "data" / "built",
        run_dir / "data" / "toy",
        n=cfg.demo.n_streams,
        seed=cfg.demo.seed,
        splits=dict(cfg.demo.splits),
    )
    counts = {split: len(load_streams(split_records(data_dir / split))) for split in cfg.demo.splits}
    print(f"[1/6] toy data: {sum(counts.values())} clips split by video {counts} in {data_dir}")
    return data_dir, counts


def _show_model(cfg: DictConfig, test: Path) -> None:
    """Stage 2: build the tiny model and print one test stream as the model sees it."""
    from engine.model import count_parameters, load_model_and_processor
    from engine.render import TurnRenderer

    model, processor = load_model_and_processor(cfg.model, cache_dir=cfg.paths.cache_dir)
    params = count_parameters(model)
    render = RenderConfig(**cfg.render)
    renderer = TurnRenderer(processor, render)
    stream = load_streams(test)[cfg.demo.show_stream]
    frames = stream_frames(
        stream, resolve_video(stream, test), render, cache=FrameCache(cfg.paths.frame_cache_dir)
    )
    rendered = renderer.render(stream, frames)
    print(
        f"[2/6] model {cfg.model.name}: {params['total']:,} parameters ({params['trainable']:,} trainable); "
        f"stream {stream.id} ({stream.task}) renders to {rendered.input_ids.numel()} tokens, "
        f"targets at {[t.time for t in stream.targets]} s"
    )
    print("      " + processor.tokenizer.decode(rendered.input_ids[:40]).replace("\n", "\\n"))


def _sft_stage(
    cfg: DictConfig, run_dir: Path, data_dir: Path, summary: dict, t0: float
) -> tuple[Path, dict[str, dict | None]]:
    """Stage 4: SFT, evaluated with and without the frames (into ``summary``); the checkpoint and
    the steps it ran."""
    from train.sft.run import compose_config as sft_config
    from train.sft.run import train as run_sft

    test = split_records(data_dir / "test")
    sft = run_sft(
        sft_config(
            [
                f"paths.root_dir={cfg.paths.root_dir}",
                f"data.dir={data_dir}",
                f"sft.output_dir={run_dir / 'sft'}",
                *cfg.demo.sft_overrides,
            ]
        )
    )
    summary["sft"] = _evaluate(cfg, run_dir, test, "sft", sft)
    summary["sft_blank_video"] = _evaluate(cfg, run_dir, test, "sft_blank_video", sft, blank=True)
    steps = {"sft": read_progress(run_dir / "sft")}
    print(
        f"[4/6] SFT: PRS-B {summary['sft']['with_negatives']['prs_b']:.1f}, blank video "
        f"{summary['sft_blank_video']['with_negatives']['prs_b']:.1f}; {_ran(steps['sft'], 'steps')} "
        f"({time.time() - t0:.0f} s)"
    )
    return sft, steps


def _grpo_stage(
    cfg: DictConfig, run_dir: Path, data_dir: Path, sft: Path, summary: dict, t0: float
) -> dict | None:
    """Stage 5: GRPO from the SFT checkpoint, its kept update evaluated (into ``summary``); the
    updates it ran."""
    from train.grpo.checkpoints import BEST_FILE
    from train.grpo.run import compose_config as grpo_config
    from train.grpo.run import run as run_grpo

    grpo_cfg = grpo_config(
        [
            f"paths.root_dir={cfg.paths.root_dir}",
            f"data.dir={data_dir}",
            f"init={sft}",
            f"grpo.output_dir={run_dir / 'grpo'}",
            *cfg.demo.grpo_overrides,
        ]
    )
    grpo = run_grpo(grpo_cfg, run_dir / "grpo")
    summary["grpo"] = _evaluate(cfg, run_dir, split_records(data_dir / "test"), "grpo", grpo)
    picked = grpo / BEST_FILE
    which = f", update {json.loads(picked.read_text())['step']}, best on val" if picked.exists() else ""
    progress = read_progress(run_dir / "grpo")
    print(
        f"[5/6] GRPO: PRS-B {summary['grpo']['with_negatives']['prs_b']:.1f}{which}; "
        f"{_ran(progress, 'updates')} ({time.time() - t0:.0f} s)"
    )
    return progress


def main(argv: list[str] | None = None) -> dict:
    """Compose ``conf/demo.yaml`` with command-line overrides (the stages compose their own roots,
    so the demo is not a ``hydra.main`` app itself) and run it. It answers as a Hydra main does:
    ``--cfg job`` prints the composed config, a mistyped key is one line (exit 2)."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", force=True)
    logging.getLogger("progress").setLevel(logging.INFO)  # steps, rate and ETA of each stage
    overrides, printing = split_argv(sys.argv[1:] if argv is None else argv)
    cfg = front_door("pipeline.demo", "demo", DemoConfig, overrides)  # a mistake: one line, exit 2
    if printing:  # --cfg job (or --help): the composed config, as a Hydra entry point prints it
        print(OmegaConf.to_yaml(cfg, resolve=True), end="")
        return {}
    return run_demo(cfg)


if __name__ == "__main__":
    main()
