"""A KV cache that appends in place: each layer's keys and values live in a preallocated buffer.

``transformers``' ``DynamicLayer`` appends a step by concatenation, which copies the layer's whole
cache at every forward, a cost that grows with the stream (the figures for Qwen3-VL-4B:
docs/performance.md). ``GrowingLayer`` writes the new columns into a buffer
that doubles when full (amortized: each column is copied O(1) times) and hands attention a view of
the filled part, so appending costs the new columns only. ``keep_columns`` compacts in place (the
engine's frame window drops dead columns this way). ``python -m perf kv`` measures both.

    cache = growing_cache(model.config)
    model.model(..., cache=cache, use_cache=True)
"""

from __future__ import annotations

import torch
from transformers import DynamicCache, DynamicLayer

MIN_CAPACITY = 256  # columns of a layer's first buffer


class GrowingLayer(DynamicLayer):
    """One layer's keys and values, ``[batch, heads, capacity, head_dim]`` buffers filled up to
    ``length``; ``keys`` / ``values`` are views of the filled columns."""

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = key_states.device
        self.length = 0
        self._k = key_states.new_empty((*key_states.shape[:-2], 0, key_states.shape[-1]))
        self._v = value_states.new_empty((*value_states.shape[:-2], 0, value_states.shape[-1]))
        self._view()
        self.is_initialized = True

    def _view(self) -> None:
        self.keys = self._k[..., : self.length, :]
        self.values = self._v[..., : self.length, :]

    @property
    def capacity(self) -> int:
        return self._k.shape[-2] if self.is_initialized else 0

    def reserve(self, needed: int) -> None:
        """Make room for ``needed`` columns (nothing before the first append, which sizes the buffer).
        Appending reserves its columns; the engine also reserves a step's before the forward, so a
        compiled forward never grows a buffer (``EngineConfig.compile``)."""
        if not self.is_initialized or needed <= self.capacity:
            return
        size = max(needed, 2 * self.capacity, MIN_CAPACITY)
        for name in ("_k", "_v"):
            old = getattr(self, name)
            new = old.new_empty((*old.shape[:-2], size, old.shape[-1]))
            new[..., : self.length, :] = old[..., : self.length, :]
            setattr(self, name, new)
        self._view()  # the views held the old buffers

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n, m = self.length, key_states.shape[-2]
        self.reserve(n + m)
        self._k[..., n : n + m, :] = key_states
        self._v[..., n : n + m, :] = value_states
        self.length = n + m
        self._view()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length if self.is_initialized else 0

    def keep_columns(self, index: torch.Tensor) -> None:
        """Keep the columns ``index`` (increasing), moved to the front of the buffer, in place."""
        if not self.is_initialized:
            return
        index = index.to(self.device)
        for buf in (self._k, self._v):
            buf[..., : len(index), :] = buf.index_select(-2, index)
        self.length = len(index)
        self._view()

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove > 0:
            raise ValueError(f"crop takes a negative number of tokens to remove, got {tokens_to_remove}")
        if self.is_initialized and tokens_to_remove:
            self.length = max(self.length + tokens_to_remove, 0)
            self._view()

    def reset(self) -> None:
        if self.is_initialized:
            self.length = 0
            self._view()

    def batch_repeat_interleave(self, repeats: int) -> None:
        raise NotImplementedError("GrowingLayer holds a fixed batch; build a new cache for another batch")

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        raise NotImplementedError("GrowingLayer holds a fixed batch; build a new cache for another batch")

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        raise NotImplementedError("GrowingLayer holds a fixed batch; build a new cache for another batch")


def reserve_columns(cache: DynamicCache, needed: int) -> None:
    """Room for ``needed`` columns in each ``GrowingLayer`` of ``cache`` (other layers grow as they do)."""
    for layer in cache.layers:
        if isinstance(layer, GrowingLayer):
            layer.reserve(needed)


def growing_cache(config) -> DynamicCache:
    """A ``DynamicCache`` for ``config`` whose full-attention layers append in place. A model with
    other layer kinds (sliding windows, shared KV) keeps transformers' layers: their semantics differ."""
    cache = DynamicCache(config=config)
    if all(type(layer) is DynamicLayer for layer in cache.layers):
        cache.layers = [GrowingLayer() for _ in cache.layers]
    return cache
