"""Streaming engine vs the naive full re-run: same decisions, same logits; windows; frame sharing."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch
from torch._dynamo.utils import counters

from data_builders.config import RenderConfig
from data_builders.frames import stream_frames
from data_builders.records import Stream
from engine.frame_features import FrameFeatures
from engine.kv_window import KVWindow
from engine.naive import NaiveStreamer
from engine.render import TurnRenderer
from engine.step_forward import compiled_graphs
from engine.streaming import EngineConfig, StreamingEngine
from tests.engine.conftest import max_logit_diff


# The untrained tiny model sits near P(response) = 0.47; 0.47 makes it fire on about half the steps,
# so both the silent path and response decoding are compared.
# 0.47 is slow: the naive reference re-prefills every past frame and reply at each of 3 x 40 steps and
# decodes a reply at half of them (164 s on a loaded 2-core machine, 33 s for 0.5)
@pytest.mark.parametrize("threshold", [0.5, pytest.param(0.47, marks=pytest.mark.slow)])
def test_engine_matches_naive_single_and_batched(setup, threshold):
    model, renderer, streams, frames = setup
    cfg = EngineConfig(threshold=threshold, max_new_tokens=6)
    naive = [
        NaiveStreamer(model, renderer, threshold, max_new_tokens=6).run(s, f) for s, f in zip(streams, frames)
    ]
    single = [StreamingEngine(model, renderer, cfg).run([s], [f])[0] for s, f in zip(streams, frames)]
    batched = StreamingEngine(model, renderer, cfg).run(streams, frames)
    fires = 0
    for ref, one, many in zip(naive, single, batched):
        assert len(ref.steps) == len(one.steps) == len(many.steps) == 40
        assert [s.text for s in ref.steps] == [s.text for s in one.steps] == [s.text for s in many.steps]
        assert max_logit_diff(ref, one) < 1e-4
        assert max_logit_diff(ref, many) < 1e-4
        fires += sum(s.fired for s in ref.steps)
    assert (fires == 0) == (threshold == 0.5)


def test_token_record_is_the_conversation(setup):
    model, renderer, streams, frames = setup
    [res] = StreamingEngine(model, renderer, EngineConfig(threshold=0.47, max_new_tokens=6)).run(
        streams[:1], frames[:1]
    )
    text = renderer.tokenizer.decode(res.tokens)
    assert text.count("<|im_start|>user") == 40 and text.count("<|im_start|>assistant") == 40
    assert len(res.tokens) == len(res.generated)
    assert sum(res.generated) == len(res.logprobs)
    n = len(renderer.assistant_open)
    decisions = [
        t
        for i, (t, g) in enumerate(zip(res.tokens, res.generated))
        if g and res.tokens[i - n : i] == renderer.assistant_open
    ]
    assert len(decisions) == 40 and set(decisions) == {renderer.silence_id, renderer.response_id}
    assert all(lp <= 0.0 for lp in res.logprobs)


def test_frame_window_bounds_the_cache(setup):
    model, renderer, streams, frames = setup
    full = StreamingEngine(model, renderer, EngineConfig())
    full_res = full.run(streams, frames)
    same = StreamingEngine(model, renderer, EngineConfig(frame_window=40))
    assert [s.text for s in same.run(streams, frames)[0].steps] == [s.text for s in full_res[0].steps]
    long_frames = np.concatenate([frames[0]] * 3)
    long = Stream(**{**streams[0].__dict__, "clip_end": 120.0, "targets": []})
    lengths = {}
    for n in (60, 120):
        eng = StreamingEngine(model, renderer, EngineConfig(frame_window=8))
        res = eng.run([long], [long_frames[:n]])[0]
        assert len(res.steps) == n and all(np.isfinite(s.p_response) for s in res.steps)
        lengths[n] = eng.cache_length()
    # flat memory: only the timestamps' extra digits ("<119.0 seconds>") may add a token or two
    assert lengths[60] <= lengths[120] <= lengths[60] + 4 < full.cache_length()


def test_compaction_in_place_changes_no_decision(setup, monkeypatch):
    """A frame window drops dead columns from the cache in place (``GrowingLayer.keep_columns``):
    the same decisions and logits as leaving every evicted column in the cache, masked."""
    model, renderer, streams, frames = setup
    long = Stream(**{**streams[0].__dict__, "clip_end": 80.0, "targets": []})
    long_frames = np.concatenate([frames[0]] * 2)
    cfg = EngineConfig(threshold=0.47, max_new_tokens=4, frame_window=6)
    compacted = StreamingEngine(model, renderer, cfg)
    [a] = compacted.run([long], [long_frames])
    kept = compacted.cache_length()
    monkeypatch.setattr(KVWindow, "compact", lambda self: setattr(self, "dead", 0))
    masked = StreamingEngine(model, renderer, cfg)
    [b] = masked.run([long], [long_frames])
    assert len(a.steps) == 80 and 0 < sum(s.fired for s in a.steps) < 80
    assert [s.text for s in a.steps] == [s.text for s in b.steps]
    assert max_logit_diff(a, b) < 1e-5
    assert 2 * kept < 1.1 * masked.cache_length()  # evicted frames left the compacted cache


@pytest.mark.slow  # four compiled graphs on CPU (30-39 s)
def test_compiled_forward_streams_the_same_in_four_graphs(setup):
    """``EngineConfig.compile``: the eager engine's decisions and replies, logits within 1e-4, for one
    stream and a batch, firing and windowed (compaction included); the graphs a run needs are built
    once, four of them (a frame step and a reply token, for a batch of one and of more), and a
    second run builds none, nor does a copy of the model with other weights, which runs its own."""
    model, renderer, streams, frames = setup
    torch._dynamo.reset()
    counters.clear()
    cfg = EngineConfig(threshold=0.47, max_new_tokens=4, frame_window=6)
    compiled_cfg = dataclasses.replace(cfg, compile=True)
    eager = {}
    for rows in (1, 3):
        eager[rows] = StreamingEngine(model, renderer, cfg).run(streams[:rows], frames[:rows])
        compiled = StreamingEngine(model, renderer, compiled_cfg).run(streams[:rows], frames[:rows])
        for a, b in zip(eager[rows], compiled, strict=True):
            assert 0 < sum(s.fired for s in a.steps) < 40
            assert [s.text for s in a.steps] == [s.text for s in b.steps]
            assert max_logit_diff(a, b) < 1e-4
            assert a.tokens == b.tokens
    assert compiled_graphs() == 4
    StreamingEngine(model, renderer, compiled_cfg).run(streams, frames)
    assert compiled_graphs() == 4
    # a copy of the compiled model with other weights (GRPO's policy, a ref model) runs its own
    other = copy.deepcopy(model)
    with torch.no_grad():
        other.model.language_model.norm.weight.mul_(2.0)
    other_eager = StreamingEngine(other, renderer, cfg).run(streams[:3], frames[:3])
    compiled = StreamingEngine(other, renderer, compiled_cfg).run(streams[:3], frames[:3])
    assert max(max_logit_diff(a, b) for a, b in zip(other_eager, compiled, strict=True)) < 1e-4
    # the model's own eager run of these 3 streams (above) differs: the copy's weights are its own
    assert min(max_logit_diff(a, b) for a, b in zip(other_eager, eager[3], strict=True)) > 0.1
    assert compiled_graphs() == 4


def test_a_silent_step_reads_two_rows_of_the_head(setup):
    """The decision needs the silence and response logits only: a silent stream never runs the
    whole vocabulary head; a fired turn's text does."""
    model, renderer, streams, frames = setup
    calls = []
    hook = model.lm_head.register_forward_hook(lambda module, args, out: calls.append(out.shape[-1]))
    try:
        StreamingEngine(model, renderer, EngineConfig(threshold=2.0)).run(streams[:1], frames[:1])
        assert calls == []
        [res] = StreamingEngine(model, renderer, EngineConfig(threshold=0.47, max_new_tokens=3)).run(
            streams[:1], frames[:1]
        )
    finally:
        hook.remove()
    fired = sum(s.fired for s in res.steps)
    assert fired > 0 and len(calls) >= fired and set(calls) == {model.lm_head.out_features}


def test_shared_frames_are_encoded_once(setup):
    model, renderer, streams, frames = setup
    group = StreamingEngine(model, renderer, EngineConfig(sample=True, seed=3))
    group.run([streams[0]] * 4, [frames[0]] * 4)
    assert group.frames_encoded == 40
    separate = StreamingEngine(model, renderer, EngineConfig(sample=True, seed=3))
    separate.run([streams[0]] * 4, [frames[0].copy() for _ in range(4)])
    assert separate.frames_encoded == 160


def test_sampling_is_seeded(setup):
    model, renderer, streams, frames = setup
    runs = [
        StreamingEngine(model, renderer, EngineConfig(sample=True, seed=7, max_new_tokens=3)).run(
            streams[:2], frames[:2]
        )
        for _ in range(2)
    ]
    assert [[s.text for s in r.steps] for r in runs[0]] == [[s.text for s in r.steps] for r in runs[1]]
    assert any(s.fired for r in runs[0] for s in r.steps) and not all(
        s.fired for r in runs[0] for s in r.steps
    )


def test_frames_are_prepared_a_chunk_at_a_time(setup, monkeypatch):
    """The frame prep and the vision tower see ``frame_chunk`` frames at a time, when the stream
    reaches them, never the whole stream up front; any chunk size gives the same decisions."""
    model, renderer, streams, frames = setup
    reference = StreamingEngine(model, renderer, EngineConfig(threshold=0.47, max_new_tokens=4)).run(
        streams[:2], frames[:2]
    )
    sizes = []
    pixels = FrameFeatures.pixels
    monkeypatch.setattr(FrameFeatures, "pixels", lambda self, f: sizes.append(len(f)) or pixels(self, f))
    engine = StreamingEngine(model, renderer, EngineConfig(threshold=0.47, max_new_tokens=4, frame_chunk=6))
    chunked = engine.run(streams[:2], frames[:2])
    assert sizes == [6] * 6 * 2 + [4] * 2  # 40 steps = 6 chunks of 6 + one of 4, per stream
    assert engine.frames_encoded == 80
    for a, b in zip(reference, chunked):
        assert [s.text for s in a.steps] == [s.text for s in b.steps]
        assert max_logit_diff(a, b) < 1e-4


def test_frames_prepared_on_the_device_stream_as_the_processor_s(setup, monkeypatch):
    """The default frame prep (uint8 frames up, prepared in torch) never calls the processor and
    gives the same decisions and logits as the processor on the host (``frame_prep="host"``)."""
    model, renderer, streams, frames = setup
    calls = []
    encode = renderer.encode_frames
    monkeypatch.setattr(renderer, "encode_frames", lambda f: calls.append(len(f)) or encode(f))
    host = StreamingEngine(model, renderer, EngineConfig(threshold=0.47, max_new_tokens=4, frame_prep="host"))
    on_host = host.run(streams[:2], frames[:2])
    assert host.vision.prep is None and sum(calls) == 80
    calls.clear()
    device = StreamingEngine(model, renderer, EngineConfig(threshold=0.47, max_new_tokens=4))
    on_device = device.run(streams[:2], frames[:2])
    assert device.vision.prep is not None and calls == [] and device.frames_encoded == 80
    for a, b in zip(on_host, on_device):
        assert [s.text for s in a.steps] == [s.text for s in b.steps]
        assert max_logit_diff(a, b) == 0.0
    with pytest.raises(ValueError, match="frame_prep must be one of device, host, got 'gpu'"):
        StreamingEngine(model, renderer, EngineConfig(frame_prep="gpu"))


def test_the_project_s_vision_call_streams_as_transformers_s(setup, monkeypatch):
    """The default vision call (``engine.vision_tower``: a plan per chunk shape, one attention call
    per block) gives the decisions and logits of transformers' ``get_image_features``, which it no
    longer calls; one plan serves every full chunk of a run."""
    model, renderer, streams, frames = setup
    cfg = EngineConfig(threshold=0.47, max_new_tokens=4, frame_chunk=16)
    old = StreamingEngine(model, renderer, dataclasses.replace(cfg, vision="transformers")).run(
        streams[:2], frames[:2]
    )
    calls = []
    features = model.model.get_image_features
    monkeypatch.setattr(
        model.model, "get_image_features", lambda *a, **k: calls.append(1) or features(*a, **k)
    )
    engine = StreamingEngine(model, renderer, cfg)
    new = engine.run(streams[:2], frames[:2])
    assert calls == [] and engine.frames_encoded == 80
    # 40 steps of 2 streams in lock step: chunks of 2 x 16, 2 x 16, 2 x 8 frames: two grid lists
    assert len(engine.vision.plans.plans) == 2
    for a, b in zip(old, new):
        assert [s.text for s in a.steps] == [s.text for s in b.steps]
        assert max_logit_diff(a, b) < 1e-6
    with pytest.raises(ValueError, match="vision must be one of project, transformers, got 'hf'"):
        StreamingEngine(model, renderer, EngineConfig(vision="hf"))


def test_memory_mapped_frames_stream_the_same_and_are_released(setup, tmp_path):
    """Frames as a FrameCache hit arrives (memory-mapped, copy on write): the same decisions as
    in-memory frames, and once streamed their pages are no longer resident in the process."""
    model, renderer, streams, frames = setup
    long = Stream(**{**streams[0].__dict__, "clip_end": 120.0, "targets": []})
    in_memory = np.concatenate([frames[0]] * 3)
    np.save(tmp_path / "frames.npy", in_memory)
    mapped = np.load(tmp_path / "frames.npy", mmap_mode="c")
    cfg = EngineConfig(threshold=0.5, frame_window=8)
    [a] = StreamingEngine(model, renderer, cfg).run([long], [in_memory])
    [b] = StreamingEngine(model, renderer, cfg).run([long], [mapped])
    assert [s.text for s in a.steps] == [s.text for s in b.steps] and len(b.steps) == 120
    assert max_logit_diff(a, b) < 1e-6
    assert _resident_pages(mapped) <= 2  # at most the partial pages at the array's two ends
    assert np.array_equal(mapped, in_memory)  # released pages read back from the file


def _resident_pages(array: np.ndarray) -> int:
    """Pages of ``array`` resident in this process (``/proc/self/pagemap`` bit 63)."""
    import mmap

    page = mmap.PAGESIZE
    start = array.__array_interface__["data"][0] // page
    n = -(-(array.__array_interface__["data"][0] + array.nbytes) // page) - start
    with open("/proc/self/pagemap", "rb") as fh:
        fh.seek(start * 8)
        entries = np.frombuffer(fh.read(n * 8), dtype="<u8")
    return int(((entries >> np.uint64(63)) & np.uint64(1)).sum())


def test_step_timings_split_each_step(tiny_model_and_processor, toy_dir):
    """Every step records its CPU time and, inside it, the language model's and the vision call's:
    what the bench reports as the engine's own host work is the rest."""
    from data_builders.record_io import load_streams
    from engine.streaming import EngineConfig, StreamingEngine

    model, processor = tiny_model_and_processor
    renderer = TurnRenderer(processor, RenderConfig(max_pixels=64 * 64))
    stream = load_streams(toy_dir / "records.jsonl")[0]
    frames = stream_frames(stream, toy_dir / stream.video, renderer.cfg)
    engine = StreamingEngine(model, renderer, EngineConfig(threshold=2.0, frame_chunk=5))
    engine.run([stream], [frames])
    assert len(engine.step_timings) == len(frames) == 20
    assert all(cpu >= lm + vision and lm > 0 for cpu, lm, vision in engine.step_timings)
    assert [vision > 0 for _, _, vision in engine.step_timings] == [k % 5 == 0 for k in range(20)]
