"""SFT's input pipeline on the frame cache's entry formats: samples/s of one dataloader worker.

    python -m perf sft_input          # one JSON object on the last line (~1 min on 2 cores)

``pipeline_samples_per_s_per_worker``: one dataloader worker's rate through SFT's input pipeline
  (:class:`~train.sft.data.StreamWindowDataset` with ``keep_rendered`` off -> the renderer and the
  Qwen3-VL image processor -> :class:`~train.sft.data.WindowCollator`, batches of one window as the
  recipe's ``per_device_batch_size``), on 30-step windows at 1 step/s (the 30-frame window of the
  H200 SFT figure, 6,701 tokens), by format; with ``pipeline_tokens_per_sample``. The processor is
  Qwen3-VL's image processor settings (``conf/model/qwen3_vl_4b.yaml``) on the tiny tokenizer: the
  frames cost what they cost the real model; the text is a few hundred tokens either way.
The frames are those of ``perf.frame_cache`` (textured, noisy 448 x 448 frames decoded from
H.264), cached in each format of its ``BENCH_FORMATS``. Times are the process's CPU time (one thread).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
import time
from pathlib import Path

from data_builders.config import CONF_DIR, model_render
from data_builders.frame_cache import FrameCache
from data_builders.record_io import write_jsonl
from data_builders.synthetic.toy import generate_toy, write_mp4
from perf.frame_cache import BENCH_FORMATS, textured_frames

#: Qwen3-VL's image processor (``conf/model/qwen3_vl_4b.yaml``).
QWEN3_VL_IMAGES = {
    "patch_size": 16,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "size": {"shortest_edge": 65536, "longest_edge": 16777216},
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
}


def pipeline_rate(
    root: Path, video: Path, fmt: str, n_samples: int = 6, window: int = 30
) -> tuple[float, int]:
    """(samples/s, tokens per sample) of one worker through SFT's dataset and collator, ``fmt`` entries."""
    import torch

    from engine.model import add_decision_tokens, build_processor, build_tokenizer
    from engine.render import TurnRenderer
    from train.sft.data import StreamWindowDataset, WindowCollator

    torch.set_num_threads(1)  # one dataloader worker
    tokenizer = build_tokenizer(512)
    add_decision_tokens(tokenizer)
    processor = build_processor(tokenizer, QWEN3_VL_IMAGES)
    (stream,) = generate_toy(root / "toy", n=1, seed=0, duration=window)
    rel = video.relative_to(root)
    streams = [dataclasses.replace(stream, id=f"s{k}", video=str(rel)) for k in range(n_samples)]
    records = root / "records.jsonl"
    write_jsonl(records, streams)
    render = dataclasses.replace(model_render(CONF_DIR / "model" / "qwen3_vl_4b.yaml"), frame_format=fmt)
    renderer = TurnRenderer(processor, render)
    dataset = StreamWindowDataset(streams, records, renderer, FrameCache(root / fmt), keep_rendered=False)
    collate = WindowCollator(processor.tokenizer.pad_token_id)
    collate([dataset[0]])  # warm: the entry is written, the processor's first call paid
    t0 = time.process_time()
    tokens = 0
    for k in range(len(dataset)):
        batch = collate([dataset[k]])
        tokens += int(batch["attention_mask"].sum())
    elapsed = time.process_time() - t0
    return len(dataset) / elapsed, tokens // len(dataset)


def bench_pipeline(window: int = 30) -> dict:
    """Every figure of the module docstring."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        video = root / "videos" / "textured.mp4"
        write_mp4(video, textured_frames(2 * (window + 2)), fps=2)
        rates, tokens = {}, 0
        for fmt in BENCH_FORMATS:
            rate, tokens = pipeline_rate(root, video, fmt, window=window)
            rates[fmt] = round(rate, 3)
        return {"pipeline_samples_per_s_per_worker": rates, "pipeline_tokens_per_sample": tokens}


def main(argv: list[str] | None = None) -> dict:
    argparse.ArgumentParser(prog="python -m perf sft_input", description=__doc__.splitlines()[0]).parse_args(
        argv
    )
    out = bench_pipeline()
    print(json.dumps(out, sort_keys=True))
    return out
