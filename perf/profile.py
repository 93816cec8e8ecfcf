"""Where a streaming step's time goes: ``torch.profiler`` over one silent and one firing step.

    python -m perf profile --model conf/model/qwen3_vl_4b.yaml          # on a GPU machine
    python -m perf profile --model conf/model/tiny.yaml --device cpu --size 64 --at 6,12 --window 4

For each step count T in ``--at``, with and without a ``--window``-frame window, one stream runs
silent (threshold above 1) to step T; step T is profiled silent, then the threshold drops below 0
so that step T + 1 fires and is profiled too (its reply runs to ``--max-new-tokens``). A profiled
step is split into the engine's labelled parts: ``vision`` (processor and vision tower, on the
steps that start a frame chunk), ``model`` (the language model's forward, the image features
merged in), ``head`` (decision logits, or the vocabulary's while a reply is decoded), each the
host's time inside it; ``host`` is the rest of the step's wall time, the engine's own Python (on a
GPU, with the wait at the step's one read of the decision). On a GPU it also counts kernel
launches and host-device synchronisations (and the host's time waiting in them) and sums the
device's busy time: a step whose kernels keep the device busy for a small share of its wall time
is bound by launches and host work, not by arithmetic.

Prints a markdown table, then one JSON object on its last line. ``unprofiled_step_ms`` is the
median wall time of the ten silent steps before T, without the profiler's overhead.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from engine.streaming import EngineConfig, StreamingEngine
from perf.gpu import SIZE_HELP, _sync, build_model, model_side, toy_stream

PARTS = ("vision", "model", "head")
LAUNCHES = (
    "cudaLaunchKernel",
    "cudaLaunchKernelExC",
    "cuLaunchKernel",
    "cuLaunchKernelEx",
    "cudaGraphLaunch",
)
SYNCING = ("aten::_local_scalar_dense", "aten::nonzero")  # .item() and boolean-mask indexing
FORWARD = ("model", "head")  # where these read device tensors (the engine's own reads are of host tensors)
TOP = 8  # ops listed per profiled step


def _labelled(name: str, fn):
    def run(*args, **kwargs):
        with record_function(name):
            return fn(*args, **kwargs)

    return run


def _inside(event, names: tuple[str, ...]) -> bool:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name in names:
            return True
        parent = parent.cpu_parent
    return False


def _summary(prof, wall_s: float, cpu_s: float, cuda: bool) -> dict:
    """A profiled step's split (milliseconds), its launches and syncs, and its heaviest ops."""
    events = prof.key_averages()
    by_name = {e.key: e for e in events}
    ms = {part: round(by_name[part].cpu_time_total / 1e3, 3) if part in by_name else 0.0 for part in PARTS}
    out = {
        "wall_ms": round(1e3 * wall_s, 3),
        "cpu_ms": round(1e3 * cpu_s, 3),
        **{f"{part}_cpu_ms": v for part, v in ms.items()},
        "host_ms": round(1e3 * wall_s - sum(ms.values()), 3),
        "model_calls": by_name["model"].count if "model" in by_name else 0,  # language-model forwards
        # ops in the forward that read a device value back to the host (a synchronisation on a GPU),
        # countable on CPU too; on a GPU the step's read of its decision logits adds one
        "syncing_ops": sum(e.name in SYNCING and _inside(e, FORWARD) for e in prof.events()),
    }
    if cuda:
        device = [
            e for e in prof.events() if e.device_type != torch.autograd.DeviceType.CPU and e.name not in PARTS
        ]
        out["device_ops"] = len(device)
        out["gpu_busy_ms"] = round(sum(e.device_time_total for e in device) / 1e3, 3)
        out["launches"] = sum(by_name[n].count for n in LAUNCHES if n in by_name)
        out["syncs"] = sum(e.count for e in events if "Synchronize" in e.key)
        out["sync_wait_ms"] = round(sum(e.cpu_time_total for e in events if "Synchronize" in e.key) / 1e3, 3)
        out["device_to_host"] = sum(e.name.startswith("Memcpy DtoH") for e in device)
        for part in PARTS:
            out[f"{part}_gpu_ms"] = (
                round(by_name[part].device_time_total / 1e3, 3) if part in by_name else 0.0
            )
        key = "self_device_time_total"
    else:
        key = "self_cpu_time_total"
    ops = sorted((e for e in events if e.key not in PARTS), key=lambda e: getattr(e, key), reverse=True)
    out["top_ops"] = [[e.key, e.count, round(getattr(e, key) / 1e3, 3)] for e in ops[:TOP]]
    return out


def profile_stream(
    model, renderer, device: str, size: int, at: int, window: int | None, max_new: int
) -> dict:
    """Profile steps ``at`` (silent) and ``at + 1`` (firing) of a toy stream."""
    stream, frames = toy_stream(3, at + 2, size)
    engine = StreamingEngine(
        model, renderer, EngineConfig(threshold=1.01, max_new_tokens=max_new, frame_window=window)
    )
    cuda = device.startswith("cuda")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    engine.vision.prepare = _labelled("vision", engine.vision.prepare)
    engine.forward.head = _labelled("head", engine.forward.head)
    engine.forward.language_model = _labelled("model", engine.forward.language_model)
    found: dict[str, dict] = {}
    state: dict = {}

    def hook(eng: StreamingEngine, k: int) -> None:
        if "prof" in state:  # the profiled step ends here
            _sync(device)
            wall = time.perf_counter() - state.pop("t0")
            prof = state.pop("prof")
            prof.stop()
            found["silent" if k == at else "firing"] = _summary(prof, wall, eng.step_timings[k][0], cuda)
        if k == at:
            eng.cfg.threshold = -1.0  # the next step fires
        if k in (at - 1, at):
            state["prof"] = profile(activities=activities)
            state["prof"].start()
            _sync(device)
            state["t0"] = time.perf_counter()

    engine.step_hook = hook
    [result] = engine.run([stream], [frames])
    before = [s.latency_s for s in result.steps[max(at - 10, 0) : at]]
    if result.steps[at].fired or not result.steps[at + 1].fired:
        raise RuntimeError(f"step {at} should be silent and step {at + 1} should fire")
    return {
        "steps": at,
        "window": window,
        "cache_tokens": engine.cache_length(),
        "unprofiled_step_ms": round(1e3 * statistics.median(before), 3),
        **found,
    }


def table(rows: list[dict]) -> str:
    cuda = "gpu_busy_ms" in rows[0]["silent"]
    head = ["T", "window", "step", "wall ms", "host ms", "model ms", "vision ms", "head ms", "syncing ops"]
    head += ["GPU busy ms", "launches", "syncs", "device-to-host"] if cuda else []
    part = "gpu" if cuda else "cpu"
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        for kind in ("silent", "firing"):
            s = row[kind]
            cells = [row["steps"], row["window"] or "none", kind, s["wall_ms"], s["host_ms"]]
            cells += [s[f"model_{part}_ms"], s[f"vision_{part}_ms"], s[f"head_{part}_ms"], s["syncing_ops"]]
            cells += [s["gpu_busy_ms"], s["launches"], s["syncs"], s["device_to_host"]] if cuda else []
            lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m perf profile", description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="conf/model/qwen3_vl_4b.yaml", help="a conf/model/*.yaml file")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--size", type=int, default=None, help=SIZE_HELP)
    ap.add_argument("--at", default="60,480", help="comma-separated steps to profile")
    ap.add_argument("--window", type=int, default=32, help="frame window of the windowed runs")
    ap.add_argument("--max-new-tokens", type=int, default=8)
    args = ap.parse_args(argv)
    steps = [int(x) for x in args.at.split(",")]
    if min(steps) < 1:
        ap.error(
            f"--at: steps from 1 (a silent step is profiled after at least one before it), got {args.at}"
        )
    args.size = args.size or model_side(args.model)
    model, renderer, out = build_model(args.model, args.device, args.size)
    with torch.no_grad():
        stream, frames = toy_stream(4, 3, args.size)  # warm-up: kernels, allocator, both paths
        StreamingEngine(model, renderer, EngineConfig(threshold=0.0, max_new_tokens=2)).run(
            [stream], [frames]
        )
        rows = [
            profile_stream(model, renderer, args.device, args.size, at, window, args.max_new_tokens)
            for at in steps
            for window in (None, args.window)
        ]
    out["profiles"] = rows
    print(table(rows))
    print(json.dumps(out))
    return out
