"""A run's KV cache in buffers of fixed capacity (``EngineConfig.step="static"``): the cache, the
attention mask and the write position live on the device in tensors whose shapes never change
within a run, so a step's forward is one function of fixed shapes (``engine.static_step``).

Each layer's keys and values are ``[rows, kv_heads, capacity, head_dim]`` buffers; ``valid``
(``rows x capacity``, bool) says which columns each row attends to; ``start`` (a one-element int64
tensor on the device) is where the next columns go: rows advance in lock step, as in
:class:`~engine.kv_window.KVWindow`, whose column bookkeeping (``note_step``, the spans a step
occupies, the offsets) this class inherits. What differs:

- A step's columns are written by the step function itself (``index_copy_`` at ``start``), its
  pad columns marked invalid there; the host keeps a mirror of ``valid`` (``alive``, numpy) that it
  updates from what it already knows (each row's tokens per step, the evicted spans), so it never
  reads the device to know which columns are live.
- Eviction clears spans of ``valid`` (a write, no read). Compaction moves the live columns to the
  front by one gather of every buffer with a permutation of all ``capacity`` columns computed on the
  host from ``alive`` and uploaded: a device op of fixed shape, no read-back.
- When a step would not fit, the cache is compacted first; when the live columns alone do not leave
  room, the capacity doubles (new shapes: the step functions compile once more for it).
"""

from __future__ import annotations

import numpy as np
import torch

from engine.kv_window import KVWindow, Mark


class StaticKV(KVWindow):
    """Fixed-capacity KV buffers, device mask and write position (see the module docstring)."""

    def __init__(self, model_config, rows: int, device: torch.device, frame_window: int | None):
        super().__init__(model_config, rows, device, frame_window)
        self.cache = None  # the buffers below replace the growing cache
        text = getattr(model_config, "text_config", model_config)
        self.layers = text.num_hidden_layers
        self.kv_heads = text.num_key_value_heads
        self.head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
        self.rows = rows
        self.device = device
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.start = torch.zeros(1, dtype=torch.int64, device=device)
        self.alive = np.zeros((rows, 0), dtype=bool)

    def allocate(self, capacity: int, dtype: torch.dtype) -> None:
        """The run's buffers, before its first step: ``capacity`` columns of ``dtype``."""
        self._allocate(capacity, dtype)

    def _allocate(self, capacity: int, dtype: torch.dtype | None) -> None:
        """Buffers of ``capacity`` columns holding what the current ones hold (their first columns)."""
        n = self.mask_len
        shape = (self.rows, self.kv_heads, capacity, self.head_dim)
        dtype = dtype or (self.keys[0].dtype if self.keys else torch.float32)
        keys = [torch.zeros(shape, dtype=dtype, device=self.device) for _ in range(self.layers)]
        values = [torch.zeros(shape, dtype=dtype, device=self.device) for _ in range(self.layers)]
        valid = torch.zeros((self.rows, capacity), dtype=torch.bool, device=self.device)
        alive = np.zeros((self.rows, capacity), dtype=bool)
        if self.keys:
            for new, old in zip(keys + values, self.keys + self.values, strict=True):
                new[..., :n, :] = old[..., :n, :]
            valid[:, :n] = self.mask_buf[:, :n]
            alive[:, :n] = self.alive[:, :n]
        self.keys, self.values, self.mask_buf, self.alive = keys, values, valid, alive

    @property
    def capacity(self) -> int:
        """Columns of the buffers (0 before :meth:`allocate`)."""
        return self.alive.shape[1]

    def room(self, width: int) -> None:
        """Make room for ``width`` more columns: compact, then double the capacity if still short."""
        if self.mask_len + width <= self.capacity:
            return
        self.compact()
        capacity = self.capacity
        while self.mask_len + width > capacity:
            capacity *= 2
        if capacity != self.capacity:
            self._allocate(capacity, None)

    def wrote(self, lengths: list[int], width: int) -> None:
        """The step function wrote ``width`` columns at ``start``, row b's first ``lengths[b]`` real."""
        n = self.mask_len
        for b, m in enumerate(lengths):
            self.alive[b, n : n + min(m, width)] = True
        self.mask_len = n + width

    def append_mask(self, new, width: int) -> None:
        raise NotImplementedError("StaticKV's columns are written by the step function (engine.static_step)")

    def evict(self, k: int) -> None:
        """Clear step k's spans from ``valid`` and the host mirror; compact every ``frame_window``."""
        for b, cols in enumerate(self.columns):
            ranges = [cols.frame_span[k]] if k in cols.keep else cols.whole.get(k, [])
            for a, z in ranges:
                self.mask_buf[b, a:z] = False
                self.alive[b, a:z] = False
            cols.whole.pop(k, None)
            cols.frame_span.pop(k, None)
        self.dead += 1
        if self.dead >= self.frame_window:
            self.compact()

    def compact(self) -> None:
        """Move the columns some row attends to, in order, to the front of every buffer: a gather by
        a permutation of all the columns, computed on the host from ``alive``."""
        self.dead = 0
        n = self.mask_len
        keep = self.alive[:, :n].any(0)
        if keep.all():
            return
        index = np.flatnonzero(keep)
        rest = np.setdiff1d(np.arange(self.capacity), index, assume_unique=True)
        perm = torch.from_numpy(np.concatenate([index, rest])).to(self.device)
        for buf in self.keys + self.values:
            buf.copy_(buf.index_select(2, perm))
        self.mask_buf.copy_(self.mask_buf.index_select(1, perm))
        self.alive = self.alive[:, np.concatenate([index, rest])]
        kept, shift = (np.cumsum(keep) - 1).tolist(), len(index) - n

        def moved(a: int, z: int) -> tuple[int, int]:
            # columns noted for the step about to be written (at or past n, possibly past the
            # capacity: a step wider than the room left) move down with the rest
            return (kept[a] if a < n else a + shift), (kept[z - 1] + 1 if z <= n else z + shift)

        self.mask_len = len(index)
        for cols in self.columns:
            cols.whole = {s: [moved(a, z) for a, z in spans] for s, spans in cols.whole.items()}
            cols.frame_span = {s: moved(a, z) for s, (a, z) in cols.frame_span.items()}

    def nbytes(self) -> int:
        """Bytes of the key and value buffers."""
        return sum(t.numel() * t.element_size() for t in self.keys + self.values)

    def mark(self) -> Mark:
        raise NotImplementedError("branches (engine.probes) run with step=eager")

    def rewind(self, mark: Mark) -> None:
        raise NotImplementedError("branches (engine.probes) run with step=eager")
