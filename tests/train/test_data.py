"""SFT data: windows of a built split through the frame cache, and the right-padding collator (a padded
row gives the same logits as the row alone)."""

from __future__ import annotations

import pytest
import torch

from data_builders.config import RenderConfig
from data_builders.frame_cache import FrameCache
from data_builders.record_io import load_streams, write_jsonl
from data_builders.splits import split_records
from engine.render import TurnRenderer
from train.sft.data import StreamWindowDataset, WindowCollator


@pytest.fixture(scope="module")
def dataset(tiny_model_and_processor, toy_dir, tmp_path_factory):
    _, processor = tiny_model_and_processor
    renderer = TurnRenderer(processor, RenderConfig(max_pixels=64 * 64))
    cache = FrameCache(tmp_path_factory.mktemp("frames"))
    return StreamWindowDataset.from_split(toy_dir, renderer, cache, window_steps=8), cache


def test_windows_and_items(dataset):
    ds, cache = dataset
    n = len(load_streams(ds.records_path))
    assert len(ds) == 3 * n  # 20 steps in windows of 8: [0, 8), [8, 16), [16, 20)
    item = ds[2]
    assert set(item) == {
        "input_ids",
        "attention_mask",
        "labels",
        "decision_mask",
        "mm_token_type_ids",
        "pixel_values",
        "image_grid_thw",
    }
    assert item["image_grid_thw"].shape == (4, 3)  # the last window has 4 steps
    assert int((item["decision_mask"] >= 0).sum()) == 4
    assert ds[2] is item  # kept rendered
    assert cache.misses >= 1


def test_blank_frames_are_uniform(dataset):
    ds, cache = dataset
    blank = StreamWindowDataset(
        ds.streams, ds.records_path, ds.renderer, cache, blank_frames=True, window_steps=8
    )
    frames = blank.frames(0)
    assert frames.shape == ds.frames(0).shape and int(frames.min()) == int(frames.max()) == 128


def test_split_records_names_the_build_command(tmp_path):
    with pytest.raises(FileNotFoundError, match="data_builders build source=toy"):
        split_records(tmp_path)
    write_jsonl(tmp_path / "records.jsonl", [])
    assert split_records(tmp_path) == tmp_path / "records.jsonl"


def test_collator_pads_right_and_concatenates_frames(dataset, tiny_model_and_processor):
    ds, _ = dataset
    model, processor = tiny_model_and_processor
    pad = processor.tokenizer.pad_token_id
    a, b = ds[1], ds[2]  # an 8-step and a 4-step window
    batch = WindowCollator(pad)([a, b])
    la, lb = a["input_ids"].numel(), b["input_ids"].numel()
    assert la > lb and batch["input_ids"].shape == (2, la)
    assert torch.equal(batch["input_ids"][1, lb:], torch.full((la - lb,), pad))
    assert batch["attention_mask"][1].tolist() == [1] * lb + [0] * (la - lb)
    assert (batch["labels"][1, lb:] == -100).all() and (batch["decision_mask"][1, lb:] == -1).all()
    assert (batch["mm_token_type_ids"][1, lb:] == 0).all()
    assert torch.equal(batch["pixel_values"], torch.cat([a["pixel_values"], b["pixel_values"]]))
    assert batch["image_grid_thw"].shape == (12, 3)
    inputs = {k: v for k, v in batch.items() if k not in ("labels", "decision_mask")}
    alone = {k: v[None] if v.dim() == 1 and k not in ("pixel_values",) else v for k, v in b.items()}
    alone = {k: v for k, v in alone.items() if k not in ("labels", "decision_mask")}
    with torch.no_grad():
        both = model(**inputs).logits
        single = model(**alone).logits
    assert torch.allclose(both[1, :lb], single[0], atol=1e-5)


def test_stages_read_what_the_frames_stage_cached(tiny_model_and_processor, toy_dir, tmp_path):
    """``python -m data_builders frames`` fills paths.frame_cache_dir; SFT windows, GRPO windows and
    evaluation then read every frame from it: not one clip is decoded again."""
    from data_builders.frames import cache_frames, stream_frames
    from data_builders.record_io import resolve_video
    from engine.streaming import EngineConfig, stream_batches

    _, processor = tiny_model_and_processor
    render = RenderConfig(max_pixels=64 * 64)
    records = toy_dir / "records.jsonl"
    streams = load_streams(records)
    summary = cache_frames(toy_dir, tmp_path / "frames", render=render, workers=1, progress=False)
    assert summary["clips"] == len(streams) and summary["failed"] == 0
    cache = FrameCache(tmp_path / "frames")
    renderer = TurnRenderer(processor, render)
    sft = StreamWindowDataset.from_split(toy_dir, renderer, cache, window_steps=8)
    for i in range(len(sft)):
        sft[i]
    grpo = {s.id: stream_frames(s, resolve_video(s, records), render, 1.0, cache) for s in streams}
    assert all(len(f) == 20 for f in grpo.values())
    model, _ = tiny_model_and_processor
    batches = stream_batches(model, renderer, streams[:2], records, EngineConfig(), batch_size=2, cache=cache)
    assert sum(len(b) for b, _ in batches) == 2
    assert cache.misses == 0 and cache.hits == len(sft) + len(streams) + 2
