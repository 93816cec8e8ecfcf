"""Long-horizon memory for the streaming engine: multi-scale summaries, knowledge graph, visual archive.

    python -m eval.run benchmark=propermem memory=on records=/data/built/propermem out_dir=runs/eval/pm-mem
    memory = build_memory(cfg.memory, model, processor)            # None when memory=off
    StreamingEngine(model, renderer, engine_cfg, memory=memory)

Per stream, :class:`Memory` builds a :class:`~engine.memory.retrieval.MemoryStore` from the stream's
personal history (ProPerMem captions, EgoLife caption logs), then at every ``every_k_steps``-th step
(before that step's user turn is built) it retrieves with the captions of the last
``query_window_s`` seconds (and the current frame), restricted to times at or before the step, and
returns a new evidence block only when the shown entries changed. The engine appends the block as a
user turn ``Evidence:\\n...`` (append-only: the KV cache stays valid). Each observed frame is then
archived (pooled vision features), so a stream without a history still gathers visual memory.

Modules: ``temporal`` (multi-scale summaries + dense index), ``graph``, ``visual``, ``retrieval``
(scopes, merge, evidence block), ``backends`` (rule / model / http summarizer and extractor),
``embedders``, ``synth`` (ProPerMem-style generator), ``recall`` (recall@5 table), ``bench``.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from typing import Any

import numpy as np

from data_builders.records import Stream
from engine.memory.backends import get_backend
from engine.memory.config import MemoryConfig
from engine.memory.embedders import get_embedder
from engine.memory.retrieval import MemoryStore, Retrieval, evidence_block
from engine.memory.visual import FramePooler

__all__ = ["Memory", "MemoryConfig", "MemoryStore", "build_memory"]


class CachedEmbedder:
    """Memoizes an embedder per text: a positive clip and its negative share all but a few captions."""

    def __init__(self, inner, limit: int = 200_000) -> None:
        self.inner, self.dim, self.limit = inner, inner.dim, limit
        self.cache: dict[str, np.ndarray] = {}

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        todo = list(dict.fromkeys(t for t in texts if t not in self.cache))
        if todo:
            if len(self.cache) + len(todo) > self.limit:
                self.cache.clear()
            self.cache.update(zip(todo, self.inner.encode(todo), strict=True))
        return np.stack([self.cache[t] for t in texts]) if texts else np.zeros((0, self.dim), np.float32)


class Memory:
    """The engine's memory hook: ``evidence(stream, step_time, frame=None) -> str | None``."""

    def __init__(self, cfg: MemoryConfig, embedder, backend, pooler: FramePooler | None = None) -> None:
        self.cfg, self.embedder, self.backend, self.pooler = cfg, CachedEmbedder(embedder), backend, pooler
        self.stores: dict[str, MemoryStore] = {}
        self.calls: dict[str, int] = {}
        self.shown: dict[str, tuple] = {}
        self.last: dict[str, Retrieval] = {}
        self.timelines: dict[str, tuple[list[float], list[str]]] = {}

    def store(self, stream: Stream) -> MemoryStore:
        """The stream's store, built from its history on first use."""
        if stream.id not in self.stores:
            dim = self.pooler.dim if (self.pooler is not None and self.cfg.visual) else None
            store = MemoryStore(self.cfg, self.embedder, self.backend, visual_dim=dim)
            store.add_captions([(f"h{i}", h.time, h.text) for i, h in enumerate(stream.history)])
            self.stores[stream.id] = store
            entries = sorted(stream.history, key=lambda h: h.time)
            self.timelines[stream.id] = ([h.time for h in entries], [h.text for h in entries])
        return self.stores[stream.id]

    def query_text(self, stream: Stream, now: float) -> str:
        """Captions of the last ``query_window_s`` seconds up to ``now`` (the current observation)."""
        times, texts = self.timelines[stream.id]
        a, b = bisect_left(times, now - self.cfg.query_window_s), bisect_right(times, now)
        return " ".join(texts[max(a, b - 8) : b])

    def evidence(self, stream: Stream, step_time: float, frame: np.ndarray | None = None) -> str | None:
        """A new evidence block for this step, or None (not a retrieval step, nothing, or unchanged)."""
        n = self.calls.get(stream.id, 0)
        self.calls[stream.id] = n + 1
        store = self.store(stream)
        vq = self.pooler(frame) if (frame is not None and store.visual is not None) else None
        block = None
        if n % self.cfg.every_k_steps == 0:
            query = self.query_text(stream, step_time)  # what is in view now: not retrieved
            r = store.retrieve(
                query, step_time, vq, scope_text=stream.instruction, recent_s=self.cfg.query_window_s
            )
            self.last[stream.id] = r
            text, shown = evidence_block(store, r, self.cfg.max_items, self.cfg.max_chars_per_item)
            if text and shown != self.shown.get(stream.id):
                self.shown[stream.id] = shown
                block = text
        if vq is not None:
            store.add_frame(f"frame@{step_time:.1f}", step_time, vq)
        return block

    def reset(self) -> None:
        self.stores.clear()
        self.calls.clear()
        self.shown.clear()
        self.last.clear()
        self.timelines.clear()


def build_memory(cfg: Any, model=None, processor=None) -> Memory | None:
    """The memory of ``cfg`` (a ``MemoryConfig`` or the ``memory`` config node); None when disabled."""
    if cfg is None:
        return None
    if not isinstance(cfg, MemoryConfig):
        from omegaconf import OmegaConf

        plain = OmegaConf.to_container(cfg, resolve=True) if not isinstance(cfg, dict) else dict(cfg)
        cfg = MemoryConfig(**plain)
    if not cfg.enabled:
        return None
    embedder = get_embedder(cfg.embedder, model_path=cfg.embedding_model, threads=cfg.embed_threads)
    backend = get_backend(cfg.backend, vlm=model, processor=processor, **cfg.backend_options)
    pooler = (
        FramePooler(model, processor)
        if (cfg.visual and model is not None and processor is not None)
        else None
    )
    return Memory(cfg, embedder, backend, pooler)
