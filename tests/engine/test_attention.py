"""Grouped-query attention folded into the query axis: transformers' SDPA scores, no repeated cache."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import transformers.integrations.sdpa_attention as hf_sdpa
from transformers import masking_utils

from data_builders.config import RenderConfig
from data_builders.frames import stream_frames
from data_builders.record_io import load_streams
from engine import attention
from engine.render import TurnRenderer
from engine.streaming import EngineConfig, StreamingEngine


@pytest.mark.parametrize("q_length", [1, 7])
def test_folded_groups_equal_transformers_sdpa(q_length):
    g = torch.Generator().manual_seed(0)
    module = SimpleNamespace(num_key_value_groups=4, is_causal=True, training=False)
    query = torch.randn(2, 8, q_length, 16, generator=g)
    key, value = torch.randn(2, 2, 20, 16, generator=g), torch.randn(2, 2, 20, 16, generator=g)
    mask = torch.rand(2, 1, q_length, 20, generator=g) > 0.4  # holes, as a batch's pad columns make
    mask[..., 0] = True
    ref, _ = hf_sdpa.sdpa_attention_forward(module, query, key, value, mask, scaling=0.25)
    out, _ = attention.streaming_sdpa(module, query, key, value, mask, scaling=0.25)
    assert out.shape == ref.shape == (2, q_length, 8, 16)
    assert (out - ref).abs().max() < 1e-6


def test_the_streaming_mask_is_transformers_causal_mask_as_an_additive_mask():
    """A chunk of 5 queries over a cache of 9 columns with holes (2 rows), and a 2-D mask shorter
    than the keys: -inf exactly where transformers' boolean mask is False, 0 where True; the same
    attention, bit for bit. A first chunk with no cache (its mask dropped) and a one-token query
    stay transformers'."""
    g = torch.Generator().manual_seed(0)
    padding = (torch.rand(2, 14, generator=g) > 0.3).long()
    padding[:, -5:] = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    for pad, kv in ((padding, 14), (padding[:, :12], 14)):
        args = dict(batch_size=2, q_length=5, kv_length=kv, q_offset=9, attention_mask=pad)
        ref = masking_utils.sdpa_mask(**args, allow_is_causal_skip=True).bool()
        got = attention.streaming_mask(**args, dtype=torch.float32, allow_is_causal_skip=True)
        assert got.dtype == torch.float32 and got.shape == ref.shape == (2, 1, 5, 14)
        assert torch.equal(got == 0, ref) and torch.equal(got[~ref], torch.full_like(got[~ref], -torch.inf))
        assert int((~ref).sum()) > 10  # the causal corner, the holes and the columns past the 2-D mask
        q, k, v = (torch.randn(2, 2, n, 16, generator=g) for n in (5, 14, 14))
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=got)
        assert torch.equal(out, torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=ref))
    first = dict(batch_size=1, q_length=5, kv_length=5, attention_mask=torch.ones(1, 5, dtype=torch.long))
    assert attention.streaming_mask(**first, allow_is_causal_skip=True) is None
    one = dict(batch_size=2, q_length=1, kv_length=14, q_offset=13, attention_mask=padding)
    assert torch.equal(attention.streaming_mask(**one), masking_utils.sdpa_mask(**one))


@pytest.mark.slow  # engine runs at the 4B's attention shapes (24 s loaded)
def test_the_engine_never_repeats_the_cache_and_restores_the_model(
    tiny_model_and_processor, toy_dir, monkeypatch
):
    model, processor = tiny_model_and_processor
    assert model.config.text_config.num_attention_heads // model.config.text_config.num_key_value_heads == 2
    renderer = TurnRenderer(processor, RenderConfig(max_pixels=64 * 64))
    stream = load_streams(toy_dir / "records.jsonl")[0]
    frames = stream_frames(stream, toy_dir / stream.video, renderer.cfg)
    repeats, folds = [], []
    repeat_kv, fold = hf_sdpa.repeat_kv, attention._fold_mask
    monkeypatch.setattr(hf_sdpa, "repeat_kv", lambda *a: repeats.append(1) or repeat_kv(*a))
    monkeypatch.setattr(attention, "_fold_mask", lambda *a: folds.append(1) or fold(*a))
    [res] = StreamingEngine(model, renderer, EngineConfig(threshold=0.47, max_new_tokens=3)).run(
        [stream], [frames]
    )
    layers = model.config.text_config.num_hidden_layers
    assert any(s.fired for s in res.steps)  # the one-token forwards of a reply ran too
    # every layer of every decision forward but the first: step 0 has no cache and no hole, so
    # transformers drops its mask and lets SDPA's grouped causal mode run (no repeat either)
    assert repeats == [] and len(folds) == layers * (len(frames) - 1)
    assert model.config.text_config._attn_implementation == "sdpa"
    # outside the engine (training, the naive reference) transformers' SDPA runs as configured
    ids = torch.tensor([[1, 2, 3, 4]])
    model.model.language_model(input_ids=ids, attention_mask=torch.tensor([[1, 1, 0, 1]]))
    assert repeats and len(folds) == layers * (len(frames) - 1)
