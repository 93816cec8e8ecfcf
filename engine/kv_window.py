"""The streaming engine's cache bookkeeping for one run: the KV cache, the attention mask over it,
each row's next M-RoPE position, and which cache columns each step of each row holds.

The mask is rows x cached columns in a buffer on the model's device that doubles (never full: a
full view strides as another shape). Every column of the buffer past the mask holds 1, so a step
of one row (or rows without padding) appends its columns by moving the mask's end alone. A step
older than ``frame_window`` is evicted: its columns are masked per row (the whole step, or only
its timestamp and frame when it carried context or a reply) and dropped from the cache once dead in every row, every ``frame_window`` evictions. A
:class:`Mark` and :meth:`KVWindow.rewind` take the cache, the mask and the offsets back to a point
(a probe's branch, ``engine.probes``). Why: ``engine/streaming.py``'s docstring.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from engine.kv_cache import GrowingLayer, growing_cache


@dataclass
class RowColumns:
    """One row's cache columns by step: the step's whole turns, its timestamp and frame, and the
    steps whose frame alone may go (they carry an instruction, context or a reply)."""

    whole: dict[int, list[tuple[int, int]]] = field(default_factory=dict)  # step -> column ranges
    frame_span: dict[int, tuple[int, int]] = field(default_factory=dict)
    keep: set[int] = field(default_factory=set)


@dataclass(frozen=True)
class Mark:
    """A point of a run to come back to: cache columns, attention-mask length, rows' next positions."""

    columns: int
    mask_len: int
    offsets: list[int]


class KVWindow:
    """A run's cache, mask, offsets and column spans (see the module docstring)."""

    def __init__(self, model_config, rows: int, device: torch.device, frame_window: int | None):
        self.cache = growing_cache(model_config)
        self.mask_buf = torch.ones((rows, 256), dtype=torch.long, device=device)  # 1 past the mask
        self.mask_len = 0
        self.dead = 0  # evicted steps since the last compaction
        self.frame_window = frame_window
        self.offsets = [0] * rows  # each row's next M-RoPE position
        self.columns = [RowColumns() for _ in range(rows)]

    @property
    def mask(self) -> torch.Tensor:
        """The attention mask over the cache (rows x cached columns; a view of the buffer)."""
        return self.mask_buf[:, : self.mask_len]

    def append_mask(self, new: torch.Tensor | int, width: int) -> None:
        """Append ``width`` columns (a rows x width tensor, or one value for all) to the attention
        mask, in a buffer on the model's device that doubles: no copy of the whole mask, to the
        device or within it, at every step."""
        n = self.mask_len
        if n + width >= self.mask_buf.shape[1]:  # never full: a full view's strides differ
            buf = self.mask_buf
            grown = buf.new_ones((buf.shape[0], max(2 * (n + width), 64)))
            grown[:, :n] = buf[:, :n]
            self.mask_buf = grown
        if isinstance(new, int):
            if new != 1:  # the columns past the mask hold 1 already
                self.mask_buf.narrow(1, n, width).fill_(new)
        else:
            self.mask_buf.narrow(1, n, width).copy_(new)
        self.mask_len = n + width

    def note_step(
        self, b: int, k: int, pending: int, evidence: int, user: int, chunk: int, frame_from: int, keep: bool
    ) -> None:
        """Record where step ``k``'s chunk of row ``b`` goes, before it is fed: ``pending`` closing
        tokens of step k-1's turn (one range with that turn's), ``evidence`` tokens of an evidence
        turn (never evicted), then the user turn of ``user`` tokens whose timestamp starts
        ``frame_from`` tokens in and whose frame ends 2 tokens before its end; ``chunk`` tokens in all."""
        cols = self.columns[b]
        start = self.mask_len
        if pending:
            spans = cols.whole.setdefault(k - 1, [])
            if spans and spans[-1][1] == start:
                spans[-1] = (spans[-1][0], start + pending)
            else:
                spans.append((start, start + pending))
        u0 = start + pending + evidence
        cols.whole[k] = [(u0, start + chunk)]
        cols.frame_span[k] = (u0 + frame_from, u0 + user - 2)  # timestamp .. <|vision_end|>
        if keep:
            cols.keep.add(k)

    def evict(self, k: int) -> None:
        """Mask step k's columns in every row; drop the columns dead in every row from the cache every
        ``frame_window`` evictions (a masked column changes nothing, so compaction can wait: the cache
        holds at most two windows)."""
        single = len(self.columns) == 1  # one row: the buffer's columns are the row's
        for b, cols in enumerate(self.columns):
            ranges = [cols.frame_span[k]] if k in cols.keep else cols.whole.get(k, [])
            for a, z in ranges:
                (self.mask_buf if single else self.mask_buf[b]).narrow(-1, a, z - a).zero_()
            cols.whole.pop(k, None)
            cols.frame_span.pop(k, None)
        self.dead += 1
        if self.dead >= self.frame_window:  # compact once a window's worth of steps is dead
            self.compact()

    def compact(self) -> None:
        """Drop the cache columns that no row attends to any more."""
        self.dead = 0
        keep = self.mask.any(0)
        if bool(keep.all()):
            return
        index = keep.nonzero().flatten()
        for layer in self.cache.layers:
            if isinstance(layer, GrowingLayer):
                layer.keep_columns(index)
            else:
                layer.keys = layer.keys.index_select(-2, index.to(layer.keys.device))
                layer.values = layer.values.index_select(-2, index.to(layer.values.device))
        new_col = (keep.cumsum(0) - 1).tolist()
        kept = self.mask[:, index].clone()
        self.mask_buf[:, : kept.shape[1]] = kept
        self.mask_buf[:, kept.shape[1] : self.mask_len] = 1  # past the mask: 1
        self.mask_len = kept.shape[1]
        for cols in self.columns:
            cols.whole = {
                s: [(new_col[a], new_col[z - 1] + 1) for a, z in spans] for s, spans in cols.whole.items()
            }
            cols.frame_span = {s: (new_col[a], new_col[z - 1] + 1) for s, (a, z) in cols.frame_span.items()}

    def mark(self) -> Mark:
        """Where the cache stands now, for :meth:`rewind`."""
        return Mark(self.cache.get_seq_length(), self.mask_len, list(self.offsets))

    def rewind(self, mark: Mark) -> None:
        """Drop every column appended since ``mark``: the cache is cropped back to its length, the
        attention mask too, and each row's next M-RoPE position is what it was. The cache then holds
        exactly what it held at the mark (nothing is recomputed), so the next forward is the one it
        would have been. A mark holds until the next compaction (``frame_window``) moves columns."""
        extra = self.cache.get_seq_length() - mark.columns
        if extra < 0 or self.mask_len < mark.mask_len:
            raise ValueError(f"cannot rewind to a mark {-extra} columns ahead of the cache")
        if extra:
            self.cache.crop(-extra)
        self.mask_buf[:, mark.mask_len : self.mask_len] = 1  # past the mask: 1
        self.mask_len = mark.mask_len
        if len(mark.offsets) != len(self.offsets):
            raise ValueError(f"a mark of {len(mark.offsets)} rows for a run of {len(self.offsets)}")
        self.offsets = list(mark.offsets)
