"""Host memory of the streaming engine on a long stream: a 2-hour video against a 10-minute one.

    python -m perf long_stream                  # 1-4 min on 2 cores, by load; JSON on the last line

``long_stream_peak_ratio_2h_vs_10min`` (also in ``python -m perf engine``): the peak resident set of
a fresh process streaming a synthetic 1 step/s video of 7,200 steps (2 hours) through the tiny
model with ``frame_window=32``, over that of a 600-step (10-minute) one. What it measures is the
engine: the frames are synthetic 64 x 64 toy frames (a square moving over grey, one per step),
made as arrays, not decoded, and stored as a ``.npy`` file that each process maps copy-on-write,
exactly as a :class:`~data_builders.frame_cache.FrameCache` hit arrives in evaluation (``eval.run``
always reads through the cache); 7,200 of them are 88 MB. Threshold 0.5: the untrained tiny model
stays silent, the steady state of a long stream. Each process reports its own peak (``VmHWM``,
see ``perf.video.peak_rss_mb``), its resident set once the model is loaded and
warmed up, and the KV-cache length at the end.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from data_builders.config import CONF_DIR, model_render
from data_builders.records import Stream
from engine.config import model_preset
from engine.model import build_tiny_checkpoint, load_model_and_processor
from engine.render import TurnRenderer
from engine.streaming import EngineConfig, StreamingEngine
from infra.entry import quiet_libraries
from perf.video import peak_rss_mb

TINY = CONF_DIR / "model" / "tiny.yaml"
RENDER = model_render(TINY)  # render=toy
SIZE = math.isqrt(RENDER.max_pixels)  # toy frame side, pixels


def write_frames(path: Path, steps: int, size: int = SIZE) -> Path:
    """``steps`` toy frames as one ``.npy`` (the frame cache's format), written a block at a time."""
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.uint8, shape=(steps, size, size, 3))
    side = size // 4
    for a in range(0, steps, 600):
        block = np.full((min(600, steps - a), size, size, 3), 128, np.uint8)
        for i in range(len(block)):
            k = a + i
            y, x = (k * 3) % (size - side), (k * 5) % (size - side)
            block[i, y : y + side, x : x + side] = (40 * (k % 6), 200, 255 - 40 * (k % 6))
        out[a : a + len(block)] = block
    out.flush()
    del out
    return path


def rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * 4096 / 2**20


def _child(checkpoint: str, frames_file: str, steps: int, window: int) -> None:
    """Stream ``steps`` steps of the mapped frames; print this process's own figures."""
    torch.set_num_threads(1)
    quiet_libraries()
    cfg = model_preset(TINY)
    model, processor = load_model_and_processor(cfg | {"path": checkpoint})
    model.eval()
    renderer = TurnRenderer(processor, RENDER)
    frames = np.load(frames_file, mmap_mode="c")[:steps]  # as a FrameCache hit arrives

    def stream(n: int) -> Stream:
        return Stream(
            id=f"long{n}",
            source="synthetic",
            task="object_monitoring",
            video="synthetic.mp4",
            clip_start=0.0,
            clip_end=float(n),
            instruction="Tell me when something happens.",
        )

    cfg_engine = EngineConfig(threshold=0.5, frame_window=window)
    StreamingEngine(model, renderer, cfg_engine).run([stream(64)], [np.array(frames[:64])])  # warm-up
    before = rss_mb()
    t0 = time.perf_counter()
    engine = StreamingEngine(model, renderer, cfg_engine)
    [result] = engine.run([stream(steps)], [frames])
    print(
        json.dumps(
            {
                "steps": len(result.steps),
                "peak_mb": round(peak_rss_mb(), 1),
                "rss_before_run_mb": round(before, 1),
                "rss_after_run_mb": round(rss_mb(), 1),
                "cache_tokens": engine.cache_length(),
                "fired": sum(s.fired for s in result.steps),
                "seconds": round(time.perf_counter() - t0, 1),
            }
        )
    )


def long_stream_peaks(
    short: int = 600, long: int = 7200, window: int = 32, checkpoint: str | Path | None = None
) -> dict:
    """Each length streamed in its own fresh process; the ratio of their peaks and the details."""
    with tempfile.TemporaryDirectory(prefix="long-stream-") as tmp:
        if checkpoint is None:
            checkpoint = build_tiny_checkpoint(model_preset(TINY), Path(tmp) / "tiny")
        frames = write_frames(Path(tmp) / "frames.npy", long)
        runs = {}
        for steps in (short, long):
            out = subprocess.run(
                [sys.executable, "-m", "perf", "long_stream", "--child", str(checkpoint), str(frames)]
                + [str(steps), str(window)],
                capture_output=True,
                text=True,
                check=True,
            )
            runs[steps] = json.loads(out.stdout.strip().splitlines()[-1])
    return {
        "long_stream_peak_ratio_2h_vs_10min": round(runs[long]["peak_mb"] / runs[short]["peak_mb"], 3),
        "long_stream": {"frame_window": window, "frame_size": SIZE}
        | {f"steps{k}": v for k, v in runs.items()},
    }


def main(argv: list[str] | None = None) -> dict | None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        _child(argv[1], argv[2], int(argv[3]), int(argv[4]))
        return None
    parser = argparse.ArgumentParser(prog="python -m perf long_stream", description=__doc__.split("\n\n")[0])
    parser.add_argument("--short", type=int, default=600, help="steps of the short stream (10 min at 1/s)")
    parser.add_argument("--long", type=int, default=7200, help="steps of the long stream (2 h at 1/s)")
    parser.add_argument("--window", type=int, default=32, help="frame window, in steps")
    args = parser.parse_args(argv)
    result = long_stream_peaks(args.short, args.long, args.window)
    print(json.dumps(result))
    return result
