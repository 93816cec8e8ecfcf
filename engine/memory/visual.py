"""Visual archive: keyframe embeddings with their captions and times; retrieval by the current frame.

A keyframe's embedding is the mean of the vision tower's merged patch features (the tokens the
language model sees for that frame), unit-normalized: :class:`FramePooler` computes it from a frame
with the evaluated model's own vision tower, so the archive needs no second model. Entries can also
be added with given vectors (a synthetic set's keyframes, or features computed elsewhere).
Retrieval is cosine similarity over the time-restricted prefix of a :class:`DenseIndex`: it
recovers moments that look like now even when no caption shares a word with the query.
"""

from __future__ import annotations

import math

import numpy as np

from engine.memory.temporal import DenseIndex, Hit


class FramePooler:
    """Pooled, unit-norm vision-tower features of one RGB frame (H, W, 3) uint8."""

    def __init__(self, model, processor) -> None:
        self.model, self.image_processor = model, processor.image_processor
        self.dim = int(model.config.text_config.hidden_size)

    def __call__(self, frame: np.ndarray) -> np.ndarray:
        import torch

        batch = self.image_processor(images=[frame], return_tensors="pt")
        device = next(self.model.parameters()).device
        with torch.no_grad():
            out = self.model.model.get_image_features(
                batch["pixel_values"].to(device), batch["image_grid_thw"].to(device)
            )
        v = out.pooler_output[0].float().mean(0).cpu().numpy()
        return (v / max(float(np.linalg.norm(v)), 1e-12)).astype(np.float32)


class VisualArchive:
    """Keyframe vectors + caption + time, time-sorted (see the module docstring)."""

    def __init__(self, dim: int) -> None:
        self.index = DenseIndex(dim)
        self.captions: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self.index)

    def add(self, keys: list[str], times: list[float], vectors: np.ndarray, captions: list[str]) -> None:
        self.index.add(times, vectors, keys)
        self.captions.update(zip(keys, captions, strict=True))

    def search(self, query: np.ndarray, now: float, lo: float = -math.inf, k: int = 5) -> list[Hit]:
        return self.index.search(query, k, now, lo)
