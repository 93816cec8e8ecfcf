"""Frames and reply tokens on the host vs on the device: what ``python -m perf engine`` reports of them.

    python -m perf frame_prep                 # ~20 s on 2 cores; on a GPU: --device cuda

Prints one JSON object on its last line (``python -m perf engine`` engine includes the same keys):

- ``frame_prep_max_diff``: the largest absolute difference between the image processor's
  ``pixel_values`` and ``engine.frame_prep``'s on ``--device``, over both models' settings (0.0:
  bit for bit); their grids must be equal (``frame_prep_grids_equal``).
- ``frame_prep_ms_per_frame``: per model config, milliseconds a frame of a ``--frames``-frame call:
  ``host`` the processor on the host plus the upload of its float32 pixels, ``device`` the upload
  of the uint8 frames plus the prep on the device (median of ``--repeats``; this process's CPU time
  on a CPU, wall time with the device synchronized on a GPU). The tiny model's frames are its toy
  size; Qwen3-VL-4B's, a 720p frame as the 448 x 448 budget decodes it (336 x 597, resized to 320 x 608).
- ``frame_prep_upload_bytes_per_frame``: what goes to the device per frame on each path.
- ``frame_prep_float_resize_max_diff``: the difference, in pixel-value units, that resizing in
  float32 and rounding once (the kernel a GPU runs on uint8) would add on Qwen3-VL-4B's frames:
  why ``engine.frame_prep`` resizes with integer passes.
- ``reply_draw_ms_per_row``: one reply token drawn from ``--vocab`` logits per row: ``multinomial``
  the former host path (log_softmax, exp, ``torch.multinomial``), ``race`` :func:`draw_tokens`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np
import torch
from transformers import Qwen2VLImageProcessor

from engine.config import model_preset
from engine.decisions import draw_tokens
from engine.frame_prep import FramePrep

#: Per model config, the frame size its bench frames have.
FRAME_SIZES = {"tiny": (64, 64), "qwen3_vl_4b": (336, 597)}


def clock(device: torch.device, fn) -> float:
    """Milliseconds of ``fn``: CPU time on a CPU, wall time (device synchronized) elsewhere."""
    if device.type == "cpu":
        t0 = time.process_time()
        fn()
        return 1e3 * (time.process_time() - t0)
    torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize(device)
    return 1e3 * (time.perf_counter() - t0)


def model_figures(model: str, device: torch.device, n: int, repeats: int) -> dict:
    processor = Qwen2VLImageProcessor(**model_preset(model)["image_processor"])
    prep = FramePrep.of(processor)
    frames = np.random.default_rng(0).integers(0, 256, (n, *FRAME_SIZES[model], 3), dtype=np.uint8)

    def host():
        out = processor(images=list(frames), return_tensors="pt")
        return out["pixel_values"].to(device), out["image_grid_thw"]

    def on_device():
        return prep(torch.from_numpy(frames).to(device))

    (pv_host, grid), (pv_dev, grids) = host(), on_device()
    times = {"host": [], "device": []}
    for _ in range(repeats):
        times["host"].append(clock(device, host))
        times["device"].append(clock(device, on_device))
    images = torch.from_numpy(frames).permute(0, 3, 1, 2).float()
    h, w = prep.size(*FRAME_SIZES[model])
    floats = torch.nn.functional.interpolate(images, size=[h, w], mode="bicubic", antialias=True)
    floats = floats.clamp(0, 255).round().to(torch.float32).sub(torch.tensor(prep.mean).view(-1, 1, 1))
    float_pv = prep.patchify(floats.div(torch.tensor(prep.std).view(-1, 1, 1)))
    return {
        "diff": float((pv_host - pv_dev).abs().max()),
        "grids_equal": [tuple(g) for g in grid.tolist()] == grids,
        "ms": {k: round(statistics.median(v) / n, 3) for k, v in times.items()},
        "bytes": {"host": pv_host.numel() * 4 // n, "device": frames[0].nbytes},
        "float_diff": float((float_pv - pv_host.cpu()).abs().max()),
    }


def draw_figures(vocab: int, rows: int, repeats: int) -> dict:
    """Milliseconds per row of one reply token drawn from ``vocab`` logits (on the CPU)."""
    logits = torch.randn(rows, vocab, generator=torch.Generator().manual_seed(0))
    generator = torch.Generator().manual_seed(0)

    def multinomial():
        for row in logits:
            torch.multinomial(torch.log_softmax(row, -1).exp(), 1, generator=generator)

    def race():
        draw_tokens(logits, 1.0, generator)[0].tolist()

    cpu = torch.device("cpu")
    return {
        name: round(statistics.median(clock(cpu, fn) for _ in range(repeats)) / rows, 3)
        for name, fn in (("multinomial", multinomial), ("race", race))
    }


def frame_prep_figures(device: str = "cpu", frames: int = 16, repeats: int = 3, vocab: int = 151_936) -> dict:
    """The module docstring's figures."""
    dev = torch.device(device)
    per_model = {m: model_figures(m, dev, frames, repeats) for m in FRAME_SIZES}
    return {
        "frame_prep_max_diff": max(f["diff"] for f in per_model.values()),
        "frame_prep_grids_equal": all(f["grids_equal"] for f in per_model.values()),
        "frame_prep_ms_per_frame": {m: f["ms"] for m, f in per_model.items()},
        "frame_prep_upload_bytes_per_frame": {m: f["bytes"] for m, f in per_model.items()},
        "frame_prep_float_resize_max_diff": round(per_model["qwen3_vl_4b"]["float_diff"], 4),
        "frame_prep_setup": {
            "device": device,
            "frames_per_call": frames,
            "sizes": {m: list(s) for m, s in FRAME_SIZES.items()},
        },
        "reply_draw_ms_per_row": draw_figures(vocab, 8, repeats),
    }


def main(argv: list[str] | None = None) -> dict:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m perf frame_prep", description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", help="where the frames are prepared (cpu, cuda)")
    parser.add_argument("--frames", type=int, default=16, help="frames per call (the engine's frame_chunk)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--vocab", type=int, default=151_936, help="logits per row of the reply draw")
    args = parser.parse_args(argv)
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        result = frame_prep_figures(args.device, args.frames, args.repeats, args.vocab)
    finally:
        torch.set_num_threads(previous)
    print(json.dumps(result))
    return result
