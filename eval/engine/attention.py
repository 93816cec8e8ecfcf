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
``python -m eval.bench kv`` measures both.

The engine runs its forwards under :func:`streaming_attention`, which switches a model configured
for ``sdpa`` to this implementation for the duration and back; training is untouched.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import sdpa_mask

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


AttentionInterface.register(NAME, streaming_sdpa)
AttentionMaskInterface.register(NAME, sdpa_mask)  # the masks SDPA takes


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
