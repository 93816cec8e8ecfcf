"""The static streaming step (``EngineConfig.step="static"``): graph breaks, recompiles and reads
from the device over a long windowed stream, and its decisions against the eager engine's.

    python -m perf static                          # tiny model, CPU: 600 steps at batch 1 and 8
    python -m perf static --steps 40 --batch 3     (a quick check)

For batch 1 and ``--batch`` toy streams of ``--steps`` steps with a ``--window``-frame window, at
``--threshold`` (0.5: the untrained tiny model stays silent, the steady state), the static engine
runs compiled (``compile=true``) and the eager engine runs as a reference. Figures:

- ``graph_breaks``: graph breaks ``torch._dynamo`` counted over the compiled runs (``fullgraph=True``
  makes any break an error, so 0 or the command fails).
- ``recompiles``: graphs built beyond one per step function key (kind, rows, piece, capacity:
  ``engine.static_step.compiled_step``), i.e. guards that failed and compiled a key again.
- ``graphs``: the keys compiled (one frame step per batch; a reply token step when a row fires).
- ``syncs_per_silent_step``: the most reads of a device value by the host (``.item()``, ``bool()``,
  ``nonzero``, ``masked_select``, ``.tolist()``, ``.numpy()``; left out: the decision's own read,
  the vision call and the host-side M-RoPE positions of a new chunk shape, :data:`UNCOUNTED`) in
  any silent step of the static engine, run uncompiled (the same host code; the compiled function
  has no such read: a read would break its graph); ``eager_syncs_per_silent_step`` the same for the
  eager engine (its compactions read the mask back).
- ``same_decisions``, ``max_decision_logit_diff``: static compiled against eager.

JSON on the last line.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from contextlib import contextmanager

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from engine.decisions import Decider
from engine.frame_features import FrameFeatures
from engine.static_step import compiled_step
from engine.step_forward import StepForward
from engine.streaming import EngineConfig, StreamingEngine
from perf.gpu import build_model, model_side, toy_stream

READS = {"_local_scalar_dense", "nonzero", "is_nonzero", "masked_select", "equal", "unique", "_unique2"}


class _Reads(TorchDispatchMode):
    """Counts the aten ops that hand a device value to the host."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket.__name__ in READS:
            self.count += 1
        return func(*args, **(kwargs or {}))


#: Left out of the count: the decision's own read, the vision call (frame preparation: its own
#: work, docs/performance.md) and the M-RoPE positions of a new chunk shape (host tensors).
UNCOUNTED = (
    (Decider, "choose"),
    (FrameFeatures, "prepare"),
    (FrameFeatures, "features"),
    (StepForward, "positions"),
)


@contextmanager
def counted_reads(engine: StreamingEngine, per_step: list[int]):
    """While inside, each step of ``engine`` appends its count of device reads to ``per_step``
    (``Tensor.tolist`` / ``numpy`` counted too), :data:`UNCOUNTED` left out."""
    mode = _Reads()
    originals = {name: getattr(torch.Tensor, name) for name in ("tolist", "numpy")}
    paused = [0]

    def counting(name):
        def read(self, *args, **kwargs):
            mode.count += not paused[0]
            return originals[name](self, *args, **kwargs)

        return read

    def uncounted(fn):
        def call(*args, **kwargs):
            paused[0] += 1
            before = mode.count
            try:
                return fn(*args, **kwargs)
            finally:
                paused[0] -= 1
                mode.count = before

        return call

    step = engine._step

    def counted_step(*args):
        before = mode.count
        with mode:
            step(*args)
        per_step.append(mode.count - before)

    saved = [(owner, name, getattr(owner, name)) for owner, name in UNCOUNTED]
    for name in originals:
        setattr(torch.Tensor, name, counting(name))
    for owner, name, fn in saved:
        setattr(owner, name, uncounted(fn))
    engine._step = counted_step
    try:
        yield
    finally:
        for name, fn in originals.items():
            setattr(torch.Tensor, name, fn)
        for owner, name, fn in saved:
            setattr(owner, name, fn)
        del engine._step


def silent_reads(model, renderer, cfg: EngineConfig, rows) -> int:
    """The most device reads of any silent step of a run (:func:`counted_reads`)."""
    engine = StreamingEngine(model, renderer, cfg)
    per_step: list[int] = []
    with counted_reads(engine, per_step):
        [result, *_] = engine.run([s for s, _ in rows], [f for _, f in rows])
    silent = [n for n, s in zip(per_step, result.steps, strict=True) if not s.fired]
    return max(silent, default=0)


def compiled_case(model, renderer, cfg: EngineConfig, rows) -> dict:
    """The static engine compiled against the eager one over ``rows``: graphs, breaks, recompiles."""
    from torch._dynamo.utils import counters

    streams, frames = [s for s, _ in rows], [f for _, f in rows]
    graphs0, keys0 = counters["stats"]["unique_graphs"], compiled_step.cache_info().currsize
    breaks0 = sum(counters["graph_break"].values())
    static = StreamingEngine(model, renderer, dataclasses.replace(cfg, step="static", compile=True))
    got = static.run(streams, frames)
    keys = compiled_step.cache_info().currsize - keys0
    ref = StreamingEngine(model, renderer, cfg).run(streams, frames)
    pairs = [(a, b) for x, y in zip(ref, got) for a, b in zip(x.steps, y.steps, strict=True)]
    return {
        "rows": len(rows),
        "steps": len(pairs) // len(rows),
        "fires": sum(a.fired for a, _ in pairs),
        "graphs": keys,
        "graph_breaks": sum(counters["graph_break"].values()) - breaks0,
        "recompiles": counters["stats"]["unique_graphs"] - graphs0 - keys,
        "capacity": static.kv.capacity,
        "same_decisions": all(a.fired == b.fired and a.text == b.text for a, b in pairs),
        "max_decision_logit_diff": max(
            abs(u - v) for a, b in pairs for u, v in zip(a.decision_logits, b.decision_logits)
        ),
    }


def static_figures(model, renderer, steps: int, batch: int, window: int, threshold: float, size: int) -> dict:
    """The module docstring's figures, batch 1 and ``batch``."""
    streams = [toy_stream(i, steps, size) for i in range(batch)]
    cfg = EngineConfig(threshold=threshold, max_new_tokens=4, frame_window=window)
    cases = {}
    with torch.no_grad():
        for rows in (streams[:1], streams):
            cases[f"batch{len(rows)}"] = compiled_case(model, renderer, cfg, rows)
        short = [(s, f[: 4 * window]) for s, f in streams[:1]]
        static_eager = dataclasses.replace(cfg, step="static")
        reads = silent_reads(model, renderer, static_eager, short)
        eager_reads = silent_reads(model, renderer, cfg, short)
    return {
        "graph_breaks": sum(c["graph_breaks"] for c in cases.values()),
        "recompiles": sum(c["recompiles"] for c in cases.values()),
        "graphs": sum(c["graphs"] for c in cases.values()),
        "syncs_per_silent_step": reads,
        "eager_syncs_per_silent_step": eager_reads,
        "static_cases": cases,
    }


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m perf static", description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="conf/model/tiny.yaml", help="a conf/model/*.yaml file")
    ap.add_argument("--steps", type=int, default=600, help="steps of each stream")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--window", type=int, default=8, help="frame window")
    ap.add_argument(
        "--threshold", type=float, default=0.5, help="decision threshold (below 0: every step fires)"
    )
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    size = model_side(args.model)
    model, renderer, out = build_model(args.model, "cpu", size, None)
    out |= static_figures(model, renderer, args.steps, args.batch, args.window, args.threshold, size)
    print(json.dumps(out))
    return out
