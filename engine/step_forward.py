"""The streaming engine's one batched forward: a step's chunks (one per row, right-padded) into the
cache, with M-RoPE positions computed by hand and the image features merged, and the logits at
each row's last token back; ``compile=true`` runs it through ``torch.compile``
(:func:`compiled_forward`). Why each piece (positions, padding, the two-row head, uploads, the
graphs): ``engine/streaming.py``'s docstring and docs/performance.md.
"""

from __future__ import annotations

import functools
import time
from array import array
from collections.abc import Callable, Sequence

import torch

from engine.attention import streaming_attention
from engine.frame_features import Features
from engine.image_merge import deepstack_at, embed_with_images, flat_positions, placeholder_columns
from engine.kv_cache import reserve_columns
from engine.kv_static import StaticKV
from engine.kv_window import KVWindow
from engine.render import TurnRenderer
from engine.static_step import StaticStep


def _language_model_forward(lm: torch.nn.Module, **inputs):
    return lm.forward(**inputs)


@functools.cache
def _compiled_language_model_forward() -> Callable:
    return torch.compile(_language_model_forward, dynamic=True)


def compiled_forward(lm: torch.nn.Module) -> Callable:
    """``lm.forward(**inputs)`` through ``torch.compile`` with dynamic shapes. One compiled function
    serves every model of the process, the model an argument of it (its weights inputs of the
    graphs, never constants): a copy of a model with other weights (GRPO's policy after an update,
    the next checkpoint) runs its own, with the graphs already built for that architecture. The
    graphs, one per kind of forward (a step with a frame or a one-token step of a reply, for a batch
    of one and for a batch of more; the cache length, chunk width and batch size are symbolic in
    each), are built once per process.

    The engine keeps the rest out of the graphs' guards (docs/performance.md): a run's first forward,
    into an empty cache, runs eagerly; a step's KV columns are reserved before the forward
    (``engine.kv_cache.reserve_columns``), and neither they nor the attention mask ever fill their
    buffers (a view of a whole buffer strides as another shape); sizes equal by chance when a graph
    is traced (a KV buffer and the mask buffer both 256 wide) are not unified ("duck" shapes off),
    or a later step would fail that guard and recompile."""
    from torch.fx.experimental import _config as shapes_config

    compiled = _compiled_language_model_forward()

    def run(**inputs):
        with shapes_config.patch(use_duck_shape=False):
            return compiled(lm, **inputs)

    return run


def compiled_graphs() -> int:
    """Graphs ``torch.compile`` has built in this process so far: ``compiled_forward`` needs four at
    most, so a count that grows over a run means something recompiles."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


class StepForward:
    """The forward of the engine's steps and reply tokens, with what it memoizes across runs (the
    M-RoPE positions and flat image positions of each chunk shape) and the CPU seconds of its
    language-model calls since ``seconds`` was last reset."""

    def __init__(self, model, renderer: TurnRenderer, cfg):
        self.model = model
        self.renderer = renderer
        self.cfg = cfg  # the engine's EngineConfig: ``compile``
        self.device = next(model.parameters()).device
        self._pad_id = renderer.tokenizer.pad_token_id
        self._decision_ids = torch.tensor([renderer.silence_id, renderer.response_id], device=self.device)
        #: Relative M-RoPE positions of a chunk, by its shape (length, image span, grid): the
        #: positions of a step's chunk follow one pattern, computed once and shifted by the offset.
        self._rope: dict[tuple, tuple[torch.Tensor, int]] = {}
        #: The flat image positions of a step (on the device), by the rows' placeholder runs and the
        #: chunk's width when every row's run is one block: the same few patterns every step.
        self._flat: dict[tuple, torch.Tensor] = {}
        self.seconds = 0.0
        self.static = StaticStep(self, cfg)

    def upload(self, t: torch.Tensor) -> torch.Tensor:
        """A host tensor on the model's device. On a GPU through pinned memory without blocking: a
        plain copy from pageable memory makes the host wait for every kernel already queued."""
        if self.device.type == "cuda":
            return t.pin_memory().to(self.device, non_blocking=True)
        return t.to(self.device)

    def positions(
        self, chunk: list[int], grid: tuple[int, int, int] | None, images: Sequence[int]
    ) -> tuple[torch.Tensor, int]:
        """The chunk's 3-row M-RoPE positions from 0 (``get_rope_index`` on the chunk), an int64
        host tensor shaped ``(3, 1, len(chunk))`` (a step shifts it by one addition), and their
        maximum, cached by the chunk's shape: its length, where its
        image placeholders run (``images``, :func:`engine.image_merge.placeholder_columns`), and the
        image grid ``(t, h, w)``."""
        if grid is None or not images:
            key: tuple = (len(chunk),)
        elif isinstance(images, range):
            key = (len(chunk), images.start, len(images), *grid)
        else:  # not one contiguous run: no shortcut
            key = (tuple(chunk), *grid)
        found = self._rope.get(key)
        if found is None:
            t = torch.tensor(chunk)
            if grid is not None and len(key) > 1:
                mm = (t == self.renderer.image_pad_id).int()[None]
                rel, _ = self.model.model.get_rope_index(t[None], mm, image_grid_thw=torch.tensor([grid]))
                rel = rel[:, 0].cpu()
            else:
                rel = torch.arange(len(chunk)).view(1, -1).expand(3, -1)
            found = self._rope[key] = (rel[:, None].to(torch.int64).contiguous(), int(rel.max()))
        return found

    def flat_positions(self, columns: list[Sequence[int]], width: int) -> torch.Tensor:
        """:func:`engine.image_merge.flat_positions` on the device, memoized by pattern."""
        if not all(isinstance(c, range) for c in columns):
            return self.upload(torch.tensor(flat_positions(columns, width)))
        key = (width, *((c.start, c.stop) for c in columns))
        found = self._flat.get(key)
        if found is None:
            found = self._flat[key] = self.upload(torch.tensor(flat_positions(columns, width)))
        return found

    def head(self, hidden: torch.Tensor, decision: bool) -> torch.Tensor:
        """Logits of the hidden states: the whole vocabulary, or with ``decision`` the two decision
        tokens' (silence, response) alone, from those two rows of the head: a silent step needs no
        other logit, and the head is the largest single weight a step reads (151,936 x 2,560 in
        Qwen3-VL-4B)."""
        head = self.model.lm_head
        if not decision:
            return head(hidden)
        ids = self._decision_ids
        bias = None if head.bias is None else head.bias.index_select(0, ids)
        return torch.nn.functional.linear(hidden, head.weight.index_select(0, ids), bias)

    def language_model(
        self,
        kv: KVWindow,
        ids: torch.Tensor,
        pos: torch.Tensor,
        at: torch.Tensor | None,
        image: Features | None,
    ) -> torch.Tensor:
        """The language model's last hidden states over the step's tokens, the image features merged
        at the flat positions ``at`` (``engine.image_merge``), appended to the cache."""
        lm = self.model.model.language_model
        if image is None:
            embeds, deepstack = lm.embed_tokens(ids), []
        else:
            pooled = torch.cat(image.pooled)
            if len(at) != len(pooled):
                raise ValueError(f"{len(at)} image placeholders for {len(pooled)} image feature rows")
            embeds = embed_with_images(lm, ids, at, pooled)
            deepstack = [torch.cat(layer) for layer in image.deepstack]
        forward = lm
        if self.cfg.compile and kv.cache.get_seq_length():
            # the mask already counts the step's columns; one more keeps the buffers from filling
            reserve_columns(kv.cache, kv.mask_len + 1)
            forward = compiled_forward(lm)
        with streaming_attention(self.model), deepstack_at(lm, at, deepstack):
            out = forward(
                inputs_embeds=embeds,
                attention_mask=kv.mask,
                position_ids=pos,
                cache=kv.cache,
                use_cache=True,
            )
        return out.last_hidden_state

    def __call__(
        self,
        kv: KVWindow,
        chunks: list[list[int]],
        grids: list[tuple[int, int, int] | None],
        image: Features | None = None,
        decision: bool = False,
        on_device: bool = False,
    ) -> torch.Tensor:
        """Append right-padded chunks (one per row; empty = pad only) to ``kv``'s cache; returns the
        logits at each row's last real token (rows with no tokens: zeros): the vocabulary's, or
        with ``decision`` the decision pair's (:meth:`head`). Every host tensor goes to the device
        by :meth:`upload`; the logits coming back are the step's one wait for the device. With
        ``on_device`` the float32 logits stay on the device, unread (rows with no tokens: whatever
        the head gave at their pad), for a reply's tokens to be drawn there. On a
        :class:`~engine.kv_static.StaticKV` (``step="static"``) the step runs over fixed shapes
        (:class:`~engine.static_step.StaticStep`)."""
        if isinstance(kv, StaticKV):
            return self.static(kv, chunks, grids, image, decision, on_device)
        lengths = [len(c) for c in chunks]
        width = max(lengths)
        # through an int64 array.array: timed inside a step (its caches cooled by the forward), 4 us
        # to build against 12 for a numpy array of the list; torch.tensor on it takes 15-20 us
        flat = array("q")
        for c in chunks:
            flat.extend(c)
            if len(c) < width:
                flat.extend([self._pad_id] * (width - len(c)))
        ids = torch.frombuffer(flat, dtype=torch.int64).view(len(chunks), width)
        if len(chunks) == 1:
            new_mask: torch.Tensor | int = 1
        else:
            new_mask = self.upload(torch.tensor([[1] * n + [0] * (width - n) for n in lengths]))
        image_pad = self.renderer.image_pad_id
        columns = [
            range(0) if g is None else placeholder_columns(c, image_pad) for c, g in zip(chunks, grids)
        ]
        pos = self._row_positions(kv, chunks, grids, columns, width)
        kv.append_mask(new_mask, width)
        at = None
        if image is not None:
            at = self.flat_positions(columns, width)
        t0 = time.thread_time()
        hidden = self.language_model(kv, self.upload(ids), self.upload(pos), at, image)
        if len(chunks) == 1:
            last = hidden[:, lengths[0] - 1]
        else:
            ends = torch.tensor([b * width + max(n - 1, 0) for b, n in enumerate(lengths)])
            last = hidden.view(-1, hidden.shape[-1]).index_select(0, self.upload(ends))
        logits = self.head(last, decision).float()
        if on_device:
            self.seconds += time.thread_time() - t0
            return logits
        logits = logits.cpu()
        self.seconds += time.thread_time() - t0
        if 0 in lengths:
            logits[[b for b, n in enumerate(lengths) if n == 0]] = 0.0
        return logits

    def _row_positions(
        self,
        kv: KVWindow,
        chunks: list[list[int]],
        grids: list[tuple[int, int, int] | None],
        columns: list[Sequence[int]],
        width: int,
    ) -> torch.Tensor:
        """The chunks' 3-row positions, each row's shifted by its offset (advanced past the chunk),
        a padded row's last position repeated over its pads: ``(3, rows, width)``."""
        rows_pos = []
        for b, chunk in enumerate(chunks):
            offset = kv.offsets[b]
            if not chunk:
                rows_pos.append(torch.full((3, 1, width), offset, dtype=torch.int64))
                continue
            rel, top = self.positions(chunk, grids[b], columns[b])
            p = rel + offset
            if len(chunk) < width:
                p = torch.cat([p, p[:, :, -1:].expand(3, 1, width - len(chunk))], dim=2)
            rows_pos.append(p)
            kv.offsets[b] = offset + top + 1
        return rows_pos[0] if len(rows_pos) == 1 else torch.cat(rows_pos, dim=1)
