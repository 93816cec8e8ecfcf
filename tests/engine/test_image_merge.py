"""Image features merged at known positions: the model's own numbers, no read from the device."""

from __future__ import annotations

import pytest
import torch
import yaml
from torch.profiler import ProfilerActivity, profile
from transformers import DynamicCache, Qwen3VLForConditionalGeneration
from transformers.modeling_outputs import BaseModelOutputWithPooling

from engine.image_merge import deepstack_at, embed_with_images, flat_positions, placeholder_columns
from engine.model import qwen3_vl_config

PAD = 7  # the image placeholder id of the test model
SYNCING = {"aten::nonzero", "aten::_local_scalar_dense"}


@pytest.fixture(scope="module")
def model():
    """The tiny architecture with three text layers and two deepstack layers (the 4B has three)."""
    arch = yaml.safe_load(open("conf/model/tiny.yaml"))["architecture"]
    arch["text_config"].update(num_hidden_layers=3, vocab_size=64)
    arch["vision_config"]["deepstack_visual_indexes"] = [0, 1]
    arch["image_token_id"] = PAD
    torch.manual_seed(0)
    return Qwen3VLForConditionalGeneration(qwen3_vl_config(arch)).eval()


def placeholder_positions(chunks, width: int) -> list[int]:
    return flat_positions([placeholder_columns(c, PAD) for c in chunks], width)


def test_placeholder_positions_run_row_by_row():
    chunks = [[1, PAD, PAD, PAD, 2], [3, 4], [PAD, 5, PAD]]  # row 1 has no frame; row 2 is split
    assert [placeholder_columns(c, PAD) for c in chunks] == [range(1, 4), range(0), [0, 2]]
    assert placeholder_positions(chunks, width=5) == [1, 2, 3, 10, 12]
    assert placeholder_positions([[1, 2]], width=2) == []


def _inputs(width: int = 9):
    """Two right-padded rows: 3 placeholders in row 0, 2 in row 1 (then a pad column); their
    features and two deepstack layers' features (a row per placeholder)."""
    chunks = [[1, 2, PAD, PAD, PAD, 3, 4, 5, 6], [8, PAD, PAD, 9, 10, 11, 12, 13]]
    ids = torch.tensor([c + [0] * (width - len(c)) for c in chunks])
    g = torch.Generator().manual_seed(1)
    pooled = [torch.randn(3, 64, generator=g), torch.randn(2, 64, generator=g)]
    deep = [[torch.randn(3, 64, generator=g), torch.randn(2, 64, generator=g)] for _ in range(2)]
    mask = torch.tensor([[1] * 9, [1] * 8 + [0]])
    return chunks, ids, pooled, deep, mask


def _step(forward, prefix: torch.Tensor, mask: torch.Tensor):
    """``forward(cache, mask)`` for a step after a cached 4-token prefix, as the engine's steps run
    (a query shorter than the cache); returns its hidden states and the syncing ops it ran."""
    lm_cache = DynamicCache()
    full = torch.cat([torch.ones(mask.shape[0], prefix.shape[1], dtype=mask.dtype), mask], dim=1)
    with torch.no_grad():
        forward(prefix, lm_cache, full[:, : prefix.shape[1]], image=False)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            out = forward(None, lm_cache, full, image=True)
    return out, sum(e.name in SYNCING for e in prof.events())


def test_known_positions_give_the_models_own_hidden_states_without_a_sync(model):
    chunks, ids, pooled, deep, mask = _inputs()
    prefix = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]])
    lm = model.model.language_model
    features = BaseModelOutputWithPooling(pooler_output=tuple(pooled))
    features.deepstack_features = [tuple(layer) for layer in deep]
    at = torch.tensor(placeholder_positions(chunks, ids.shape[1]))

    def theirs(first, cache, att, image):
        vision = {"mm_encoder_outputs": {"image": features}} if image else {}
        return model.model(input_ids=ids if image else first, attention_mask=att, cache=cache, **vision)

    def ours(first, cache, att, image, deepstack=True):
        if not image:
            return lm(input_ids=first, attention_mask=att, cache=cache)
        embeds = embed_with_images(lm, ids, at, torch.cat(pooled))
        with deepstack_at(lm, at, [torch.cat(layer) for layer in deep] if deepstack else []):
            return lm(inputs_embeds=embeds, attention_mask=att, cache=cache)

    ref, their_syncs = _step(theirs, prefix, mask)
    out, our_syncs = _step(ours, prefix, mask)
    assert torch.equal(out.last_hidden_state, ref.last_hidden_state)
    # the model's forward: two .item() on the placeholder count (its check, and the check's message),
    # two nonzero per deepstack layer (read, write)
    assert their_syncs == 2 + 2 * 2
    assert our_syncs == 0
    # the deepstack features matter: without them the hidden states differ
    plain, _ = _step(lambda *a, **k: ours(*a, **k, deepstack=False), prefix, mask)
    assert (plain.last_hidden_state - ref.last_hidden_state).abs().max() > 1e-3


def test_deepstack_hooks_leave_with_the_block_even_on_error(model):
    lm = model.model.language_model
    at = torch.tensor([0])
    with pytest.raises(RuntimeError, match="inside"):
        with deepstack_at(lm, at, [torch.zeros(1, 64), torch.zeros(1, 64)]):
            assert all(len(layer._forward_hooks) == 1 for layer in lm.layers[:2])
            raise RuntimeError("inside")
    assert all(not layer._forward_hooks for layer in lm.layers)
    with pytest.raises(ValueError, match="4 deepstack feature sets for a model of 3 layers"):
        with deepstack_at(lm, at, [torch.zeros(1, 64)] * 4):
            pass
