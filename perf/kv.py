"""What a streaming step costs per cached token: the KV append and grouped-query attention.

    python -m perf kv                                   # Qwen3-VL-4B widths, from its config
    python -m perf kv --tokens 1760,7040 --attention-tokens 1760 --repeats 3

Append: one step's keys and values (``--step-tokens``, 220 for a 448x448 frame and its turn) are
appended to one layer holding L cached tokens, with ``transformers``' ``DynamicLayer``
(concatenation: the whole layer is copied) and with ``engine.kv_cache.GrowingLayer`` (written in
place); the model's cost is one layer's times the number of layers (every layer has the same
shape). Default L: the 8- and 32-step windows, and steps 60 and 480 without a window.

Attention: the step's query against one layer's L cached tokens under a mask, with transformers'
SDPA (each key/value head repeated for its group of query heads) and with ``engine.attention``'s
folded groups (the cache read as it is, the mask repeated instead), in the model's dtype.

Prints one JSON object on its last line: milliseconds on this machine's CPU, the bytes each variant
writes per step over the model's layers, and the ratios.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from types import SimpleNamespace

import torch
from transformers import DynamicLayer
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from engine.attention import streaming_sdpa
from engine.config import model_preset
from engine.kv_cache import GrowingLayer


def append_ms(layer_cls, cached: int, step: int, heads: int, head_dim: int, dtype, repeats: int) -> float:
    """Median milliseconds of one ``update`` of ``step`` tokens onto a layer of ``cached`` tokens."""
    times = []
    for _ in range(repeats):
        layer = layer_cls()
        shape = (1, heads, cached, head_dim)
        layer.update(torch.zeros(shape, dtype=dtype), torch.zeros(shape, dtype=dtype))
        if isinstance(layer, GrowingLayer):  # the buffer has room and its pages are mapped, as in
            layer.reserve(cached + step)  # a running stream (a window reuses its buffer)
            layer._k.zero_()
            layer._v.zero_()
        new = torch.ones((1, heads, step, head_dim), dtype=dtype)
        t0 = time.perf_counter()
        layer.update(new, new)
        times.append(time.perf_counter() - t0)
        del layer
    return 1e3 * statistics.median(times)


def attention_ms(
    fn, cached: int, step: int, heads: int, kv_heads: int, head_dim: int, dtype, repeats: int
) -> float:
    """Median milliseconds of one layer's attention of a ``step``-token query over ``cached`` keys."""
    module = SimpleNamespace(num_key_value_groups=heads // kv_heads, is_causal=True, training=False)
    query = torch.randn((1, heads, step, head_dim), dtype=dtype)
    key, value = (torch.randn((1, kv_heads, cached, head_dim), dtype=dtype) for _ in range(2))
    mask = torch.ones((1, 1, step, cached), dtype=torch.bool)
    mask[..., -step:] = torch.ones(step, step, dtype=torch.bool).tril()  # the step's causal corner
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(module, query, key, value, mask, scaling=head_dim**-0.5)
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m perf kv", description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="conf/model/qwen3_vl_4b.yaml", help="a conf/model/*.yaml file")
    ap.add_argument("--tokens", default="1760,7040,13200,105600", help="cached tokens L, comma-separated")
    ap.add_argument(
        "--attention-tokens", default="1760,7040,13200", help="cached tokens for the attention figures"
    )
    ap.add_argument("--step-tokens", type=int, default=220)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    cfg = model_preset(args.model)
    text = cfg["architecture"]["text_config"]
    layers, heads, head_dim = text["num_hidden_layers"], text["num_key_value_heads"], text["head_dim"]
    query_heads = text["num_attention_heads"]
    dtype = getattr(torch, cfg["dtype"])  # as engine.model reads a model config's dtype
    step = args.step_tokens
    torch.set_num_threads(1)
    per_token = 2 * heads * head_dim * dtype.itemsize * layers  # keys and values, every layer
    out: dict = {
        "model": cfg["name"],
        "layers": layers,
        "kv_heads": heads,
        "head_dim": head_dim,
        "dtype": cfg["dtype"],
        "step_tokens": step,
        "kv_bytes_per_token": per_token,
    }
    for cached in (int(x) for x in args.tokens.split(",")):
        concat = append_ms(DynamicLayer, cached, step, heads, head_dim, dtype, args.repeats)
        in_place = append_ms(GrowingLayer, cached, step, heads, head_dim, dtype, args.repeats)
        out[str(cached)] = {
            "concat_ms_per_step": round(layers * concat, 3),
            "in_place_ms_per_step": round(layers * in_place, 3),
            "concat_mb_moved": round((2 * cached + step) * per_token / 2**20, 1),
            "in_place_mb_moved": round(step * per_token / 2**20, 1),
            "concat_vs_in_place": round(concat / in_place, 1),
        }
    for cached in (int(x) for x in args.attention_tokens.split(",") if x):
        plain = attention_ms(
            sdpa_attention_forward, cached, step, query_heads, heads, head_dim, dtype, args.repeats
        )
        folded = attention_ms(streaming_sdpa, cached, step, query_heads, heads, head_dim, dtype, args.repeats)
        out[f"attention_{cached}"] = {
            "sdpa_ms_per_layer": round(plain, 2),
            "folded_ms_per_layer": round(folded, 2),
            "sdpa_vs_folded": round(plain / folded, 2),
            # written per step over the layers: the repeated keys and values vs the repeated mask
            "sdpa_mb_written": round(
                2 * query_heads * head_dim * cached * dtype.itemsize * layers / 2**20, 1
            ),
            "folded_mb_written": round(query_heads // heads * step * cached / 2**20, 1),
        }
    print(json.dumps(out))
    return out
