"""Recall@k of the target evidence on a ProPerMem-style set: each retriever, their merge, and BM25.

    python -m data_builders.synthetic.propermem --out /tmp/pm_synth --tokens 220000 --per-kind 8 --negatives 8
    python -m perf recall --set /tmp/pm_synth --k 5          # ~4 min on 2 cores (MiniLM)

For every positive clip, at the first step of its trigger window (``now`` = window start), the
query is the clip's own captions of the last ``query_window_s`` seconds and its latest keyframe;
each retriever returns its top k among history entries older than that observation window
(``time <= now - query_window_s``); recall = the share of the clip's evidence ids in those k,
averaged over clips (overall and per matter kind). Clips that share a history share one index.
Keyframe vectors come from the set's ``keyframes.npz``; the MiniLM caption vectors are cached in
``<set>/embeddings-<embedder>.npy`` so a re-run costs only the queries.
Prints a Markdown table, then the numbers as one JSON object on the last line.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from engine.memory.backends import get_backend
from engine.memory.bm25 import BM25
from engine.memory.config import MemoryConfig
from engine.memory.embedders import get_embedder
from engine.memory.retrieval import MERGERS, MemoryStore
from infra.files import json_lines

RETRIEVERS = ("dense", "graph", "visual", "combined", "bm25")


def _vectors(embedder, name: str, texts: list[str], cache_dir: Path) -> np.ndarray:
    digest = hashlib.sha1("\x00".join(texts).encode()).hexdigest()[:16]
    path = cache_dir / f"embeddings-{name}-{digest}.npy"
    if path.exists():
        return np.load(path)
    vectors = embedder.encode(texts)
    np.save(path, vectors)
    return vectors


def recall_table(
    set_dir: str | Path, embedder: str = "minilm", k: int = 5, merge: str = "interleave"
) -> dict:
    """Recall@k per retriever and matter kind (see the module docstring)."""
    set_dir = Path(set_dir)
    cfg = MemoryConfig(enabled=True, embedder=embedder, top_k=k, merge=merge)
    emb = get_embedder(embedder, threads=cfg.embed_threads)
    backend = get_backend("rule")
    kf = np.load(set_dir / "keyframes.npz")
    keyframes = dict(zip(kf["ids"].tolist(), kf["vectors"], strict=True))
    clips = [json.loads(line) for line in json_lines((set_dir / "clips.jsonl").read_text()) if line.strip()]
    stores: dict[str, MemoryStore] = {}
    build_s = 0.0
    scores: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for clip in clips:
        if not clip.get("trigger"):
            continue
        past = [h for h in clip["history"] if h["time"] < clip["clip_start"]]
        own = sorted((h for h in clip["history"] if h["time"] >= clip["clip_start"]), key=lambda h: h["time"])
        fp = hashlib.sha1(json.dumps([h["id"] for h in past]).encode()).hexdigest()
        if fp not in stores:
            t0 = time.perf_counter()
            store = MemoryStore(cfg, emb, backend, visual_dim=kf["vectors"].shape[1])
            triples = [(h["id"], h["time"], h["text"]) for h in past]
            vectors = _vectors(emb, embedder, [h["text"] for h in past], set_dir)
            store.add_captions(triples, vectors, {h["id"]: keyframes[h["id"]] for h in past})
            store.bm25 = BM25(triples)
            stores[fp] = store
            build_s += time.perf_counter() - t0
        store = stores[fp]
        now = clip["trigger"]["window"][0]
        seen = [h for h in own if now - cfg.query_window_s <= h["time"] <= now]
        query = " ".join(h["text"] for h in seen[-8:])
        vq = keyframes[seen[-1]["id"]] if seen else None
        r = store.retrieve(query, now, vq, k=k, recent_s=cfg.query_window_s)
        hits = {
            "dense": r.temporal,
            "graph": r.graph,
            "visual": r.visual,
            "combined": MERGERS.get(merge)([r.temporal, r.graph, r.visual], k),
            "bm25": store.bm25.search(query, k, now - cfg.query_window_s),
        }
        evidence = set(clip["trigger"]["evidence"])
        for name, hs in hits.items():
            got = len(evidence & {h.key for h in hs[:k]}) / len(evidence)
            scores[name]["all"].append(got)
            scores[name][clip.get("kind", "?")].append(got)
    table = {
        name: {kind: round(100 * float(np.mean(v)), 1) for kind, v in by_kind.items()}
        for name, by_kind in scores.items()
    }
    singles = {n: table[n]["all"] for n in ("dense", "graph", "visual")}
    best = max(singles, key=singles.get)
    return {"k": k, "merge": merge, "recall": table, "best_single": best, "index_build_s": round(build_s, 1)}


def markdown(result: dict) -> str:
    """The recall table as Markdown: rows = retrievers, columns = all and each matter kind."""
    kinds = ["all"] + sorted(k for k in result["recall"]["dense"] if k != "all")
    k = result["k"]
    lines = [
        f"| retriever (recall@{k}, %) | " + " | ".join(kinds) + " |",
        "|---" * (len(kinds) + 1) + "|",
    ]
    label = {"combined": "combined (dense + graph + visual)", "bm25": "BM25 (lexical baseline)"}
    for name in RETRIEVERS:
        row = result["recall"][name]
        tag = " (best single)" if name == result["best_single"] else ""
        lines.append(
            f"| {label.get(name, name)}{tag} | " + " | ".join(f"{row.get(c, 0.0):.1f}" for c in kinds) + " |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m perf recall", description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", required=True, help="directory written by data_builders.synthetic.propermem")
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--embedder", default="minilm")
    parser.add_argument("--merge", default="interleave")
    args = parser.parse_args(argv)
    result = recall_table(args.set, args.embedder, args.k, args.merge)
    print(markdown(result))
    print(json.dumps(result))
    return result
