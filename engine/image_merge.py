"""A streaming step's image features merged at positions the engine knows, with no read from the device.

Qwen3-VL's forward in transformers (the pinned version: docs/performance.md) finds a step's image placeholders on the device: it checks
their count against the features (two ``.item()``: the check, and its error message, formatted
whether the check fails or not), scatters the features into the embeddings by a boolean mask, and
adds each deepstack layer's features to the hidden states by boolean-mask indexing, once to read
and once to write (two ``nonzero``). On a GPU each of these makes the host wait for the device:
8 times per step in Qwen3-VL-4B (3 deepstack layers), so the host cannot queue the rest of the
step's layers while the first ones run.

The engine built the step's chunk itself, so it knows where the placeholders are: it uploads their
flat positions (``row * chunk width + column``, :func:`flat_positions`) and calls the language model with

- the token embeddings, the pooled features copied in at those positions (:func:`embed_with_images`),
- :func:`deepstack_at` around the call: a forward hook on each of the first deepstack layers adds
  that layer's features at the same positions, after the layer, as the model's own forward does.

Same arithmetic (a copy, then one addition per feature), so the same numbers;
``tests/engine/test_image_merge.py`` checks them against the model's own forward.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch


def placeholder_columns(chunk: Sequence[int], pad_id: int) -> Sequence[int]:
    """The columns of ``chunk``'s ``pad_id`` tokens: a ``range`` when they run in one block (a
    frame's placeholders; empty when there are none), else the list of columns."""
    if pad_id not in chunk:
        return range(0)
    first, n = chunk.index(pad_id), chunk.count(pad_id)
    if chunk[first + n - 1] == pad_id:
        return range(first, first + n)
    return [i for i, t in enumerate(chunk) if t == pad_id]


def flat_positions(columns: Sequence[Sequence[int]], width: int) -> list[int]:
    """Flat positions (``row * width + column``) of each row's columns (:func:`placeholder_columns`
    of right-padded chunks ``width`` wide), row by row: the order in which the rows' features are
    concatenated."""
    flat: list[int] = []
    for b, cols in enumerate(columns):
        base = b * width
        if isinstance(cols, range):
            flat.extend(range(base + cols.start, base + cols.stop))
        else:
            flat.extend(base + c for c in cols)
    return flat


def embed_with_images(
    language_model, ids: torch.Tensor, at: torch.Tensor, pooled: torch.Tensor
) -> torch.Tensor:
    """Token embeddings of ``ids`` (rows x width) with the rows of ``pooled`` copied in at the flat
    positions ``at`` (one feature row per position)."""
    embeds = language_model.embed_tokens(ids)
    flat = embeds.view(-1, embeds.shape[-1])
    return flat.index_copy(0, at, pooled.to(embeds.dtype)).view_as(embeds)


@contextmanager
def deepstack_at(language_model, at: torch.Tensor, features: Sequence[torch.Tensor]) -> Iterator[None]:
    """While inside, decoder layer ``j`` of ``language_model`` adds ``features[j]`` to its output's
    rows at the flat positions ``at`` (the model's deepstack step, without boolean indexing)."""

    def adder(layer_features: torch.Tensor):
        def hook(module, args, output: torch.Tensor) -> torch.Tensor:
            flat = output.view(-1, output.shape[-1])
            return flat.index_add(0, at, layer_features.to(output.dtype)).view_as(output)

        return hook

    layers = language_model.layers
    if len(features) > len(layers):
        raise ValueError(f"{len(features)} deepstack feature sets for a model of {len(layers)} layers")
    handles = [layers[j].register_forward_hook(adder(f)) for j, f in enumerate(features)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
