"""The streaming engine's vision side: each row's frames prepared when the row reaches them.

``frame_chunk`` steps at a time, the frames are prepared (pixel values, grids) and the vision tower
runs on that chunk only, in one call for every frame array that needs its next chunk; an array shared by
several rows (the same object, as in a GRPO group) is prepared once. The chunk a new one replaces
is released: its features dropped and its pages handed back to the OS
(``data_builders.frame_pages.release_frames``). Why: ``engine/streaming.py``'s docstring.

With ``frame_prep="device"`` (the default) and a processor whose steps ``engine.frame_prep`` knows,
a chunk goes to the model's device as uint8 and is resized, normalised and cut into patches there
(:class:`~engine.frame_prep.FramePrep`: the processor's values bit for bit); otherwise (or with
``frame_prep="host"``) the processor prepares it on the host and its float32 pixels are uploaded.

The tower runs as ``EngineConfig.vision`` says: ``project`` (the default,
:func:`engine.vision_tower.vision_features` with a plan per chunk's grids, no read from the device)
or ``transformers`` (``get_image_features``, the grids uploaded at each call).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from data_builders.frame_pages import release_frames
from engine.frame_prep import FramePrep
from engine.render import TurnRenderer
from engine.vision_tower import VisionPlans, vision_features

#: Where a chunk's frames are prepared (``EngineConfig.frame_prep``).
FRAME_PREP = ("device", "host")
#: How the vision tower runs (``EngineConfig.vision``).
VISION = ("project", "transformers")


@dataclass
class Chunk:
    """Steps ``[start, end)`` of one frame array, prepared: grids and vision-tower features."""

    start: int
    end: int
    grid: list[tuple[int, int, int]]  # (t, h, w) of each frame, plain ints: a step reads it with no tensor op
    tokens: list[int]  # image placeholder tokens of each frame
    pooled: Sequence[torch.Tensor]  # one per frame
    deepstack: list[Sequence[torch.Tensor]]  # per deepstack layer, one per frame


@dataclass
class Features:
    """A step's image features: per active row (in row order) its frame's pooled features (a row per
    placeholder token) and, per deepstack layer, the same rows of that layer's features."""

    pooled: tuple[torch.Tensor, ...]
    deepstack: list[tuple[torch.Tensor, ...]]


class FrameFeatures:
    """Prepared chunks by frame array (``id(frames)``), the frames the vision tower saw
    (``frames_encoded``) and the CPU seconds of its calls since ``seconds`` was last reset."""

    def __init__(self, model, renderer: TurnRenderer, cfg, upload: Callable[[torch.Tensor], torch.Tensor]):
        self.model = model
        self.renderer = renderer
        self.cfg = cfg  # the engine's EngineConfig: ``frame_chunk``
        self.upload = upload
        self.chunks: dict[int, Chunk] = {}
        self.frames_encoded = 0
        self.seconds = 0.0
        if cfg.frame_prep not in FRAME_PREP:
            raise ValueError(f"frame_prep must be one of {', '.join(FRAME_PREP)}, got {cfg.frame_prep!r}")
        if cfg.vision not in VISION:
            raise ValueError(f"vision must be one of {', '.join(VISION)}, got {cfg.vision!r}")
        #: Plans of the project's tower call by chunk grids (``engine.vision_tower``).
        self.plans = VisionPlans(model.model.visual)
        image_processor = renderer.processor.image_processor
        #: The device prep, or ``None``: the processor on the host (``frame_prep="host"``, or a
        #: processor whose steps ``engine.frame_prep`` does not know).
        self.prep = FramePrep.of(image_processor) if cfg.frame_prep == "device" else None

    def pixels(self, frames: np.ndarray) -> tuple[torch.Tensor, list[tuple[int, int, int]]]:
        """Pixel values (on the model's device) and grids of ``(N, H, W, 3)`` uint8 frames."""
        if self.prep is None:
            pv, grid = self.renderer.encode_frames(frames)
            return self.upload(pv), [tuple(g) for g in grid.tolist()]
        return self.prep(self.upload(torch.from_numpy(np.array(frames))))

    def prepare(self, k: int, arrays: Sequence[np.ndarray]) -> None:
        """Make step k's frame of each array ready. An array past its prepared chunk gets the next
        ``frame_chunk`` frames through the processor and the vision tower, in one call for all such
        arrays (amortizing its fixed cost), each array once. The chunk it replaces is released."""
        need: dict[int, np.ndarray] = {}
        for frames in arrays:
            held = self.chunks.get(id(frames))
            if held is None or not held.start <= k < held.end:
                need.setdefault(id(frames), frames)
        if not need:
            return
        t0 = time.thread_time()
        spans, pvs, grids = [], [], []
        for key, frames in need.items():
            end = min(k + self.cfg.frame_chunk, len(frames))
            pv, grid = self.pixels(frames[k:end])
            spans.append((key, frames, end))
            pvs.append(pv)
            grids += grid
        out = self.encode(torch.cat(pvs), grids)
        self.frames_encoded += len(grids)
        i = 0
        for key, frames, end in spans:
            n = end - k
            self.release(frames)
            grids_thw = grids[i : i + n]
            self.chunks[key] = Chunk(
                k,
                end,
                grids_thw,
                [self.renderer.image_tokens(g) for g in grids_thw],
                out.pooler_output[i : i + n],
                [layer[i : i + n] for layer in out.deepstack_features],
            )
            i += n
        self.seconds += time.thread_time() - t0

    def encode(self, pixel_values: torch.Tensor, grids: list[tuple[int, int, int]]):
        """The vision tower on a call's pixel values: per image its features and each deepstack
        layer's (``get_image_features``' layout), as ``EngineConfig.vision`` runs it."""
        if self.cfg.vision == "transformers":
            return self.model.model.get_image_features(pixel_values, self.upload(torch.tensor(grids)))
        visual = self.model.model.visual
        return vision_features(visual, pixel_values, self.plans(grids, pixel_values.device))

    def release(self, frames: np.ndarray) -> None:
        """Drop the prepared chunk of ``frames`` and hand its pages back."""
        held = self.chunks.pop(id(frames), None)
        if held is not None:
            release_frames(frames, held.start, held.end)

    def features(self, k: int, arrays: Sequence[np.ndarray]) -> Features:
        """Step k's image features of each array, in order (prepared by :meth:`prepare`)."""
        picks = [self.chunks[id(frames)] for frames in arrays]
        return Features(
            pooled=tuple(c.pooled[k - c.start] for c in picks),
            deepstack=[
                tuple(c.deepstack[j][k - c.start] for c in picks) for j in range(len(picks[0].deepstack))
            ],
        )

    def grid(self, frames: np.ndarray, k: int) -> tuple[tuple[int, int, int], int]:
        """Step k's image grid ``(t, h, w)`` of ``frames`` and its number of placeholder tokens."""
        chunk = self.chunks[id(frames)]
        return chunk.grid[k - chunk.start], chunk.tokens[k - chunk.start]
