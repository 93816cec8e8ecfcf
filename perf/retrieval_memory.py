"""Retrieval memory benchmark: index build throughput, incremental update cost vs history size, query latency.

    python -m perf retrieval_memory                      # ~1-2 min on 2 cores
    python -m perf.retrieval_memory --queries 20 --new-clips 20      (a quicker check)

Prints one JSON object on its last line:

- ``captions_per_s``: MiniLM embedding throughput of clip captions, batched (``--sample`` captions,
  one torch thread: the fastest setting on this loaded 2-core machine).
- ``update_100k_vs_10k``: median time to add one new clip (embed it, append to the dense index,
  summarize the segment it closes if any, merge its entities into the graph) to a store holding
  100K captions over the same for 10K captions; O(1) amortized means ~1 (target <= 1.5).
  ``update_ms`` gives both medians. The new clips alternate between the two stores, so load from
  other processes hits both alike.
- ``query_ms_p50``: median latency of one retrieval (query embedding with MiniLM, dense top-k over
  every level, graph expansion, visual top-k, merge) at a history of ``--history-tokens`` words
  (600K, about 35K captions; target < 100 ms), ``query_ms_p90`` beside it.

Prefilled stores hold real captions (the synthetic set's generator), real graph extraction and
real summaries (rule back end); their *stored vectors* are the MiniLM vectors of the ``--sample``
captions reused cyclically, because embedding 100K captions at ~70/s would take 25 minutes and
neither the update nor the query cost depends on the stored values. Keyframe vectors are random.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

import numpy as np

from data_builders.synthetic.propermem import routine
from engine.memory.backends import get_backend
from engine.memory.config import MemoryConfig
from engine.memory.embedders import get_embedder
from engine.memory.retrieval import MemoryStore
from infra.entry import quiet_libraries

VISUAL_DIM = 64


class CycledVectors:
    """Stands in for the embedder while prefilling: the sample's vectors, reused in order."""

    def __init__(self, vectors: np.ndarray) -> None:
        self.vectors, self.dim, self.i = vectors, vectors.shape[1], 0

    def encode(self, texts) -> np.ndarray:
        idx = (self.i + np.arange(len(texts))) % len(self.vectors)
        self.i += len(texts)
        return self.vectors[idx]


def captions(n_words: int, rng: random.Random, start: float = -365 * 86400.0) -> list[tuple[str, float, str]]:
    """Routine captions ``(key, time, text)`` every ~25 min of daytime until ``n_words`` words."""
    out, words, t = [], 0, start
    while words < n_words:
        text = routine(rng)[0]
        t += rng.uniform(300, 3000)
        if (t % 86400) < 7 * 3600:
            t += 7 * 3600
        out.append((f"m{len(out)}", t, text))
        words += len(text.split())
    return out


def prefilled(cfg, embedder, sample_vectors: np.ndarray, clips, nrng) -> MemoryStore:
    """A store holding ``clips`` (cycled vectors, random keyframes), switched to the real embedder."""
    store = MemoryStore(cfg, CycledVectors(sample_vectors), get_backend("rule"), visual_dim=VISUAL_DIM)
    frames = nrng.standard_normal((len(clips), VISUAL_DIM)).astype(np.float32)
    frames /= np.linalg.norm(frames, axis=1, keepdims=True)
    store.add_captions(
        clips,
        store.embedder.encode([c[2] for c in clips]),
        {c[0]: f for c, f in zip(clips, frames, strict=True)},
    )
    store.embedder = store.temporal.embedder = embedder
    return store


def run_bench(history_tokens: int, sizes: tuple[int, int], sample: int, queries: int, new_clips: int) -> dict:
    quiet_libraries()
    rng, nrng = random.Random(0), np.random.default_rng(0)
    cfg = MemoryConfig(enabled=True)
    embedder = get_embedder("minilm", threads=cfg.embed_threads)
    texts = [routine(rng)[0] for _ in range(sample)]
    embedder.encode(texts[:16])  # warm-up
    t0 = time.perf_counter()
    sample_vectors = embedder.encode(texts)
    captions_per_s = sample / (time.perf_counter() - t0)

    history = captions(history_tokens, rng)
    t0 = time.perf_counter()
    big = prefilled(cfg, embedder, sample_vectors, history, nrng)
    build_s = time.perf_counter() - t0
    now = history[-1][1] + 3600
    lat = []
    for _ in range(queries):
        q = nrng.standard_normal(VISUAL_DIM).astype(np.float32)
        text = routine(rng)[0] + f" at {rng.randint(0, 10**6)}"  # distinct: no query cache hit
        t0 = time.perf_counter()
        big.retrieve(text, now, q / np.linalg.norm(q), recent_s=cfg.query_window_s)
        lat.append(time.perf_counter() - t0)
    lat.sort()

    small_n, large_n = sizes
    hist = captions(large_n * 17, rng)[:large_n]
    stores = {n: prefilled(cfg, embedder, sample_vectors, hist[:n], nrng) for n in (small_n, large_n)}
    times: dict[int, list[float]] = {n: [] for n in stores}
    t = hist[-1][1]
    for i in range(new_clips):
        t += rng.uniform(300, 3000)
        for n in stores if i % 2 == 0 else reversed(list(stores)):
            clip = [(f"new{i}", t, routine(rng)[0])]
            t0 = time.perf_counter()
            stores[n].add_captions(clip)
            times[n].append(time.perf_counter() - t0)
    med = {n: statistics.median(v) for n, v in times.items()}
    return {
        "captions_per_s": round(captions_per_s, 1),
        "update_100k_vs_10k": round(med[large_n] / med[small_n], 3),
        "update_ms": {f"{n // 1000}k": round(1e3 * v, 2) for n, v in med.items()},
        "query_ms_p50": round(1e3 * lat[len(lat) // 2], 2),
        "query_ms_p90": round(1e3 * lat[int(len(lat) * 0.9)], 2),
        "history_tokens_words": sum(len(c[2].split()) for c in history),
        "history_captions": len(history),
        "summaries": big.temporal.summaries_made,
        "graph_entities": len(big.graph.postings),
        "prefill_s_excluding_embedding": round(build_s, 1),
        "stores": list(sizes),
        "new_clips": new_clips,
        "queries": queries,
        "embed_threads": cfg.embed_threads,
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        prog="python -m perf retrieval_memory", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--history-tokens", type=int, default=600_000, help="words of the query-time history")
    parser.add_argument("--sizes", default="10000,100000", help="stored captions of the two update stores")
    parser.add_argument("--sample", type=int, default=512, help="captions embedded for captions_per_s")
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--new-clips", type=int, default=40)
    args = parser.parse_args(argv)
    a, b = (int(x) for x in args.sizes.split(","))
    result = run_bench(args.history_tokens, (a, b), args.sample, args.queries, args.new_clips)
    print(json.dumps(result))
    return result
