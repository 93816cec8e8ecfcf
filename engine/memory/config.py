"""Typed schema of the ``memory`` config group (``conf/memory/{off,on}.yaml``).

    python -m eval.run benchmark=propermem memory=on records=/data/built/propermem out_dir=runs/eval/pm-mem

Kept free of heavy imports: ``eval.config`` imports it to type the ``memory`` field of the eval root.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class MemoryConfig:
    """Long-horizon memory of the streaming engine (see ``engine.memory``)."""

    enabled: bool = False
    """Build the memory and append evidence turns to the stream (``memory=on``)."""
    every_k_steps: int = 1
    """Retrieve at every K-th decision step (1: every step)."""
    embedder: str = "minilm"
    """Text embedder (registry ``engine.memory.embedders.EMBEDDERS``): ``minilm`` (offline MiniLM) or
    ``hashing`` (deterministic word/bigram feature hashing, no model: the fast default of tests)."""
    embedding_model: str | None = None
    """Sentence-embedding model folder for ``minilm`` (null: the packaged all-MiniLM-L6-v2)."""
    embed_threads: int | None = 1
    """Torch threads while embedding (1 is fastest on a loaded 2-core machine; null: leave as is)."""
    backend: str = "rule"
    """Summarizer / entity extractor (registry ``engine.memory.backends.BACKENDS``): ``rule``
    (deterministic, no model), ``model`` (the evaluated Qwen3-VL in text mode) or ``http`` (the
    judge's OpenAI-compatible endpoint)."""
    backend_options: dict[str, Any] = field(default_factory=dict)
    """Back-end keywords, e.g. ``{base_url: ..., model: ...}`` for ``http``, ``{max_new_tokens: 48}``."""
    top_k: int = 5
    """Hits kept per retriever before merging."""
    max_items: int = 6
    """Items in one evidence block (after merge and dedup)."""
    max_chars_per_item: int = 200
    """An item's text is cut to this many characters."""
    merge: str = "interleave"
    """How the three ranked lists merge (registry ``engine.memory.retrieval.MERGERS``): interleave or rrf."""
    query_window_s: float = 60.0
    """The retrieval query is the captions of the last this-many seconds (plus the instruction)."""
    activity_gap_s: float = 1800.0
    """A gap longer than this (seconds) between clips closes an activity segment."""
    activity_max_clips: int = 12
    """An activity segment closes after this many clips."""
    session_gap_s: float = 14400.0
    """A gap longer than this (seconds), or a new day, closes a session."""
    graph_postings_cap: int = 512
    """Graph retrieval reads at most this many most-recent mentions of a frequent entity (bounds
    the query cost as days accumulate)."""
    visual: bool = True
    """Archive each observed frame (pooled vision-tower features) and retrieve by the current frame."""
