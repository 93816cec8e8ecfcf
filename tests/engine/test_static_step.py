"""``EngineConfig.step="static"``: a fixed-capacity cache and fixed-shape steps give the naive
re-run's decisions and logits, read nothing back from the device in a silent step, and compile
to one graph per (kind, rows, piece, capacity) with no graph break and no recompile."""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import pytest
import torch
from torch._dynamo.utils import counters

from data_builders.records import Stream
from engine import step_choice
from engine.kv_static import StaticKV
from engine.naive import NaiveStreamer
from engine.probes import Probe, answer_probes
from engine.static_step import compiled_step
from engine.step_choice import resolve_step
from engine.streaming import EngineConfig, StreamingEngine
from perf.static import silent_reads
from tests.engine.conftest import max_logit_diff


def _same(a, b) -> None:
    assert [s.text for s in a.steps] == [s.text for s in b.steps]
    assert max_logit_diff(a, b) < 1e-4
    assert a.tokens == b.tokens


def test_static_steps_match_the_naive_rerun_at_batch_1_and_unequal_lengths(setup):
    """Float32: decisions equal to the naive re-run's, logits within 1e-4, for one stream and for a
    batch whose rows have 24, 17 and 11 steps (rows stop early; their pieces are all padding)."""
    model, renderer, streams, frames = setup
    cuts = [frames[0][:24], frames[1][:17], frames[2][:11]]
    cfg = EngineConfig(threshold=0.47, max_new_tokens=4, step="static")
    naive = [NaiveStreamer(model, renderer, 0.47, max_new_tokens=4).run(s, f) for s, f in zip(streams, cuts)]
    [one] = StreamingEngine(model, renderer, cfg).run(streams[:1], cuts[:1])
    engine = StreamingEngine(model, renderer, cfg)
    batch = engine.run(streams, cuts)
    assert isinstance(engine.kv, StaticKV)
    assert [s.text for s in naive[0].steps] == [s.text for s in one.steps]
    assert max_logit_diff(naive[0], one) < 1e-4
    for ref, got, n in zip(naive, batch, (24, 17, 11), strict=True):
        assert len(got.steps) == n
        assert [s.text for s in ref.steps] == [s.text for s in got.steps]
        assert max_logit_diff(ref, got) < 1e-4
    assert 0 < sum(s.fired for r in naive for s in r.steps) < 52


def test_static_window_compaction_and_growth_stream_as_the_eager_engine(setup):
    """A frame window (eviction, compaction by a gather) and a capacity too small for the kept
    replies (it doubles): the eager engine's tokens, decisions and logits, batch 1 and 3."""
    model, renderer, streams, frames = setup
    cfg = EngineConfig(threshold=0.47, max_new_tokens=4, frame_window=6)
    static = dataclasses.replace(cfg, step="static", static_capacity=256)
    for rows in (slice(0, 1), slice(0, 3)):
        eager = StreamingEngine(model, renderer, cfg).run(streams[rows], frames[rows])
        engine = StreamingEngine(model, renderer, static)
        got = engine.run(streams[rows], frames[rows])
        for a, b in zip(eager, got, strict=True):
            assert 0 < sum(s.fired for s in a.steps) < 40
            _same(a, b)
        assert engine.kv.capacity > 256  # grew once the kept replies filled it
        assert not engine.kv.alive[:, engine.kv.mask_len :].any()


def test_a_silent_static_step_reads_nothing_back(setup):
    """Counted by a dispatch mode (``perf.static``): the eager engine's compactions read the
    mask back (``bool``, ``nonzero``, ``tolist``); the static engine's silent steps read nothing."""
    model, renderer, streams, frames = setup
    long = Stream(**{**streams[0].__dict__, "clip_end": 80.0, "targets": []})
    rows = [(long, np.concatenate([frames[0]] * 2))]
    cfg = EngineConfig(threshold=0.5, frame_window=4)
    assert silent_reads(model, renderer, cfg, rows) > 0
    assert silent_reads(model, renderer, dataclasses.replace(cfg, step="static"), rows) == 0


def test_an_unknown_step_is_refused(setup):
    model, renderer, _, _ = setup
    with pytest.raises(ValueError, match="step must be 'eager', 'static' or 'auto', got 'fast'"):
        StreamingEngine(model, renderer, EngineConfig(step="fast"))


def test_auto_takes_the_compiled_static_step_on_an_accelerator_and_eager_on_cpu_or_with_probes():
    """``step="auto"`` (eval.run's, the demo's and GRPO's default): static and compiled on a CUDA
    device, eager on CPU (measured faster there: docs/performance.md) and for a run with branches;
    an explicit step is kept, and ``static`` with branches refused."""
    auto = EngineConfig(step="auto", threshold=0.3)
    cuda, cpu = torch.device("cuda", 0), torch.device("cpu")
    cfg, said = resolve_step(auto, cuda)
    assert (cfg.step, cfg.compile, cfg.threshold, said) == ("static", True, 0.3, "static (compiled)")
    cfg, said = resolve_step(auto, cuda, branches=True)
    assert (cfg.step, cfg.compile, said) == ("eager", False, "eager (probes need branches)")
    cfg, said = resolve_step(auto, cpu)
    assert (cfg.step, cfg.compile) == ("eager", False) and said.startswith("eager (faster than the static")
    static = dataclasses.replace(auto, step="static")
    assert resolve_step(static, cuda) == (static, "static")
    with pytest.raises(ValueError, match="step='static' has no branches, which probes need"):
        resolve_step(static, cpu, branches=True)


def test_the_step_choice_is_logged_once_per_process_and_outcome(setup, caplog):
    model, renderer, _, _ = setup
    step_choice._said.clear()
    with caplog.at_level(logging.INFO, logger="engine.step_choice"):
        for _ in range(3):
            StreamingEngine(model, renderer, EngineConfig(step="auto"))
        StreamingEngine(model, renderer, EngineConfig(step="static"))
    assert [r.getMessage() for r in caplog.records] == [
        "engine step: eager (faster than the static step on cpu: docs/performance.md)",
        "engine step: static",
    ]


def test_probes_run_eager_under_auto_and_refuse_the_static_step(setup):
    """Probes branch the cache (``KVWindow.mark`` / ``rewind``), which the static cache lacks: with
    ``auto`` they run eager and answer as with ``eager``; ``static`` is refused before any step."""
    model, renderer, streams, frames = setup
    probes = [Probe(5, "What is on screen?", "a"), Probe(9, "And now?", "b")]
    cut = frames[0][:10]
    eager = answer_probes(model, renderer, streams[0], cut, probes, max_new_tokens=3)
    auto = answer_probes(
        model, renderer, streams[0], cut, probes, max_new_tokens=3, cfg=EngineConfig(step="auto")
    )
    assert [a.text for a in auto] == [a.text for a in eager]
    assert all(torch.equal(a.logits, b.logits) for a, b in zip(auto, eager, strict=True))
    with pytest.raises(ValueError, match="step='static' has no branches"):
        answer_probes(model, renderer, streams[0], cut, probes, cfg=EngineConfig(step="static"))


@pytest.mark.slow  # compiles 4 graphs on CPU (about 3 min on a loaded 2-core machine)
def test_compiled_static_steps_build_one_graph_per_key_and_never_recompile(setup, request):
    """``fullgraph=True`` and ``error_on_recompile``: a firing, windowed stream at batch 1 and 3 runs
    with no graph break and no recompile, one graph per (kind, rows, piece, capacity), and streams as
    the eager engine does."""
    model, renderer, streams, frames = setup
    # torch's own patch: a monkeypatch's undo hid the flag from torch in later tests of the worker
    recompiles_fail = torch._dynamo.config.patch(error_on_recompile=True)
    recompiles_fail.__enter__()
    request.addfinalizer(lambda: recompiles_fail.__exit__(None, None, None))
    counters.clear()
    keys0 = compiled_step.cache_info().currsize
    cfg = EngineConfig(threshold=0.47, max_new_tokens=4, frame_window=6, static_capacity=4096)
    compiled = dataclasses.replace(cfg, step="static", compile=True)
    for rows in (slice(0, 1), slice(0, 3)):
        eager = StreamingEngine(model, renderer, cfg).run(streams[rows], frames[rows])
        got = StreamingEngine(model, renderer, compiled).run(streams[rows], frames[rows])
        for a, b in zip(eager, got, strict=True):
            _same(a, b)
    keys = compiled_step.cache_info().currsize - keys0
    assert keys >= 4  # frame and reply token, batch 1 and 3 (a capacity that grew: one more)
    assert counters["stats"]["unique_graphs"] == keys
    assert sum(counters["graph_break"].values()) == 0
