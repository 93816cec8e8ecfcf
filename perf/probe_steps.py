"""The ``engine_steps`` part of ``make gpu-probe`` (:mod:`perf.gpu_probe`): the engine's frame
step and reply step, eager against static, at batch 1 and 8.

Each variant streams the same toy clips with every step firing (threshold below 0), so a step is one
frame step (the step's chunk, the frame's features merged, the two decision logits back) and then
reply token steps (one token per row, the vocabulary's logits left on the device). Every call of
the engine's forward (:class:`~engine.step_forward.StepForward`) is timed, the device synchronised
before and after, and its output kept:

- ``eager``: ``EngineConfig(step="eager")``, the growing cache (``engine.kv_window``).
- ``static``: ``step="static"`` (``engine.static_step``), its capacity fixed for the whole run. On
  CUDA each step function is captured as a CUDA graph and replayed
  (:class:`~engine.static_step.CudaGraphStep`) over the uncompiled function, or, with ``--compile``,
  over the ``torch.compile`` one (what ``compile=true`` runs); on CPU it runs as it is (or compiled).

Per batch and kind: ``ms`` (median of the calls from step ``warm`` on), from one call profiled
late in the stream ``syncs`` (on CUDA the host's synchronisations inside the call, the probe's own
final one left out; on CPU the ops that would read a value back, ``.item()`` and ``nonzero``) and,
on CUDA, ``busy_ms`` (the device's busy time) and ``launches`` (kernel and graph launches); and
``max_diff``, the largest absolute difference between the two variants' outputs over the calls
whose inputs were the same (a row with no token left out), ``compared_calls`` how many.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from contextlib import contextmanager, nullcontext

import torch
from torch.profiler import ProfilerActivity, profile

from engine.step_forward import StepForward
from engine.streaming import EngineConfig, StreamingEngine
from perf.gpu import toy_stream
from perf.profile import LAUNCHES, SYNCING


def sync(device: str) -> None:
    """Wait for the device's queued work (nothing to wait for on a CPU)."""
    if device == "cuda":
        torch.cuda.synchronize()


@dataclasses.dataclass
class Calls:
    """What a run's forward calls left: (step, kind, chunks, ms, output) each, and the profiled ones."""

    device: str
    profile_step: int
    step: int = 0
    rows: list = dataclasses.field(default_factory=list)
    profiled: dict = dataclasses.field(default_factory=dict)


class TimedForward(StepForward):
    """A :class:`StepForward` whose calls are timed and kept in ``self.calls`` (an engine's forward
    gets this class once built)."""

    calls: Calls

    def __call__(self, kv, chunks, grids, image=None, decision=False, on_device=False):
        calls = self.calls
        kind = "frame" if decision else "reply"
        cuda = calls.device == "cuda"
        prof = None
        if calls.step == calls.profile_step and kind not in calls.profiled:
            activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
            prof = profile(activities=activities)
        sync(calls.device)
        with prof or nullcontext():
            t0 = time.perf_counter()
            out = super().__call__(kv, chunks, grids, image, decision, on_device)
            sync(calls.device)
            ms = 1e3 * (time.perf_counter() - t0)
        if prof is not None:
            calls.profiled[kind] = profiled_figures(prof, cuda)
        kept = out.detach().float().cpu()
        calls.rows.append((calls.step, kind, [list(c) for c in chunks], ms, kept, prof is not None))
        return out


def profiled_figures(prof, cuda: bool) -> dict:
    """``syncs`` and, on CUDA, ``busy_ms`` and ``launches`` of one profiled call (module docstring)."""
    events = prof.key_averages()
    if not cuda:
        return {"syncs": sum(e.count for e in events if e.key in SYNCING)}
    device = [e for e in prof.events() if e.device_type != torch.autograd.DeviceType.CPU]
    return {
        # less the probe's own torch.cuda.synchronize at the call's end
        "syncs": sum(e.count for e in events if "Synchronize" in e.key) - 1,
        "busy_ms": round(sum(e.device_time_total for e in device) / 1e3, 3),
        "launches": sum(e.count for e in events if e.key in LAUNCHES),
    }


@contextmanager
def graphs_of_uncompiled_steps():
    """While inside, the static engine with ``compile=True`` replays CUDA graphs of the uncompiled
    step functions (``engine.static_step.compiled_step`` swapped for one without ``torch.compile``)."""
    import engine.static_step as static_step

    made: dict = {}

    def graph_step(kind: str, rows: int, width: int, capacity: int, device_type: str):
        key = (kind, rows, width, capacity)
        if key not in made:
            made[key] = static_step.CudaGraphStep(static_step.STEPS[kind])
        return made[key]

    saved = static_step.compiled_step
    static_step.compiled_step = graph_step
    try:
        yield
    finally:
        static_step.compiled_step = saved


def run_variant(model, renderer, cfg: EngineConfig, rows, device: str, profile_step: int):
    """One run of ``rows`` (stream, frames) under ``cfg``, every forward call timed: (Calls, engine)."""
    engine = StreamingEngine(model, renderer, cfg)
    engine.forward.__class__ = TimedForward
    engine.forward.calls = calls = Calls(device, profile_step)

    def hook(_engine, k: int) -> None:
        calls.step = k + 1

    engine.step_hook = hook
    with torch.no_grad():
        engine.run([s for s, _ in rows], [f for _, f in rows])
    return calls, engine


def compared(ref: Calls, got: Calls, kind: str, warm: int) -> dict:
    """The module docstring's figures of one kind of call, ``ref`` the eager run."""
    a = [r for r in ref.rows if r[1] == kind]
    b = [r for r in got.rows if r[1] == kind]
    diff, n = 0.0, 0
    for x, y in zip(a, b):
        if x[2] != y[2]:  # the runs drew different tokens: their inputs differ from here on
            break
        live = [i for i, c in enumerate(x[2]) if c]
        diff = max(diff, float((x[4][live] - y[4][live]).abs().max()))
        n += 1

    def ms(calls):
        return round(statistics.median(r[3] for r in calls if r[0] >= warm and not r[5]), 3)

    return {
        "eager": {"ms": ms(a), **ref.profiled.get(kind, {})},
        "static": {"ms": ms(b), **got.profiled.get(kind, {})},
        "max_diff": diff,
        "compared_calls": n,
    }


def static_capacity(eager_columns: int, steps: int) -> int:
    """Columns enough for the static run of a stream whose eager run left ``eager_columns``: each
    step's frame chunk is padded to its bucket (under 64 columns more), the first to whole buckets
    (under 512 more); in 256s, so that the capacity never doubles inside the run."""
    return -(-(eager_columns + 64 * (steps + 1) + 512) // 256) * 256


def engine_steps(model, renderer, device: str, s: dict, note) -> dict:
    """The part's figures, batch 1 then ``s["batch"]``; ``note`` keeps each batch's as it lands."""
    steps, warm = s["steps"], s["warm"]
    compile_ = s["compile"]
    graphs = device == "cuda" and not compile_
    out: dict = {"frame_step": {}, "reply_step": {}}
    for batch in (1, s["batch"]):
        rows = [toy_stream(i, steps, s["size"]) for i in range(batch)]
        cfg = EngineConfig(threshold=-1.0, max_new_tokens=s["max_new_tokens"])
        ref, eager = run_variant(model, renderer, cfg, rows, device, steps - 2)
        capacity = static_capacity(eager.cache_length(), steps)
        static = dataclasses.replace(cfg, step="static", compile=compile_ or graphs, static_capacity=capacity)
        with graphs_of_uncompiled_steps() if graphs else nullcontext():
            got, engine = run_variant(model, renderer, static, rows, device, steps - 2)
        if engine.kv.capacity != capacity:
            raise RuntimeError(f"the static cache grew from {capacity} to {engine.kv.capacity} columns")
        for kind in ("frame", "reply"):
            out[f"{kind}_step"][f"batch{batch}"] = compared(ref, got, kind, warm)
        note(frame_step=out["frame_step"], reply_step=out["reply_step"])
    how = "torch.compile, " if compile_ else ""
    if device == "cuda":
        out["static_step"] = f"{how}captured as CUDA graphs and replayed"
    else:
        out["static_step"] = "torch.compile" if compile_ else "uncompiled"
    out["engine_steps_setup"] = {k: s[k] for k in ("steps", "warm", "max_new_tokens", "size")}
    return out
