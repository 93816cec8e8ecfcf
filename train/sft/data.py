"""The SFT data: stream records -> rendered training windows -> padded batches.

    dataset = StreamWindowDataset.from_split(mixture_dir / "train", renderer, FrameCache(".cache/frames"))
    batch = WindowCollator(pad_token_id=processor.tokenizer.pad_token_id)([dataset[0], dataset[1]])

One item is one training window of one stream (``data_builders.stream_steps.step_windows``; a whole
stream unless ``sft.window_steps`` splits it, the clip clock kept): its frames come through the
frame cache (``data_builders.frames.stream_frames``: one entry per clip and pixel budget, the one the
frames stage writes) and the renderer turns them into the model's turns. Rendered items are kept in
memory when ``keep_rendered`` is set (the toy data: a few hundred short windows), so an epoch after
the first costs no decoding or image processing.

The collator right-pads ids with the pad token, ``attention_mask`` with 0, ``labels`` with -100,
``decision_mask`` with -1 and ``mm_token_type_ids`` with 0, and concatenates ``pixel_values`` and
``image_grid_thw`` in row order (the model consumes image tokens row by row, left to right).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from data_builders.frame_cache import FrameCache
from data_builders.frames import stream_frames
from data_builders.record_io import load_streams, resolve_video
from data_builders.records import Stream
from data_builders.splits import split_records
from data_builders.stream_steps import step_windows
from engine.render import TurnRenderer
from engine.streaming import BLANK_GREY

#: Keys a collated batch carries (the model's inputs plus ``labels`` and ``decision_mask``).
PADDED_KEYS = {
    "input_ids": None,
    "attention_mask": 0,
    "labels": -100,
    "decision_mask": -1,
    "mm_token_type_ids": 0,
}


class StreamWindowDataset(Dataset):
    """Rendered training windows of a list of streams (see the module docstring)."""

    def __init__(
        self,
        streams: list[Stream],
        records_path: str | Path,
        renderer: TurnRenderer,
        frame_cache: FrameCache | None = None,
        keep_rendered: bool = True,
        blank_frames: bool = False,
        window_steps: int | None = None,
    ):
        self.streams = streams
        self.records_path = Path(records_path)
        self.renderer = renderer
        self.frame_cache = frame_cache
        self.keep_rendered = keep_rendered
        self.blank_frames = blank_frames
        sps = renderer.steps_per_second
        self.items = [(i, w) for i, s in enumerate(streams) for w in step_windows(s, sps, window_steps)]
        self._rendered: dict[int, dict[str, torch.Tensor]] = {}

    @classmethod
    def from_split(cls, split_dir: str | Path, renderer: TurnRenderer, frame_cache=None, **kw):
        path = split_records(split_dir)
        return cls(load_streams(path), path, renderer, frame_cache, **kw)

    def __len__(self) -> int:
        return len(self.items)

    def frames(self, index: int) -> np.ndarray:
        """The frames of item ``index`` (N, H, W, 3) uint8, one per step of its window."""
        i, window = self.items[index]
        stream = self.streams[i]
        video = resolve_video(stream, self.records_path)
        r = self.renderer
        frames = stream_frames(stream, video, r.cfg, r.steps_per_second, self.frame_cache, window)
        return np.full_like(frames, BLANK_GREY) if self.blank_frames else frames

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        if index in self._rendered:
            return self._rendered[index]
        i, window = self.items[index]
        r = self.renderer.render(self.streams[i], self.frames(index), window)
        item = {
            "input_ids": r.input_ids,
            "attention_mask": r.attention_mask,
            "labels": r.labels,
            "decision_mask": r.decision_mask,
            "mm_token_type_ids": r.mm_token_type_ids,
            "pixel_values": r.pixel_values,
            "image_grid_thw": r.image_grid_thw,
        }
        if self.keep_rendered:
            self._rendered[index] = item
        return item


@dataclass
class WindowCollator:
    """Right-pads rendered windows into one batch (see the module docstring)."""

    pad_token_id: int

    def __call__(self, items: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        length = max(int(it["input_ids"].numel()) for it in items)
        batch: dict[str, torch.Tensor] = {}
        for key, pad in PADDED_KEYS.items():
            value = self.pad_token_id if pad is None else pad
            rows = [it[key] for it in items]
            out = torch.full((len(rows), length), value, dtype=rows[0].dtype)
            for b, row in enumerate(rows):
                out[b, : row.numel()] = row
            batch[key] = out
        batch["pixel_values"] = torch.cat([it["pixel_values"] for it in items])
        batch["image_grid_thw"] = torch.cat([it["image_grid_thw"] for it in items])
        return batch
