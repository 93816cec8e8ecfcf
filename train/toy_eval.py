"""Toy data and a small P3I evaluation for the SFT experiments and tests (until ``eval.run`` lands).

    python -m train.toy_eval --checkpoint runs/toy_sft/final --split data/toy/test [--blank]

- :func:`build_toy_mixture`: ``n`` toy clips built as source ``toy`` under ``<root>/toy``, then the
  mixture (train / val / test by video) under ``<dir>``, exactly as ``python -m data_builders build``
  and ``mix`` write them (records, parquet, stats.json).
- :func:`evaluate_streams`: the causal streaming engine over every stream of a split, then P3I
  scoring as ``eval.score --protocol p3i --content label`` does (``label`` for targets with a label,
  ``exact`` for the others), whose ``with_negatives`` view (macro and per-task PRS over all streams,
  a negative scoring 1 when silent) is how the toy experiments judge learning; it also holds
  ``fires_per_stream``.
  ``blank=True`` replaces every frame by a uniform grey one: the control for a model that reads
  the timestamps and ignores the video.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from data_builders.build import build_source
from data_builders.mixture import MixtureConfig, SourceShare, build_mixture
from data_builders.records import Prediction, load_streams, write_jsonl
from data_builders.video import FrameCache
from eval.score import parse_args, score_p3i
from eval.streaming import EngineConfig, stream_batches
from train.data import split_records
from train.render import RenderConfig, TurnRenderer


def build_toy_mixture(
    root: str | Path,
    out: str | Path,
    n: int = 256,
    seed: int = 0,
    splits: dict[str, float] | None = None,
) -> Path:
    """Build ``n`` toy clips into ``<root>/toy`` and the mixture into ``out``; returns ``out``."""
    build_source("toy", Path(root) / "toy", options={"n": n, "seed": seed}, check_videos=False)
    cfg = MixtureConfig(
        name="toy",
        root=str(root),
        dir=str(out),
        seed=seed,
        splits=splits or {"train": 0.75, "val": 0.125, "test": 0.125},
        sources={"toy": SourceShare()},
    )
    build_mixture(cfg)
    return Path(out)


def evaluate_streams(
    model,
    processor,
    render_cfg: RenderConfig,
    split: str | Path,
    frame_cache: FrameCache | None = None,
    *,
    blank: bool = False,
    threshold: float = 0.5,
    batch_size: int = 32,
) -> dict:
    """P3I metrics of ``model`` on every stream of a split dir or records file (module docstring)."""
    path = split_records(split) if Path(split).is_dir() else Path(split)
    streams = load_streams(path)
    renderer = TurnRenderer(processor, render_cfg)
    batches = stream_batches(
        model.eval(),
        renderer,
        streams,
        path,
        EngineConfig(threshold=threshold),
        batch_size=batch_size,
        cache=frame_cache,
        blank=blank,
    )
    preds = [
        Prediction(s.id, r.replies())
        for batch, results in batches
        for s, r in zip(batch, results, strict=True)
    ]
    with tempfile.TemporaryDirectory() as tmp:
        gt, pred = Path(tmp) / "gt.jsonl", Path(tmp) / "pred.jsonl"
        write_jsonl(gt, streams)
        write_jsonl(pred, preds)
        result, _ = score_p3i(
            parse_args(["--protocol", "p3i", "--gt", str(gt), "--pred", str(pred), "--content", "label"])
        )
    result["with_negatives"]["fires_per_stream"] = sum(len(p.replies) for p in preds) / max(1, len(preds))
    return result


def evaluate_checkpoint(checkpoint: str | Path, split: str | Path, render_cfg: RenderConfig, **kw) -> dict:
    """:func:`evaluate_streams` of a saved checkpoint (model + processor)."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    processor = AutoProcessor.from_pretrained(str(checkpoint))
    model = AutoModelForImageTextToText.from_pretrained(str(checkpoint))
    return evaluate_streams(model, processor, render_cfg, split, **kw)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--split", required=True, help="split dir (records.jsonl) or records file")
    ap.add_argument("--blank", action="store_true", help="replace every frame by a blank one")
    ap.add_argument("--max-pixels", type=int, default=4096)
    ap.add_argument("--frame-cache", default=".cache/frames")
    ap.add_argument("--threshold", type=float, default=0.5)
    args = ap.parse_args(argv)
    result = evaluate_checkpoint(
        args.checkpoint,
        args.split,
        RenderConfig(max_pixels=args.max_pixels),
        frame_cache=FrameCache(args.frame_cache),
        blank=args.blank,
        threshold=args.threshold,
    )
    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main()
