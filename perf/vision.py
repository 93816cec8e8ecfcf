"""The vision tower's call: transformers' ``get_image_features`` against the project's
``engine.vision_tower.vision_features`` (the engine's default, ``EngineConfig.vision="project"``).

    python -m perf vision                     # ~1 min on 2 cores (CPU)
    python -m perf vision --repeats 1 --frames 4   (a quick check)

Two models with random weights: ``tiny`` (conf/model/tiny.yaml) on its 64 x 64 toy frames, and
``qwen3_vl_4b_narrow``: Qwen3-VL-4B's vision tower with its exact structure (24 blocks, heads of 64,
a 48 x 48 position table, deepstack after blocks 5, 11 and 17, tanh GELU) at a reduced width (2
heads), on 128 x 128 frames. For a chunk of ``--frames`` frames, per model and way of calling:

- ``syncs_per_vision_call``: the most reads of a device value by the host in one call of the
  project's way (over both models; 0: none): ``.item()``, ``.tolist()``, ``.numpy()``, ``nonzero``
  and the rest of ``perf.static.READS``, and ``repeat_interleave`` with a repeats tensor and no
  output size (it reads the total back); the plan, built once per chunk shape, is left out.
  ``transformers_syncs_per_vision_call``: the same for ``get_image_features``, per model.
- ``vision_sdpa_calls``: calls of ``F.scaled_dot_product_attention`` in one call, per model and way
  (transformers': one per frame per block; the project's: one per block for same-size frames).
- ``vision_call_ms``: this process's CPU milliseconds of one call, median of ``--repeats`` after a
  warm-up, per model and way.
- ``vision_max_diff``: the largest absolute difference of the two ways' features (every image's
  merged features and every deepstack layer's), per model.

JSON on the last line; ``python -m perf engine`` (engine) includes the same keys.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from contextlib import contextmanager
from unittest import mock

import torch
import torch.nn.functional as F
import yaml
from transformers import Qwen3VLForConditionalGeneration

from data_builders.config import CONF_DIR
from engine.model import qwen3_vl_config
from engine.vision_tower import VisionPlans, vision_features
from perf.static import _Reads

#: Per bench model, its frames' grid ``(t, h, w)`` in patches (64 x 64 and 128 x 128 pixels).
GRIDS = {"tiny": (1, 4, 4), "qwen3_vl_4b_narrow": (1, 8, 8)}
#: Qwen3-VL-4B's vision tower at a reduced width: what ``qwen3_vl_4b_narrow`` overrides.
NARROW = {"hidden_size": 128, "num_heads": 2, "intermediate_size": 256}


def bench_architecture(name: str) -> dict:
    """The architecture of a bench model: ``tiny``, or ``qwen3_vl_4b_narrow`` (the tiny text model
    under the 4B's vision tower, :data:`NARROW` its width)."""
    tiny = yaml.safe_load(open(CONF_DIR / "model" / "tiny.yaml"))["architecture"]
    if name == "tiny":
        return tiny
    vision = yaml.safe_load(open(CONF_DIR / "model" / "qwen3_vl_4b.yaml"))["architecture"]["vision_config"]
    out = tiny["text_config"]["hidden_size"]
    return tiny | {"vision_config": vision | NARROW | {"out_hidden_size": out}}


def bench_model(name: str, seed: int = 0) -> Qwen3VLForConditionalGeneration:
    torch.manual_seed(seed)
    return Qwen3VLForConditionalGeneration(qwen3_vl_config(bench_architecture(name))).eval()


class _Counted(_Reads):
    """:class:`perf.static._Reads` plus ``repeat_interleave`` with a repeats tensor and no output size."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten.repeat_interleave.Tensor and kwargs.get("output_size") is None:
            self.count += 1
        return super().__torch_dispatch__(func, types, args, kwargs)


@contextmanager
def counted_reads():
    """While inside, the reads of a device value by the host (module docstring) are counted in the
    yielded counter's ``count``."""
    mode = _Counted()
    originals = {name: getattr(torch.Tensor, name) for name in ("tolist", "numpy")}

    def counting(name):
        def read(self, *args, **kwargs):
            mode.count += 1
            return originals[name](self, *args, **kwargs)

        return read

    for name in originals:
        setattr(torch.Tensor, name, counting(name))
    try:
        with mode:
            yield mode
    finally:
        for name, fn in originals.items():
            setattr(torch.Tensor, name, fn)


@contextmanager
def counted_sdpa():
    """While inside, calls of ``F.scaled_dot_product_attention`` are counted in the yielded list's
    one element (the call itself runs as it is)."""
    calls = [0]
    sdpa = F.scaled_dot_product_attention

    def counting(*args, **kwargs):
        calls[0] += 1
        return sdpa(*args, **kwargs)

    with mock.patch.object(F, "scaled_dot_product_attention", counting):
        yield calls


def vision_calls(model, grids: list[tuple[int, int, int]]) -> dict[str, Callable]:
    """The two ways of running the tower on ``grids``, each a function of the pixel values; the
    project's plan is built here, once, as the engine builds it once per chunk shape."""
    visual = model.model.visual
    plan = VisionPlans(visual)(grids, torch.device("cpu"))
    grid_thw = torch.tensor(grids)
    return {
        "transformers": lambda pv: model.model.get_image_features(pv, grid_thw),
        "project": lambda pv: vision_features(visual, pv, plan),
    }


def _max_diff(a, b) -> float:
    pairs = list(zip(a.pooler_output, b.pooler_output, strict=True))
    pairs += [p for x, y in zip(a.deepstack_features, b.deepstack_features, strict=True) for p in zip(x, y)]
    return max(float((x - y).abs().max()) for x, y in pairs)


def _cpu_ms(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.process_time()
        fn()
        times.append(1e3 * (time.process_time() - t0))
    return round(statistics.median(times), 3)


def model_figures(name: str, frames: int, repeats: int) -> dict:
    """One bench model's reads, SDPA calls, CPU time and difference (module docstring)."""
    model = bench_model(name)
    grids = [GRIDS[name]] * frames
    cfg = model.config.vision_config
    rows = sum(t * h * w for t, h, w in grids)
    width = cfg.in_channels * cfg.temporal_patch_size * cfg.patch_size**2
    pv = torch.randn(rows, width, generator=torch.Generator().manual_seed(1))
    out, figures = {}, {"syncs": {}, "sdpa": {}, "ms": {}}
    with torch.no_grad():
        for way, call in vision_calls(model, grids).items():
            with counted_reads() as reads, counted_sdpa() as sdpa:
                out[way] = call(pv)
            figures["syncs"][way], figures["sdpa"][way] = reads.count, sdpa[0]
            figures["ms"][way] = _cpu_ms(lambda call=call: call(pv), repeats)
    figures["max_diff"] = _max_diff(out["transformers"], out["project"])
    return figures


def vision_figures(frames: int = 16, repeats: int = 3) -> dict:
    """The figures of the module docstring for both bench models."""
    per = {name: model_figures(name, frames, repeats) for name in GRIDS}
    return {
        "syncs_per_vision_call": max(f["syncs"]["project"] for f in per.values()),
        "transformers_syncs_per_vision_call": {n: f["syncs"]["transformers"] for n, f in per.items()},
        "vision_sdpa_calls": {n: f["sdpa"] for n, f in per.items()},
        "vision_call_ms": {n: f["ms"] for n, f in per.items()},
        "vision_max_diff": {n: f["max_diff"] for n, f in per.items()},
        "vision_setup": {"frames": frames, "grids": {n: list(g) for n, g in GRIDS.items()}, "device": "cpu"},
    }


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m perf vision", description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=16, help="frames of the chunk (one vision call)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = ap.parse_args(argv)
    if args.frames < 1 or args.repeats < 1:
        ap.error(f"--frames and --repeats must be at least 1, got {args.frames} and {args.repeats}")
    previous = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    try:
        out = vision_figures(args.frames, args.repeats)
    finally:
        torch.set_num_threads(previous)
    print(json.dumps(out))
    return out
