"""The cost of appending one streaming step to the KV cache: concatenation vs in place.

    python -m eval.bench kv                                   # Qwen3-VL-4B widths, from its config
    python -m eval.bench kv --tokens 1760,7040 --repeats 3

One step's keys and values (``--step-tokens``, 220 for a 448x448 frame and its turn) are appended to
one layer holding L cached tokens, with ``transformers``' ``DynamicLayer`` (concatenation: the whole
layer is copied) and with ``eval.kv_cache.GrowingLayer`` (written in place); the per-step cost of
the model's layers is one layer's times the number of layers (every layer has the same shape).
Default L: the 8- and 32-step windows, and steps 60 and 480 without a window. Prints one JSON object
on its last line: milliseconds per step on this machine's CPU, bytes the append moves, and the
ratio concat / in place.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
import yaml
from transformers import DynamicLayer

from eval.kv_cache import GrowingLayer

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def append_ms(layer_cls, cached: int, step: int, heads: int, head_dim: int, dtype, repeats: int) -> float:
    """Median milliseconds of one ``update`` of ``step`` tokens onto a layer of ``cached`` tokens."""
    times = []
    for _ in range(repeats):
        layer = layer_cls()
        shape = (1, heads, cached, head_dim)
        layer.update(torch.zeros(shape, dtype=dtype), torch.zeros(shape, dtype=dtype))
        if isinstance(layer, GrowingLayer):  # the buffer has room and its pages are mapped, as in
            layer._reserve(cached + step)  # a running stream (a window reuses its buffer)
            layer._k.zero_()
            layer._v.zero_()
        new = torch.ones((1, heads, step, head_dim), dtype=dtype)
        t0 = time.perf_counter()
        layer.update(new, new)
        times.append(time.perf_counter() - t0)
        del layer
    return 1e3 * statistics.median(times)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="conf/model/qwen3_vl_4b.yaml", help="a conf/model/*.yaml file")
    ap.add_argument("--tokens", default="1760,7040,13200,105600", help="cached tokens L, comma-separated")
    ap.add_argument("--step-tokens", type=int, default=220)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    cfg = yaml.safe_load(Path(args.model).read_text())
    text = cfg["architecture"]["text_config"]
    layers, heads, head_dim = text["num_hidden_layers"], text["num_key_value_heads"], text["head_dim"]
    dtype = DTYPES[cfg["dtype"]]
    torch.set_num_threads(1)
    per_token = 2 * heads * head_dim * dtype.itemsize * layers  # keys and values, every layer
    out: dict = {
        "model": cfg["name"],
        "layers": layers,
        "kv_heads": heads,
        "head_dim": head_dim,
        "dtype": cfg["dtype"],
        "step_tokens": args.step_tokens,
        "kv_bytes_per_token": per_token,
    }
    for cached in (int(x) for x in args.tokens.split(",")):
        concat = append_ms(DynamicLayer, cached, args.step_tokens, heads, head_dim, dtype, args.repeats)
        in_place = append_ms(GrowingLayer, cached, args.step_tokens, heads, head_dim, dtype, args.repeats)
        out[str(cached)] = {
            "concat_ms_per_step": round(layers * concat, 3),
            "in_place_ms_per_step": round(layers * in_place, 3),
            "concat_mb_moved": round((2 * cached + args.step_tokens) * per_token / 2**20, 1),
            "in_place_mb_moved": round(args.step_tokens * per_token / 2**20, 1),
            "concat_vs_in_place": round(concat / in_place, 1),
        }
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
