"""The in-place KV cache: the same keys and values as concatenation, without copying the cache; and
the attention mask's buffer (``engine.kv_window``)."""

from __future__ import annotations

import torch
from transformers import DynamicLayer

from engine.kv_cache import MIN_CAPACITY, GrowingLayer, growing_cache, reserve_columns
from engine.kv_window import KVWindow


def _steps(n: int, width: int, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [
        (torch.randn(2, 3, width, 4, generator=g), torch.randn(2, 3, width, 4, generator=g)) for _ in range(n)
    ]


def test_appends_equal_concatenation_and_write_in_place_until_the_buffer_doubles():
    grow, ref = GrowingLayer(), DynamicLayer()
    seen = []  # (capacity, buffer address) after each append
    for k, v in _steps(40, 30):
        keys, values = grow.update(k, v)
        ref_keys, ref_values = ref.update(k, v)
        assert torch.equal(keys, ref_keys) and torch.equal(values, ref_values)
        seen.append((grow.capacity, grow._k.data_ptr()))
    assert grow.get_seq_length() == ref.get_seq_length() == 1200
    # 1,200 columns in 40 appends: the buffer was allocated 4 times (256, 512, 1024, 2048), not 40;
    # between two allocations every append wrote into the same buffer
    assert [c for c, _ in dict.fromkeys(seen)] == [MIN_CAPACITY, 512, 1024, 2048]
    # the keys attention reads are a view of the buffer, not a copy
    assert keys.data_ptr() == grow._k.data_ptr()


def test_keep_columns_compacts_in_place_and_appending_continues():
    grow, ref = GrowingLayer(), DynamicLayer()
    for k, v in _steps(10, 25):
        grow.update(k, v)
        ref.update(k, v)
    index = torch.tensor([0, 3, 4, 50, 51, 52, 200, 249])
    buffer = grow._k.data_ptr()
    grow.keep_columns(index)
    assert grow._k.data_ptr() == buffer and grow.get_seq_length() == 8
    assert torch.equal(grow.keys, ref.keys.index_select(-2, index))
    assert torch.equal(grow.values, ref.values.index_select(-2, index))
    [(k, v)] = _steps(1, 5, seed=1)
    keys, values = grow.update(k, v)
    assert torch.equal(keys, torch.cat([ref.keys.index_select(-2, index), k], dim=-2))
    assert torch.equal(values, torch.cat([ref.values.index_select(-2, index), v], dim=-2))


def test_crop_and_reset_keep_the_length_and_the_views_together():
    grow = GrowingLayer()
    for k, v in _steps(3, 10):
        grow.update(k, v)
    grow.crop(-7)
    assert grow.get_seq_length() == 23 and grow.keys.shape[-2] == 23
    grow.reset()
    assert grow.get_seq_length() == 0 and grow.keys.shape[-2] == 0


def test_growing_cache_replaces_every_full_attention_layer(tiny_model_and_processor):
    model, _ = tiny_model_and_processor
    cache = growing_cache(model.config)
    assert len(cache.layers) == model.config.text_config.num_hidden_layers
    assert all(type(layer) is GrowingLayer for layer in cache.layers)


def test_reserved_columns_are_appended_without_growing(tiny_model_and_processor):
    """The engine reserves a step's columns before a compiled forward: no buffer grows inside it."""
    model, _ = tiny_model_and_processor
    cache = growing_cache(model.config)
    reserve_columns(cache, 1000)  # before the first append: nothing to size yet
    assert all(layer.capacity == 0 for layer in cache.layers)
    for layer in cache.layers:
        layer.update(*_steps(1, 30)[0])
    reserve_columns(cache, 700)
    buffers = [layer._k.data_ptr() for layer in cache.layers]
    assert [layer.capacity for layer in cache.layers] == [700] * len(cache.layers)
    for k, v in _steps(22, 30):
        for layer in cache.layers:
            layer.update(k, v)
    assert [layer._k.data_ptr() for layer in cache.layers] == buffers
    assert all(layer.get_seq_length() == 690 for layer in cache.layers)


def test_the_mask_reads_1_for_columns_appended_by_value_after_padding_a_rewind_and_growth(
    tiny_model_and_processor,
):
    """Past its end the mask buffer holds 1, so appending by value only moves the end: columns a
    rewind dropped (padding zeros among them) and a grown buffer must not leak into it."""
    model, _ = tiny_model_and_processor
    kv = KVWindow(model.config, 2, torch.device("cpu"), None)
    kv.append_mask(torch.tensor([[1, 1, 1], [1, 0, 0]]), 3)  # row 1 padded
    mark = kv.mark()
    kv.append_mask(torch.tensor([[1, 0], [0, 0]]), 2)  # a branch with padding, dropped below
    kv.rewind(mark)
    kv.append_mask(1, 4)
    assert kv.mask.tolist() == [[1, 1, 1, 1, 1, 1, 1], [1, 0, 0, 1, 1, 1, 1]]
    kv.append_mask(0, 2)  # a value other than 1 is written
    kv.append_mask(1, 300)  # past the first buffer of 256 columns: it grows
    assert kv.mask_buf.shape[1] > 256
    expected = [[1] * 7 + [0, 0] + [1] * 300, [1, 0, 0] + [1] * 4 + [0, 0] + [1] * 300]
    assert kv.mask.tolist() == expected
    assert bool((kv.mask_buf[:, kv.mask_len :] == 1).all())
