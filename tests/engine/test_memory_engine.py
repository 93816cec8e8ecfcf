"""Memory in the stream: evidence turns through the KV-cache engine (exact vs the naive re-run, token
record, frame window) and ``eval.run benchmark=propermem memory=on|off`` end to end on the tiny model."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from data_builders.config import RenderConfig
from data_builders.frames import stream_frames
from data_builders.records import HistoryEntry
from data_builders.synthetic.toy import generate_toy
from engine.memory import Memory
from engine.memory.backends import get_backend
from engine.memory.config import MemoryConfig
from engine.memory.embedders import get_embedder
from engine.memory.visual import FramePooler
from engine.naive import NaiveStreamer
from engine.render import TurnRenderer
from engine.streaming import EngineConfig, StreamingEngine

HISTORY = [
    HistoryEntry(-86400.0 * 3, "Marco is my landlord, we met years ago."),
    HistoryEntry(-86400.0 * 2, "The landlord told me to keep the boiler below two bar."),
    HistoryEntry(-3600.0, "I hear the boiler click on in the hallway."),
    HistoryEntry(2.0, "Marco texts me while I stand next to the boiler."),
    HistoryEntry(9.0, "I walk into the kitchen and fill the kettle."),
]


@pytest.fixture(scope="module")
def setup(tiny_model_and_processor, tmp_path_factory):
    model, processor = tiny_model_and_processor
    out = tmp_path_factory.mktemp("toymem")
    streams = [replace(s, history=HISTORY) for s in generate_toy(out, n=2, seed=3, duration=12)]
    renderer = TurnRenderer(processor, RenderConfig(max_pixels=64 * 64, history_budget_tokens=0))
    frames = [stream_frames(s, out / s.video, renderer.cfg) for s in streams]
    return model, processor, renderer, streams, frames


def memory(model, processor, **kw) -> Memory:
    cfg = MemoryConfig(enabled=True, embedder="hashing", query_window_s=4.0, max_items=3, **kw)
    return Memory(cfg, get_embedder("hashing"), get_backend("rule"), FramePooler(model, processor))


@pytest.mark.parametrize("step", ["eager", "static"])
def test_engine_with_memory_matches_naive_with_memory(setup, step):
    """At 0.47 the untrained tiny model fires on about half the steps: silent and response paths.
    The static step too (its pieces take an evidence turn as more tokens of the step's chunk)."""
    model, processor, renderer, streams, frames = setup
    threshold = 0.47
    frames = [f[:8] for f in frames]  # 8 steps: evidence arrives at different steps in the two rows
    cfg = EngineConfig(threshold=threshold, max_new_tokens=4, step=step)
    naive = [
        NaiveStreamer(model, renderer, threshold, 4, memory=memory(model, processor)).run(s, f)
        for s, f in zip(streams, frames, strict=True)
    ]
    batched = StreamingEngine(model, renderer, cfg, memory=memory(model, processor)).run(streams, frames)
    for ref, got in zip(naive, batched, strict=True):
        assert [s.text for s in ref.steps] == [s.text for s in got.steps]
        diff = max(
            abs(a - b)
            for x, y in zip(ref.steps, got.steps)
            for a, b in zip(x.decision_logits, y.decision_logits)
        )
        assert diff < 1e-4


def test_evidence_turns_are_in_the_token_record_before_their_step(setup):
    model, processor, renderer, streams, frames = setup
    mem = memory(model, processor)
    [res] = StreamingEngine(model, renderer, EngineConfig(threshold=0.5), memory=mem).run(
        streams[:1], frames[:1]
    )
    text = renderer.tokenizer.decode(res.tokens)
    turns = text.split("<|im_start|>user\n")[1:]
    evidence = [i for i, t in enumerate(turns) if t.startswith("Evidence:\n")]
    assert evidence and len(turns) == 12 + len(evidence)
    assert all(not turns[i + 1].startswith("Evidence:") for i in evidence)  # each precedes a step's turn
    assert "landlord" in text  # the alias and the instruction reach the model once Marco is in view
    assert text.count("Evidence:") < 12  # appended only when the block changes
    for t, r in [(s.time, mem.last[streams[0].id]) for s in res.steps[-1:]]:
        assert all(h.time <= t for h in r.all_hits())


def test_memory_that_never_speaks_leaves_the_stream_unchanged_and_windows_keep_evidence(setup):
    model, processor, renderer, streams, frames = setup

    class Silent:
        def evidence(self, stream, step_time, frame=None):
            return None

    cfg = EngineConfig(threshold=0.47, max_new_tokens=4)
    frames = [f[:6] for f in frames]
    a = StreamingEngine(model, renderer, cfg).run(streams, frames)
    b = StreamingEngine(model, renderer, cfg, memory=Silent()).run(streams, frames)
    assert [r.tokens for r in a] == [r.tokens for r in b]
    eng = StreamingEngine(
        model, renderer, EngineConfig(threshold=0.5, frame_window=3), memory=memory(model, processor)
    )
    [res] = eng.run(streams[:1], frames[:1])
    assert len(res.steps) == 6 and np.isfinite([s.p_response for s in res.steps]).all()


@pytest.mark.slow
def test_eval_run_propermem_memory_on_and_off(tiny_checkpoint, tmp_path):
    from data_builders.build import build_source
    from data_builders.synthetic.propermem import SynthConfig, generate
    from eval.run import evaluate, load_config

    generate(
        tmp_path / "set",
        SynthConfig(tokens=1500, per_kind=1, negatives=1, clip_s=12.0, window=(6.0, 8.0), videos=True),
    )
    build_source(
        "propermem", tmp_path / "built", annotations=tmp_path / "set" / "clips.jsonl", videos=tmp_path / "set"
    )
    metrics = {}
    for mode in ("off", "on"):
        out = tmp_path / f"eval-{mode}"
        cfg = load_config([
            f"checkpoint={tiny_checkpoint}", f"records={tmp_path / 'built' / 'records.jsonl'}",
            "benchmark=propermem", f"memory={mode}", "memory.embedder=hashing", "memory.query_window_s=4",
            f"paths.cache_dir={tmp_path / 'cache'}", f"paths.runs_dir={tmp_path / 'runs'}", f"out_dir={out}",
            "render.max_pixels=4096", "max_new_tokens=4", "timelines=0",
        ])  # fmt: skip
        metrics[mode] = evaluate(cfg, echo=False)
        saved = json.loads((out / "metrics.json").read_text())
        assert saved["protocol"] == "propermem" and saved == json.loads(json.dumps(metrics[mode]))
        assert len((out / "predictions.jsonl").read_text().splitlines()) == 7
    assert set(metrics["on"]) == set(metrics["off"])
