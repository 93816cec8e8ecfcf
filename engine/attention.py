"""Grouped-query attention for a cached streaming step, without repeating the cache.

transformers' SDPA attention, given a mask and a query of more than one token (a streaming step's
chunk against the KV cache), repeats every key/value head once per query head of its group
(``repeat_kv``) before calling the kernel: in Qwen3-VL-4B (32 query heads on 8 key/value heads)
each layer writes 4 copies of its whole cache at every step (the figures: docs/performance.md).
SDPA's own grouped mode (``enable_gqa``) takes no mask on CUDA without falling back to the math kernel.

Here the query heads of a group are folded into the query axis instead: the query
``(batch, heads, q, dim)`` becomes ``(batch, kv_heads, group * q, dim)``, each key/value head is read
as it is, and the mask is repeated ``group`` times along its query axis (once per forward, shared by
the layers): the same scores, the same softmax, a copy of the mask instead of the cache.
``python -m perf kv`` measures both.

The mask of a step of several tokens (:func:`streaming_mask`) is additive, 0 where a query sees a
key and -inf where not, built in two writes from the engine's 2-D mask: the kernel takes it faster
than the boolean mask transformers builds (on CPU at the tiny model's shapes, batch 8 over a
1,000-column cache: 2.3 vs 3.3 ms per layer; the outputs bit-equal), and building it costs one pass
over its elements instead of several.

The engine runs its forwards under :func:`streaming_attention`, which switches a model configured
for ``sdpa`` to this implementation for the duration and back; training is untouched.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import causal_mask_function, sdpa_mask

NAME = "sdpa_streaming"

_folded: list = [None, 0, None]  # the last mask folded, its group size, the folded mask


def _fold_mask(mask: torch.Tensor, group: int) -> torch.Tensor:
    """``mask`` repeated ``group`` times along its query axis; the layers of one forward share it."""
    if _folded[0] is not mask or _folded[1] != group:
        _folded[:] = [mask, group, mask.repeat(1, 1, group, 1)]
    return _folded[2]


def streaming_sdpa(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """SDPA attention; with grouped heads, a mask shared by the heads and a query of several tokens,
    the groups are folded into the query axis (module docstring). Otherwise transformers' SDPA."""
    group = getattr(module, "num_key_value_groups", 1)
    batch, heads, q_length, dim = query.shape
    if (
        group == 1
        or q_length == 1  # transformers already folds a one-token query
        or attention_mask is None
        or attention_mask.dim() != 4
        or attention_mask.shape[1] != 1
        or kwargs.get("position_bias") is not None
        or kwargs.get("softcap") is not None
    ):
        return sdpa_attention_forward(
            module,
            query,
            key,
            value,
            attention_mask,
            dropout=dropout,
            scaling=scaling,
            is_causal=is_causal,
            **kwargs,
        )
    folded = query.reshape(batch, heads // group, group * q_length, dim)
    out = torch.nn.functional.scaled_dot_product_attention(
        folded, key, value, attn_mask=_fold_mask(attention_mask, group), dropout_p=dropout, scale=scaling
    )
    return out.reshape(batch, heads, q_length, dim).transpose(1, 2).contiguous(), None


def streaming_mask(
    batch_size: int,
    q_length: int,
    kv_length: int,
    q_offset: int = 0,
    kv_offset: int = 0,
    mask_function=causal_mask_function,
    attention_mask: torch.Tensor | None = None,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    **kwargs,
) -> torch.Tensor | None:
    """The causal mask of a query of several tokens over the cache and a 2-D padding mask, as an
    additive ``(batch, 1, q_length, kv_length)`` mask of ``dtype``: 0 where query ``i`` (position
    ``q_offset + i``) sees key ``j`` (position ``kv_offset + j``: at or before it, its column set in
    ``attention_mask``), -inf elsewhere; what ``sdpa_mask`` allows, as an additive mask. Any other
    case (one query token, a query with no cache before it, no padding mask, another mask pattern) is
    ``sdpa_mask``'s: that of a first step with no hole it drops, SDPA's causal mode then runs."""
    if (
        q_length == 1
        or kv_length == q_length
        or attention_mask is None
        or attention_mask.dim() != 2
        or mask_function is not causal_mask_function
        or not isinstance(q_offset, int)
        or not isinstance(kv_offset, int)
    ):
        return sdpa_mask(
            batch_size=batch_size,
            q_length=q_length,
            kv_length=kv_length,
            q_offset=q_offset,
            kv_offset=kv_offset,
            mask_function=mask_function,
            attention_mask=attention_mask,
            device=device,
            **kwargs,
        )
    seen = attention_mask[:, kv_offset : kv_offset + kv_length]
    if seen.shape[-1] < kv_length:  # columns past the 2-D mask count as padding
        seen = torch.nn.functional.pad(seen, (0, kv_length - seen.shape[-1]))
    mask = torch.zeros((batch_size, 1, q_length, kv_length), dtype=dtype, device=device)
    mask.masked_fill_((seen == 0)[:, None, None, :], float("-inf"))
    first = max(q_offset + 1 - kv_offset, 0)  # keys before this column precede every query
    if first < kv_length:
        q_pos = torch.arange(q_offset, q_offset + q_length, device=device)
        kv_pos = torch.arange(kv_offset + first, kv_offset + kv_length, device=device)
        mask[..., first:].masked_fill_(kv_pos[None, :] > q_pos[:, None], float("-inf"))
    return mask


AttentionInterface.register(NAME, streaming_sdpa)
AttentionMaskInterface.register(NAME, streaming_mask)  # the masks SDPA takes


@contextmanager
def streaming_attention(model) -> Iterator[None]:
    """Run the language model of ``model`` (a Qwen3-VL) with :func:`streaming_sdpa` if it is
    configured for ``sdpa``; any other implementation is left as it is."""
    config = model.model.language_model.config
    previous = config._attn_implementation
    if previous != "sdpa":
        yield
        return
    config._attn_implementation = NAME
    try:
        yield
    finally:
        config._attn_implementation = previous
        _folded[:] = [None, 0, None]
