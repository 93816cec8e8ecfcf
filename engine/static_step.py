"""The streaming step over fixed shapes (``EngineConfig.step="static"``): the language model's
forward written as one function of the step's padded tokens and the run's fixed-capacity cache
(:class:`~engine.kv_static.StaticKV`), compiled with ``torch.compile(fullgraph=True)``.

A frame step's chunk is padded to ``bucket`` tokens (a wider chunk, such as the first step with the
system prompt, is fed as several pieces of ``bucket`` tokens); a reply token is a piece of 1. Every
input of the function has a shape fixed by (kind, rows, bucket, capacity): the token ids, the 3-row
M-RoPE positions, the image features dense over the piece (zeros and ``is_image`` false where no
placeholder is; the deepstack features likewise, added after their layers: adding 0 changes
nothing), each row's count of real tokens in the piece, and the write position ``start`` (a
device tensor). Inside, the function writes the piece's keys and values into the buffers at
``start`` (``index_copy_``), marks the real columns valid, and builds the attention mask of the
whole capacity from ``valid`` and the column indices: a query sees the valid columns at or before
its own, and always its own column (a pad query then sees something, so no row of the softmax is
empty and no NaN reaches a buffer). Attention folds the query heads of a group into the query axis,
as ``engine.attention`` does, over the buffers as they are.

Compiled functions are kept per (kind, rows, bucket, capacity), each with its own code object, so
``torch._dynamo`` holds one graph per key and a new key is a first compile, never a recompile:
over a run at a fixed batch no guard fails (``python -m perf static`` counts the graph
breaks and recompiles). On CUDA each compiled function is also captured as a CUDA graph per key
and replayed (:class:`CudaGraphStep`; written for the accelerator, not run on CPU: untested).
"""

from __future__ import annotations

import functools
import time
import types
from collections.abc import Callable

import torch
from transformers.models.qwen3_vl.modeling_qwen3_vl import apply_rotary_pos_emb

from engine.image_merge import placeholder_columns as _placeholders
from infra.registry import Registry


def _attend(attn, x, cos, sin, kbuf, vbuf, cols, mask) -> torch.Tensor:
    """One attention block: the piece's keys and values written at ``cols``, the query attending to
    the whole buffer under ``mask`` (``[rows, 1, group * piece, capacity]``, bool)."""
    rows, width, _ = x.shape
    shape = (rows, width, -1, attn.head_dim)
    q = attn.q_norm(attn.q_proj(x).view(shape)).transpose(1, 2)
    k = attn.k_norm(attn.k_proj(x).view(shape)).transpose(1, 2)
    v = attn.v_proj(x).view(shape).transpose(1, 2)
    q, k = apply_rotary_pos_emb(q, k, cos, sin)
    kbuf.index_copy_(2, cols, k.to(kbuf.dtype))
    vbuf.index_copy_(2, cols, v.to(vbuf.dtype))
    heads, group = q.shape[1], attn.num_key_value_groups
    folded = q.reshape(rows, heads // group, group * width, attn.head_dim)
    out = torch.nn.functional.scaled_dot_product_attention(
        folded, kbuf, vbuf, attn_mask=mask, scale=attn.scaling
    )
    out = out.reshape(rows, heads, width, attn.head_dim).transpose(1, 2).reshape(rows, width, -1)
    return attn.o_proj(out)


def _layers(lm, hidden, pos, keys, values, valid, start, row_len, deepstack) -> torch.Tensor:
    """The decoder layers over a piece, its columns written at ``start``; the final norm applied."""
    width = hidden.shape[1]
    step = torch.arange(width, device=hidden.device)
    cols = start + step
    valid.index_copy_(1, cols, step[None, :] < row_len[:, None])
    every = torch.arange(valid.shape[1], device=hidden.device)
    before = every[None, :] <= cols[:, None]  # piece x capacity
    own = every[None, :] == cols[:, None]
    see = (valid[:, None, :] & before[None]) | own[None]  # rows x piece x capacity
    group = lm.layers[0].self_attn.num_key_value_groups
    mask = see[:, None].repeat(1, 1, group, 1)
    cos, sin = lm.rotary_emb(hidden, pos)
    for i, layer in enumerate(lm.layers):
        x = layer.input_layernorm(hidden)
        hidden = hidden + _attend(layer.self_attn, x, cos, sin, keys[i], values[i], cols, mask)
        hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))
        if i < len(deepstack):
            hidden = hidden + deepstack[i]
    return lm.norm(hidden)


def frame_step(lm, state, ids, pos, start, row_len, image, is_image, deepstack):
    """A piece of a frame step: token embeddings with the image features where ``is_image``.
    ``state``: the run's ``(keys, values, valid)``, written in place."""
    embeds = lm.embed_tokens(ids)
    embeds = torch.where(is_image[..., None], image.to(embeds.dtype), embeds)
    return _layers(lm, embeds, pos, *state, start, row_len, deepstack)


def token_step(lm, state, ids, pos, start, row_len):
    """A piece of a reply token step (no image)."""
    return _layers(lm, lm.embed_tokens(ids), pos, *state, start, row_len, ())


#: The two steps a static-shape run compiles: a frame's (its vision tokens) and a token's.
STEPS = Registry(
    "static step", {"frame": "engine.static_step:frame_step", "token": "engine.static_step:token_step"}
)


@functools.cache
def compiled_step(kind: str, rows: int, width: int, capacity: int, device_type: str) -> Callable:
    """``STEPS[kind]`` under ``torch.compile(fullgraph=True, dynamic=False)`` for one key, with a
    code object of its own (a graph per key, none recompiled: module docstring); on CUDA wrapped in
    a :class:`CudaGraphStep`."""
    base = STEPS[kind]
    name = f"{kind}_step_rows{rows}_width{width}_capacity{capacity}"
    code = base.__code__.replace(co_name=name, co_qualname=name)
    fn = types.FunctionType(code, base.__globals__, name, base.__defaults__, base.__closure__)
    compiled = torch.compile(fn, fullgraph=True, dynamic=False)
    return CudaGraphStep(compiled) if device_type == "cuda" else compiled


class CudaGraphStep:
    """A compiled step captured as a CUDA graph on its first calls and replayed after (UNTESTED: no
    GPU was lent when it was written). The per-call inputs (every argument after ``state``: tensors
    or lists of tensors) are copied into static tensors captured with the graph; ``state`` (the
    run's KV buffers and ``valid``) is the run's own, written in place by the graph, so a capture
    holds for one run's buffers: a run with new buffers captures anew."""

    WARMUP = 2  # eager calls of the compiled function before capture (compiles, autotunes)

    def __init__(self, fn: Callable):
        self.fn = fn
        self.calls = 0
        self.graph = None
        self.owner: tuple[int, ...] | None = None

    def __call__(self, lm, state, *args):
        owner = tuple(t.data_ptr() for t in [*state[0], *state[1], state[2]])
        if self.graph is not None and owner == self.owner:
            for static, new in zip(self.static_in, _flat(args), strict=True):
                static.copy_(new, non_blocking=True)
            self.graph.replay()
            return self.static_out
        self.calls += 1
        if self.calls <= self.WARMUP:
            return self.fn(lm, state, *args)
        return self._capture(lm, state, args, owner)

    def _capture(self, lm, state, args, owner):
        self.static_in = [t.clone() for t in _flat(args)]
        it = iter(self.static_in)
        static_args = [[next(it) for _ in a] if isinstance(a, list | tuple) else next(it) for a in args]
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.static_out = self.fn(lm, state, *static_args)
        self.owner = owner
        self.graph.replay()  # the capture recorded the kernels without running them
        return self.static_out


def _flat(args) -> list[torch.Tensor]:
    return [t for a in args for t in (a if isinstance(a, list | tuple) else [a])]


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to


class StaticStep:
    """The engine's forward with ``step="static"``: a step's chunks padded to pieces of a fixed
    width, each piece one call of :data:`STEPS` (compiled with ``compile``) on the run's
    :class:`~engine.kv_static.StaticKV`. Positions, uploads and the head are the
    :class:`~engine.step_forward.StepForward`'s that owns it."""

    def __init__(self, forward, cfg):
        self.forward = forward  # the StepForward: positions, uploads, head, pad id
        self.cfg = cfg  # the engine's EngineConfig: static_bucket, static_capacity, compile
        self.bucket = cfg.static_bucket

    def _size(self, kv, columns: list, width: int, image) -> None:
        """The frame bucket and the run's capacity, fixed at its first step: a bucket holds a
        frame's placeholders and 32 tokens more; the capacity two windows of buckets past the first
        step (without a window: four first steps), in 256s."""
        if self.bucket is None:
            self.bucket = max(32, _round_up(max(len(c) for c in columns) + 32, 32))
        if kv.capacity:
            return
        first = _round_up(width, self.bucket)
        auto = first + (2 * kv.frame_window + 2) * self.bucket if kv.frame_window else 4 * first
        capacity = self.cfg.static_capacity or _round_up(auto, 256)
        kv.allocate(capacity, self.forward.model.dtype)

    def _dense(self, at: torch.Tensor, rows: int, total: int, image) -> tuple:
        """The image features (and deepstack features) dense over the padded step, and ``is_image``."""
        pooled = torch.cat(image.pooled)
        if len(at) != len(pooled):
            raise ValueError(f"{len(at)} image placeholders for {len(pooled)} image feature rows")
        zeros = pooled.new_zeros((rows * total, pooled.shape[-1]))
        dense = zeros.index_copy(0, at, pooled).view(rows, total, -1)
        deep = [zeros.index_copy(0, at, torch.cat(layer)).view(rows, total, -1) for layer in image.deepstack]
        is_image = torch.zeros(rows * total, dtype=torch.bool, device=at.device).index_fill(0, at, True)
        return dense, is_image.view(rows, total), deep

    def __call__(
        self,
        kv,
        chunks: list[list[int]],
        grids: list,
        image=None,
        decision: bool = False,
        on_device: bool = False,
    ):
        """:meth:`StepForward.__call__`'s contract on a :class:`~engine.kv_static.StaticKV`."""
        f = self.forward
        lengths = [len(c) for c in chunks]
        width, rows = max(lengths), len(chunks)
        image_pad = f.renderer.image_pad_id
        columns = [range(0) if g is None else _placeholders(c, image_pad) for c, g in zip(chunks, grids)]
        self._size(kv, columns, width, image)
        kind = "token" if image is None else "frame"
        piece = 1 if kind == "token" and width == 1 else self.bucket
        total = _round_up(width, piece)
        kv.room(total)
        ids = torch.tensor([c + [f._pad_id] * (total - len(c)) for c in chunks], dtype=torch.int64)
        pos = f.upload(f._row_positions(kv, chunks, grids, columns, total))
        ids = f.upload(ids)
        extra = self._dense(f.flat_positions(columns, total), rows, total, image) if image else None
        t0 = time.thread_time()
        hidden = self._pieces(kv, kind, ids, pos, lengths, piece, extra)
        ends = f.upload(torch.tensor([b * total + max(n - 1, 0) for b, n in enumerate(lengths)]))
        last = hidden.reshape(rows * total, -1).index_select(0, ends)
        logits = f.head(last, decision).float()
        if on_device:  # a reply's tokens are drawn on the device (StepForward.__call__)
            f.seconds += time.thread_time() - t0
            return logits
        logits = logits.cpu()
        f.seconds += time.thread_time() - t0
        if 0 in lengths:
            logits[[b for b, n in enumerate(lengths) if n == 0]] = 0.0
        return logits

    def _pieces(self, kv, kind: str, ids, pos, lengths: list[int], piece: int, extra) -> torch.Tensor:
        """Every piece of the step through the step function; their hidden states side by side."""
        lm = self.forward.model.model.language_model
        rows, total = ids.shape
        fn = STEPS[kind]
        if self.cfg.compile:
            fn = compiled_step(kind, rows, piece, kv.capacity, kv.device.type)
        out = []
        for a in range(0, total, piece):
            z = a + piece
            in_piece = [min(max(n - a, 0), piece) for n in lengths]
            kv.start.fill_(kv.mask_len)
            row_len = self.forward.upload(torch.tensor(in_piece, dtype=torch.int64))
            args = [ids[:, a:z].contiguous(), pos[:, :, a:z].contiguous(), kv.start, row_len]
            if extra is not None:
                dense, is_image, deep = extra
                args += [dense[:, a:z].contiguous(), is_image[:, a:z].contiguous()]
                args.append([d[:, a:z].contiguous() for d in deep])
            out.append(fn(lm, (kv.keys, kv.values, kv.mask_buf), *args).clone())
            kv.wrote(in_piece, piece)
        return out[0] if len(out) == 1 else torch.cat(out, dim=1)
