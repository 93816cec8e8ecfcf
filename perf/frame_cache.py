"""The frame cache's entry formats: bytes and decode time per frame (part of ``python -m
perf builders``; the SFT input pipeline's rate on these entries is ``python -m perf
sft_input``, ``perf.sft_input``).

    python -m perf frame_cache              # these figures alone (~1 min on 2 cores)

The frames are real-looking 448 x 448 frames (``render=hd``'s budget): a synthetic scene generated
here (a lit gradient, wood-grain and checker textures, hard-edged shapes moving over it and per-pixel
sensor noise), written as H.264 (the toy videos' encoder settings, CRF 12, so the noise survives:
harder to compress than most web video) and read back through :class:`~data_builders.frame_cache.FrameCache`
in each format of :data:`BENCH_FORMATS`, as the frames stage writes them.

- ``cache_bytes_per_frame``: the entry's size on disk over its frames, by format.
- ``cache_decode_ms_per_frame``: reading every frame of a cache hit into memory (the file in the
  page cache; raw: a copy out of the memory map), best of 3, by format.

Times are the process's CPU time (one thread, as one dataloader worker on its own core), not wall
time, so other load on the machine does not inflate them.
- ``cache_encode_ms_per_frame``: encoding one frame (the frames stage's extra cost), by format.
- ``cache_psnr_db``: the served frames against the decoded video's (``inf``: the same pixels).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from data_builders.frame_cache import FrameCache
from data_builders.frame_codec import encode_frame
from data_builders.stream_steps import step_times
from data_builders.synthetic.toy import generate_toy, write_mp4
from data_builders.video import DEFAULT_MAX_PIXELS, read_frames

#: The formats measured (``raw`` first: the others are set against it).
BENCH_FORMATS = ("raw", "png", "jpeg95", "jpeg90", "jpeg80", "webp90")
SIZE = 448


def textured_frames(n: int, size: int = SIZE, seed: int = 0) -> list[np.ndarray]:
    """``n`` frames of a synthetic scene: gradient light, wood grain, a checker floor, hard-edged
    shapes that move a few pixels a frame, and Gaussian sensor noise (sigma 6)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:size, 0:size].astype(np.float32) / size
    grain = 0.5 + 0.5 * np.sin(40 * x + 6 * np.sin(9 * y) + 3 * rng.random())
    floor = ((np.floor(x * 14) + np.floor(y * 14)) % 2)[..., None] * (y > 0.62)[..., None]
    base = np.stack([0.55 + 0.3 * x, 0.45 + 0.2 * y, 0.35 + 0.25 * (1 - x)], -1) * (
        0.6 + 0.4 * grain[..., None]
    )
    base = base * (1 - floor * 0.45) + floor * np.array([0.2, 0.25, 0.3])
    shapes = [
        (rng.random(2), 0.05 + 0.12 * rng.random(), rng.random(3), rng.normal(0, 0.01, 2)) for _ in range(9)
    ]
    frames = []
    for t in range(n):
        img = base.copy()
        for k, (centre, r, colour, v) in enumerate(shapes):
            cy, cx = (centre + v * t) % 1.0
            mask = (
                (np.abs(y - cy) < r) & (np.abs(x - cx) < r)
                if k % 2
                else (y - cy) ** 2 + (x - cx) ** 2 < r * r
            )
            img[mask] = colour * (0.7 + 0.3 * grain[mask][:, None])
        img = img * 255 + rng.normal(0, 6, img.shape)
        frames.append(np.clip(img, 0, 255).astype(np.uint8))
    return frames


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


def format_figures(video: Path, times: list[float], root: Path) -> dict[str, dict[str, float]]:
    """Bytes, decode ms, encode ms and PSNR per frame of each format on ``video`` at ``times``."""
    truth = read_frames(video, times, max_pixels=DEFAULT_MAX_PIXELS)
    out: dict[str, dict[str, float]] = {
        k: {}
        for k in (
            "cache_bytes_per_frame",
            "cache_decode_ms_per_frame",
            "cache_encode_ms_per_frame",
            "cache_psnr_db",
        )
    }
    for fmt in BENCH_FORMATS:
        cache = FrameCache(root / fmt)
        cache.frames(video, times, frame_format=fmt)  # the frames stage's write
        entry = cache.entry(video, times, DEFAULT_MAX_PIXELS, fmt)
        best = float("inf")
        for _ in range(3):
            t0 = time.process_time()
            served = np.array(cache.frames(video, times, frame_format=fmt)[:])
            best = min(best, time.process_time() - t0)
        t0 = time.process_time()
        for frame in truth[:8] if fmt != "raw" else []:
            encode_frame(frame, fmt)
        encode = (time.process_time() - t0) / 8
        n = len(times)
        out["cache_bytes_per_frame"][fmt] = round(entry.stat().st_size / n)
        out["cache_decode_ms_per_frame"][fmt] = round(1000 * best / n, 3)
        out["cache_encode_ms_per_frame"][fmt] = round(1000 * encode, 3)
        out["cache_psnr_db"][fmt] = round(_psnr(served, truth), 2)
    return out


def cache_figures(window: int = 30) -> dict:
    """Every figure of the module docstring."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        video = root / "videos" / "textured.mp4"
        write_mp4(video, textured_frames(2 * (window + 2)), fps=2)
        times = step_times(generate_toy(root / "probe", n=1, seed=0, duration=window)[0], 1.0)
        return format_figures(video, times, root / "cache")


def main(argv: list[str] | None = None) -> dict:
    argparse.ArgumentParser(
        prog="python -m perf frame_cache", description=__doc__.splitlines()[0]
    ).parse_args(argv)
    out = cache_figures()
    print(json.dumps(out))
    return out
