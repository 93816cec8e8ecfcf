"""Accelerator benchmark: the real Qwen3-VL architecture (random weights) through an SFT step and the
streaming engine. No download: the model is built from its config (``model.random_init``).

    python -m perf gpu --model conf/model/qwen3_vl_4b.yaml            # on a GPU machine
    python -m perf gpu --model conf/model/tiny.yaml --device cpu --size 64 --steps 6 --window-steps 24

Frames are drawn in memory from the toy scripts (no video files). Prints one JSON object on its last
line: model size, SFT step time / tokens per second / peak memory (vision frozen, AdamW), streaming
engine vs naive re-prefill per-step cost (and the largest difference of their decision logits),
silent steps per second for one stream and stream-steps per second for a batch, batched vs
sequential throughput, and per-step latency with a bounded frame window early vs late in a long
stream. Times are medians; ratios come from one run, so they hold on a shared machine.
``python -m perf profile`` shows where a step's time goes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from data_builders.config import model_render
from data_builders.records import Stream
from data_builders.synthetic.toy import INSTRUCTIONS, draw_frame, make_script
from engine.config import model_preset
from engine.model import count_parameters, load_model_and_processor
from engine.naive import NaiveStreamer
from engine.render import TurnRenderer
from engine.streaming import EngineConfig, StreamingEngine
from train.sft.config import LossConfig
from train.sft.losses import loss_at_labels, selected_logits


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _peak_gib(device: str) -> float | None:
    if device.startswith("cuda"):
        return round(torch.cuda.max_memory_allocated() / 2**30, 2)
    return None


def _reset_peak(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()


def toy_stream(index: int, steps: int, size: int) -> tuple[Stream, np.ndarray]:
    """A scripted toy clip of ``steps`` seconds drawn in memory at ``size`` pixels."""
    script = make_script(index, seed=0, duration=max(steps, 12), size=size, negative_share=0.0)
    frames = np.stack([draw_frame(script, float(t), size) for t in range(steps)])
    stream = Stream(
        id=f"bench-{index}",
        source="toy",
        task=script.task,
        video="",
        clip_start=0.0,
        clip_end=float(steps),
        instruction=INSTRUCTIONS[script.task],
    )
    return stream, frames


def sft_loss(model, inputs: dict, labels, decision, *, renderer: TurnRenderer, gamma: float):
    """The SFT trainer's loss (``train.sft.losses``): the logits of the labelled positions only,
    the focal loss of exponent ``gamma`` on the decision tokens and cross-entropy on the reply's."""
    ids = (renderer.silence_id, renderer.response_id)
    return loss_at_labels(
        *selected_logits(model, inputs, labels, decision), decision_ids=ids, gamma=gamma
    ).loss


def bench_sft(
    model,
    renderer: TurnRenderer,
    device: str,
    steps: int,
    size: int,
    repeats: int,
    gamma: float = LossConfig().gamma,
    lr: float = 1e-5,
) -> dict:
    """Median seconds of an SFT step (forward, :func:`sft_loss`, backward, AdamW) on one
    ``steps``-frame toy window; ``loss`` is the last step's."""
    stream, frames = toy_stream(0, steps, size)
    batch = renderer.render(stream, frames)
    inputs = {k: v.to(device) for k, v in batch.as_model_inputs().items()}
    labels = batch.labels[None].to(device)
    decision = batch.decision_mask[None].to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr)
    model.train()
    times = []
    _reset_peak(device)
    for i in range(repeats + 1):
        _sync(device)
        t0 = time.perf_counter()
        loss = sft_loss(model, inputs, labels, decision, renderer=renderer, gamma=gamma)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        _sync(device)
        if i:  # the first step warms up kernels and allocates optimizer state
            times.append(time.perf_counter() - t0)
    model.eval()
    del opt
    step_s = statistics.median(times)
    n_tokens = int(batch.input_ids.numel())
    return {
        "tokens": n_tokens,
        "frames": steps,
        "patches": int(batch.pixel_values.shape[0]),
        "step_s": round(step_s, 4),
        "tokens_per_s": round(n_tokens / step_s, 1),
        "peak_gib": _peak_gib(device),
        "loss": float(loss.detach()),
    }


def timed_on(device: str, run):
    """``(run(), seconds)``, the device synchronised before the clock stops."""
    t0 = time.perf_counter()
    out = run()
    _sync(device)
    return out, time.perf_counter() - t0


def bench_stream(
    model,
    renderer: TurnRenderer,
    device: str,
    steps: int,
    size: int,
    batch: int,
    window_steps: int,
    threshold: float,
    compile: bool = False,
) -> dict:
    cfg = EngineConfig(threshold=threshold, max_new_tokens=8, compile=compile)
    stream, frames = toy_stream(1, steps, size)
    many = [toy_stream(i, steps, size) for i in range(batch)]

    def engine(streams, rows):
        return StreamingEngine(model, renderer, cfg).run(streams, rows)

    def warm_up():
        engine([stream], [frames[:4]])
        if compile:  # the batch's graphs too
            engine([s for s, _ in many], [f[:4] for _, f in many])

    _, warmup_s = timed_on(device, warm_up)
    naive_run = NaiveStreamer(model, renderer, threshold=threshold, max_new_tokens=8)
    naive, naive_s = timed_on(device, lambda: naive_run.run(stream, frames))
    [single], engine_s = timed_on(device, lambda: engine([stream], [frames]))
    _, sequential_s = timed_on(device, lambda: [engine([s], [f]) for s, f in many])
    _, batched_s = timed_on(device, lambda: engine([s for s, _ in many], [f for _, f in many]))
    logit_diffs = [
        abs(a - b)
        for x, y in zip(naive.steps, single.steps)
        for a, b in zip(x.decision_logits, y.decision_logits)
    ]
    return {
        "steps": steps,
        "threshold": threshold,
        "compile": compile,
        "warmup_s": round(warmup_s, 3),
        "fires": sum(s.fired for s in naive.steps),
        "same_decisions": [s.text for s in naive.steps] == [s.text for s in single.steps],
        "naive_s": round(naive_s, 3),
        "engine_s": round(engine_s, 3),
        "engine_vs_naive": round(naive_s / engine_s, 2),
        "engine_step_ms_median": round(1000 * statistics.median(s.latency_s for s in single.steps), 2),
        "max_decision_logit_diff": round(max(logit_diffs), 6),
        "steps_per_s": round(steps / engine_s, 2),
        "batched_stream_steps_per_s": round(batch * steps / batched_s, 2),
        "batched_vs_sequential": round(sequential_s / batched_s, 2),
        "batch": batch,
    } | window_figures(model, renderer, cfg, device, window_steps, size)


def window_figures(model, renderer, cfg: EngineConfig, device: str, window_steps: int, size: int) -> dict:
    """Per-step latency early vs late in a long stream with a 32-frame window, and its peak memory."""
    long_stream, long_frames = toy_stream(2, window_steps, size)
    _reset_peak(device)
    window_cfg = dataclasses.replace(cfg, frame_window=32)
    [windowed] = StreamingEngine(model, renderer, window_cfg).run([long_stream], [long_frames])
    lat = [s.latency_s for s in windowed.steps]
    early = statistics.median(lat[50:70]) if len(lat) >= 70 else statistics.median(lat[: len(lat) // 2])
    late = statistics.median(lat[-20:])
    return {
        "window_steps": window_steps,
        "window_late_vs_early": round(late / early, 3),
        "window_step_ms_early": round(1000 * early, 2),
        "window_step_ms_late": round(1000 * late, 2),
        "window_peak_gib": _peak_gib(device),
    }


#: ``--size`` of the benches that draw toy frames for a model config.
SIZE_HELP = "frame side in pixels (default: the model's render option: hd 448, toy 64)"


def model_side(model_yaml: str) -> int:
    """The frame side of a model config's render option (``conf/render/*.yaml``'s ``max_pixels``)."""
    return math.isqrt(model_render(model_yaml).max_pixels)


def build_model(
    model_yaml: str, device: str, size: int, layers: int | None = None
) -> tuple[object, TurnRenderer, dict]:
    """The model of a ``conf/model/*.yaml`` (a pretrained one with random weights, built on
    ``device``; float32 on CPU), its renderer (the model's render option at ``size`` x ``size``
    frames), and a description.
    ``layers`` overrides the language model's depth (the tiny model at a real model's depth)."""
    cfg = model_preset(model_yaml)
    if layers is not None:
        cfg["architecture"]["text_config"]["num_hidden_layers"] = layers
        cfg["name"] = f"{cfg['name']}-{layers}-layers"
    if cfg["kind"] == "pretrained":
        cfg.update(random_init=True, init_device=device)
    if device == "cpu":
        cfg["dtype"] = "float32"
    torch.manual_seed(0)
    t0 = time.perf_counter()
    model, processor = load_model_and_processor(cfg, cache_dir=Path(".cache"))
    model.to(device).eval()
    _sync(device)
    build_s = time.perf_counter() - t0
    renderer = TurnRenderer(processor, dataclasses.replace(model_render(model_yaml), max_pixels=size * size))
    about = {
        "model": cfg["name"],
        "device": torch.cuda.get_device_name() if device.startswith("cuda") else "cpu",
        "dtype": cfg["dtype"],
        "parameters": count_parameters(model),
        "build_s": round(build_s, 1),
        "frame_tokens": renderer.image_tokens(renderer.encode_frames(toy_stream(0, 1, size)[1])[1][0]),
    }
    return model, renderer, about


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m perf gpu", description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="conf/model/qwen3_vl_4b.yaml", help="a conf/model/*.yaml file")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--size", type=int, default=None, help=SIZE_HELP)
    ap.add_argument("--steps", type=int, default=30, help="frames per SFT window and per stream")
    ap.add_argument("--stream-steps", type=int, default=60, help="steps of the engine vs naive streams")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--window-steps", type=int, default=480, help="length of the bounded-window stream")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--threshold",
        type=float,
        default=1.01,
        help="decision threshold; above 1 the model never fires, which times the decision path alone",
    )
    ap.add_argument(
        "--compile",
        action="store_true",
        help="stream with the language model compiled (EngineConfig.compile; the warm-up builds its graphs)",
    )
    args = ap.parse_args(argv)
    args.size = args.size or model_side(args.model)
    model, renderer, out = build_model(args.model, args.device, args.size)
    out["sft"] = bench_sft(model, renderer, args.device, args.steps, args.size, args.repeats)
    with torch.no_grad():
        out["stream"] = bench_stream(
            model,
            renderer,
            args.device,
            args.stream_steps,
            args.size,
            args.batch,
            args.window_steps,
            args.threshold,
            args.compile,
        )
    print(json.dumps(out))
    return out
