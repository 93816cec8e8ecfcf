"""Long-horizon memory stores and retrieval (engine.memory): dense index, multi-scale summaries, graph,
visual archive, scopes, merge, BM25, back ends (rule; model on the tiny Qwen3-VL; http on 127.0.0.1),
the temporal restriction, and the generator + recall path at small scale."""

from __future__ import annotations

import math
import random

import numpy as np

from data_builders.synthetic.propermem import SynthConfig, generate, routine
from engine.memory import CachedEmbedder, Memory, build_memory
from engine.memory.backends import get_backend, parse_extraction, rule_extract
from engine.memory.bm25 import BM25
from engine.memory.config import MemoryConfig
from engine.memory.embedders import get_embedder
from engine.memory.graph import KnowledgeGraph
from engine.memory.retrieval import MemoryStore, evidence_block, interleave, resolve_scope, rrf
from engine.memory.temporal import DenseIndex, Hit
from perf.recall import recall_table


def unit(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    v = rng.standard_normal((n, d)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def store_with(n: int, seed: int = 0, cfg: MemoryConfig | None = None) -> tuple[MemoryStore, list]:
    rng, nrng = random.Random(seed), np.random.default_rng(seed)
    cfg = cfg or MemoryConfig(enabled=True, embedder="hashing", activity_max_clips=4)
    store = MemoryStore(cfg, get_embedder("hashing"), get_backend("rule"), visual_dim=16)
    t, clips = 0.0, []
    for i in range(n):
        t += rng.uniform(60, 7200)
        clips.append((f"m{i}", t, routine(rng)[0]))
    frames = unit(nrng, n, 16)
    store.add_captions(clips, keyframes={c[0]: f for c, f in zip(clips, frames, strict=True)})
    return store, clips


def test_dense_index_topk_matches_brute_force_and_stays_in_the_past():
    rng = np.random.default_rng(0)
    idx = DenseIndex(8, capacity=2)
    times = np.sort(rng.uniform(0, 1000, 300))
    vecs = unit(rng, 300, 8)
    for a in range(0, 300, 7):  # many small appends: growth by doubling
        idx.add(times[a : a + 7], vecs[a : a + 7], [f"k{i}" for i in range(a, min(a + 7, 300))])
    q = unit(rng, 1, 8)[0]
    for now in (-1.0, 10.0, 500.0, 2000.0):
        hits = idx.search(q, 5, now)
        past = np.flatnonzero(times <= now)
        want = past[np.argsort(-(vecs[past] @ q))][:5]
        assert [h.key for h in hits] == [f"k{i}" for i in want]
        assert all(h.time <= now for h in hits)
    idx.add([5.0], vecs[:1], ["late"])  # out-of-order input is merged in by time
    assert np.all(np.diff(idx.times) >= 0) and "late" in idx.keys


def test_summaries_are_incremental_and_cover_only_closed_segments():
    store, clips = store_with(40)
    made = store.temporal.summaries_made
    assert made > 0 and len(store.temporal.indexes["activity"]) > 0
    store.add_captions([("new", clips[-1][1] + 60, "I open the fridge in the kitchen.")])
    assert store.temporal.summaries_made - made <= 2  # only the segment that just closed
    for level in ("activity", "session"):
        for key in store.temporal.indexes[level].keys:
            item = store.temporal.items[key]
            assert item.start <= item.end and item.time == item.end


def test_nothing_later_than_the_current_step_is_ever_retrieved():
    store, clips = store_with(300, seed=1)
    rng = random.Random(2)
    nrng = np.random.default_rng(2)
    for _ in range(60):
        now = rng.uniform(clips[0][1] - 100, clips[-1][1] + 100)
        query = routine(rng)[0] + rng.choice(["", " in the last hour", " yesterday"])
        r = store.retrieve(query, now, unit(nrng, 1, 16)[0], k=8)
        for h in r.all_hits():
            assert h.time <= now, (h, now)
            item = store.temporal.items.get(h.key)
            assert item is None or item.end <= now  # a summary covers only the past
        assert all(h.time >= r.lo for h in r.temporal + r.graph + r.visual)


def test_memory_hook_restricts_history_given_after_the_step():
    from data_builders.records import HistoryEntry, Stream

    history = [
        HistoryEntry(-3600.0 * i, f"I leave the spare key under the blue pot number {i}.")
        for i in range(1, 30)
    ]
    history += [HistoryEntry(30.0, "The blue pot now holds a secret from the future.")]
    stream = Stream(id="s", source="propermem", task="propermem", video="v.mp4", clip_start=0.0, clip_end=60.0,
                    instruction="Remind me.", history=history + [HistoryEntry(5.0, "I look at the blue pot.")])  # fmt: skip
    memory = Memory(MemoryConfig(enabled=True, embedder="hashing", query_window_s=10.0), get_embedder("hashing"),
                    get_backend("rule"))  # fmt: skip
    blocks = {}
    for t in range(0, 60, 2):
        blocks[t] = memory.evidence(stream, float(t))
        assert all(h.time <= t - 10.0 for h in memory.last["s"].all_hits())
    assert any(blocks.values()) and None in blocks.values()  # an unchanged block is not appended again
    assert not any("future" in (b or "") for t, b in blocks.items() if t < 40)


def test_relative_scopes_resolve_to_absolute_intervals():
    assert resolve_scope("what happened in the last 2 hours", 10_000.0) == (10_000.0 - 7200, 10_000.0)
    assert resolve_scope("the past three days", 4 * 86400.0) == (86400.0, 4 * 86400.0)
    assert resolve_scope("this morning", 86400.0 + 15 * 3600) == (86400.0, 86400.0 + 12 * 3600)
    lo, hi = resolve_scope("today", 3 * 86400 + 10.0)
    assert (lo, hi) == (3 * 86400.0, 3 * 86400 + 10.0)
    store, clips = store_with(200)
    now = clips[-1][1]
    r = store.retrieve("I check the kettle in the kitchen in the last hour", now)
    assert r.lo == now - 3600 and all(now - 3600 <= h.time <= now for h in r.temporal + r.graph)


def test_graph_finds_an_instruction_through_an_alias_relation():
    g = KnowledgeGraph()
    events = [("a", 1.0, "Marco is my landlord, we met years ago."),
              ("b", 2.0, "The landlord told me to keep the boiler pressure below two bar.")]  # fmt: skip
    events += [(f"d{i}", 3.0 + i, f"I hear the boiler click on in the hallway {i}.") for i in range(30)]
    events += [(f"e{i}", 40.0 + i, f"Marco and I talk about football {i}.") for i in range(30)]
    for key, t, text in events:
        g.add_event(key, t, rule_extract(text))
    hits = g.search(rule_extract("Marco texts me while I stand next to the boiler.").entities, now=100.0, k=2)
    assert {h.key for h in hits} == {"a", "b"}
    assert g.search(["marco", "boiler"], now=1.5, k=5)[0].key == "a"  # relation not yet known at 1.5
    assert all(h.time <= 1.5 for h in g.search(["marco", "boiler"], now=1.5, k=5))


def test_merge_bm25_and_evidence_block():
    a, b = [Hit("x", 1, 1), Hit("y", 1, 2)], [Hit("y", 1, 2), Hit("z", 1, 3)]
    assert [h.key for h in interleave([a, b], 3)] == ["x", "y", "z"]
    assert rrf([a, b], 1)[0].key == "y"
    bm = BM25([("1", 1.0, "the red kettle boils"), ("2", 2.0, "a blue mug"), ("3", 3.0, "red red kettle")])
    assert (
        bm.search("red kettle", 2, hi=5.0)[0].key == "3" and bm.search("red kettle", 2, hi=1.5)[0].key == "1"
    )
    store, clips = store_with(50)
    r = store.retrieve(clips[10][2], clips[-1][1])
    text, shown = evidence_block(store, r, max_items=4, max_chars=80)
    assert 0 < len(text.splitlines()) <= 4 and len(shown) == len(text.splitlines())
    assert all(line.startswith("[") for line in text.splitlines())


def test_cached_embedder_and_build_memory_off():
    inner = get_embedder("hashing")
    cached = CachedEmbedder(inner)
    assert np.allclose(cached.encode(["a b", "c", "a b"])[0], inner.encode(["a b"])[0])
    assert len(cached.cache) == 2
    assert build_memory(MemoryConfig(enabled=False)) is None
    assert isinstance(build_memory({"enabled": True, "embedder": "hashing"}), Memory)


def test_rule_backend_summaries_and_parsing():
    rule = get_backend("rule")
    s = rule.summarize(
        ["I open the fridge in the kitchen.", "Tom hands me the mug in the kitchen."], "activity"
    )
    assert s.startswith("activity of 2 parts about kitchen") and "Tom hands me" in s
    assert parse_extraction("nothing useful") is None


def memory_answer(prompt: str) -> str:
    if prompt.startswith("List the people"):
        return "Entities: Marco; boiler\nRelations: Marco | is | landlord"
    return "Marco checked the boiler in the hallway."


def test_http_backend_summarizes_and_extracts_through_a_local_endpoint(chat_server):
    with chat_server(memory_answer) as srv:
        cfg = MemoryConfig(enabled=True, embedder="hashing", backend="http", activity_max_clips=2,
                           backend_options={"base_url": srv.url, "model": "m"})  # fmt: skip
        memory = build_memory(cfg)
        store = MemoryStore(cfg, memory.embedder, memory.backend)
        store.add_captions([(f"k{i}", 100.0 * i, f"I walk past the boiler {i}.") for i in range(5)])
        assert memory.backend.fallbacks == 0
        assert store.graph.relations.has_edge("marco", "landlord")
        summaries = [store.temporal.items[k].text for k in store.temporal.indexes["activity"].keys]
        assert summaries and all(s == "Marco checked the boiler in the hallway." for s in summaries)
        assert any("Summarize what happened" in p for p in srv.prompts)


def test_model_backend_runs_the_tiny_model_in_text_mode(tiny_model_and_processor):
    model, processor = tiny_model_and_processor
    backend = get_backend("model", vlm=model, processor=processor, max_new_tokens=6)
    answer = backend.complete("Summarize: I open the fridge.")
    assert isinstance(answer, str)
    summary = backend.summarize(["I open the fridge.", "I close it."], "activity")
    extraction = backend.extract("Marco is my landlord.")
    assert summary and extraction.entities  # parsed, or the rule fallback (counted)
    assert backend.fallbacks >= 0


def test_generator_writes_the_builder_format_and_recall_runs(tmp_path):
    from data_builders.build import build_source

    stats = generate(
        tmp_path / "set", SynthConfig(tokens=4000, per_kind=2, negatives=1, clip_s=50.0, videos=True)
    )
    assert stats["history_tokens_words"] >= 4000 and stats["positives"] == 6
    report = build_source("propermem", tmp_path / "built", annotations=tmp_path / "set" / "clips.jsonl",
                          videos=tmp_path / "set")  # fmt: skip
    assert report.n_failed == 0 and len(report.records) == 6 * 2 + 1  # + evidence-removed negatives
    neg = next(r for r in report.records if r.id.endswith("-neg"))
    removed = set(neg.meta["removed_memory"])
    assert removed and len(neg.history) == stats["history_entries"] + 2 - len(removed)
    result = recall_table(tmp_path / "set", embedder="hashing", k=5)
    rec = result["recall"]
    assert set(rec) == {"dense", "graph", "visual", "combined", "bm25"}
    assert rec["combined"]["all"] >= max(rec[n]["all"] for n in ("dense", "graph", "visual")) - 1e-9
    assert not math.isnan(rec["bm25"]["all"])
