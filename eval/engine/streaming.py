"""Causal streaming with a KV cache: one forward pass per step, the decisions of a full re-run.

    engine = StreamingEngine(model, renderer, EngineConfig(threshold=0.5))
    [result] = engine.run([stream], [frames])        # result.steps, result.replies()
    engine.run([stream] * 4, [window_frames] * 4, first_steps=[20] * 4)   # steps 20.. of a stream (GRPO)

At each step the engine appends the step's user turn (timestamp + frame, plus the instruction on
its step) and the assistant header to the cache, reads the two decision logits at the decision
position, and either stays silent or fires (``p = softmax(l_S, l_R)[R] >= threshold``; with
``sample=True`` the decision is drawn from that two-way distribution at ``temperature``, for RL).
A fired turn's text is decoded until ``<|im_end|>``. The assistant turn's closing tokens are fed
with the next step's chunk, so a silent step costs exactly one forward pass.

Exactness (docs/design.md): cached decoding matches a full forward only with hand-computed M-RoPE
positions. Every chunk's 3-row position ids come from ``model.model.get_rope_index`` on the chunk,
shifted by the row's running offset (max position so far + 1), and are passed explicitly.

Batching: rows advance in lock step. Each step's chunk is right-padded; one 2-D attention mask
covers the whole cache, so pad columns are holes that no query attends to (right padding also
keeps every query row with at least one visible key, which left padding at step 0 would not).

Bounded frame window (``frame_window=N``): once a step is N steps old it is evicted: the whole
step (user turn and silent assistant turn) when it carried no instruction and no reply, else only
its timestamp and frame tokens. Evicted columns are masked per row and removed from the cache once
dead in every row (in batches, every ``frame_window`` evictions: a masked column changes nothing),
so memory stays flat on long videos. Positions keep counting up.

Branches (``eval.engine.probes``): ``_mark`` records where the cache stands and ``_rewind`` crops it back
there, the mask and the rows' M-RoPE offsets too, so a lookahead (a probe's question and answer)
leaves the cache exactly as it found it.

Work per step is kept flat in the stream's length: memoized token ids, M-RoPE positions shifted per
chunk shape, a mask buffer on the device, an in-place KV cache (``eval.engine.kv_cache``), attention over the
grouped heads (``eval.engine.attention``), a decision read from two rows of the LM head, and one
device-to-host read per step (image features merged by ``eval.engine.image_merge``, uploads through pinned
memory). With ``compile`` the language model's forward runs through ``torch.compile``
(:func:`compiled_forward`). ``step_timings`` records each step's CPU, language-model and vision
time. Why each of these, and the measurements: docs/performance.md.

Frames are prepared when a row reaches them: ``frame_chunk`` steps at a time, the processor
(pixel values, grids) and the vision tower run on that chunk only (a live camera would use 1), so
host memory holds one chunk of pixels and features, whatever the stream's length. Frames arrive
as arrays, possibly memory-mapped (a ``FrameCache`` hit): the engine reads each chunk once, then
hands its pages back to the OS (``data_builders.frame_pages.release_frames``), so a long stream's
frames do not pile up in the process either. Frames shared by several rows (the same array
object, as in a GRPO group) are prepared once and their features reused for every row.
``frames_encoded`` counts the frames the vision tower saw.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from data_builders.frame_cache import FrameCache
from data_builders.frame_pages import release_frames
from data_builders.frames import stream_frames
from data_builders.record_io import resolve_video
from data_builders.records import Reply, Stream
from data_builders.stream_steps import step_times
from eval.engine.attention import streaming_attention
from eval.engine.image_merge import deepstack_at, embed_with_images, flat_positions, placeholder_columns
from eval.engine.kv_cache import GrowingLayer, growing_cache, reserve_columns
from eval.engine.render import TurnRenderer, timestamp_text
from rewards.turns import parse_turn

BLANK_GREY = 128  # the value of every pixel of a blank-video control frame


@dataclass
class EngineConfig:
    threshold: float = 0.5
    """Fire when P(</Response>) at the decision position is at least this (threshold mode)."""
    max_new_tokens: int = 32
    """Longest response text, in tokens."""
    frame_window: int | None = None
    """Keep only the last N steps' frames in the cache (None: keep everything)."""
    sample: bool = False
    """Draw decisions and response tokens at ``temperature`` instead of threshold / greedy."""
    temperature: float = 1.0
    seed: int = 0
    frame_chunk: int = 16
    """Frames encoded per vision call (1: strictly one frame per step, as a live camera gives them)."""
    compile: bool = False
    """Run the language model's forward through ``torch.compile`` (:func:`compiled_forward`): faster
    steps once its graphs are built, minutes for a 4B model's on first use in a process."""


@dataclass
class StepDecision:
    """One step: index, time (record axis), P(response), the raw assistant turn, decision logits."""

    step: int
    time: float
    p_response: float
    fired: bool
    text: str
    decision_logits: tuple[float, float] = (0.0, 0.0)  # (silence, response)
    latency_s: float = 0.0


@dataclass
class StreamResult:
    """A stream's decisions plus, for RL, every token fed and which of them the model generated."""

    stream_id: str
    steps: list[StepDecision] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    generated: list[bool] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)  # one per generated token

    def replies(self, allowed_categories=None) -> list[Reply]:
        """Fired turns as replies (time, text, category), in time order."""
        out = []
        for s in self.steps:
            if s.fired:
                turn = parse_turn(s.text, allowed=allowed_categories)
                out.append(Reply(time=s.time, text=turn.text or "", category=turn.category))
        return out


def evidence_turn(renderer: TurnRenderer, text: str) -> list[int]:
    """Ids of a memory evidence block appended as its own user turn (before a step's user turn)."""
    return renderer.encode(f"<|im_start|>user\nEvidence:\n{text}<|im_end|>\n")


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
    (``eval.engine.kv_cache.reserve_columns``), and neither they nor the attention mask ever fill their
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


def decision_probability(logits: torch.Tensor, silence_id: int, response_id: int) -> torch.Tensor:
    """P(</Response>) from the two decision logits (last dim = vocabulary)."""
    pair = torch.stack([logits[..., silence_id], logits[..., response_id]], dim=-1).float()
    return torch.softmax(pair, dim=-1)[..., 1]


@dataclass
class _Chunk:
    """Steps ``[start, end)`` of one frame array, prepared: grids and vision-tower features."""

    start: int
    end: int
    grid: torch.Tensor  # (frames, 3)
    tokens: list[int]  # image placeholder tokens of each frame
    pooled: Sequence[torch.Tensor]  # one per frame
    deepstack: list[Sequence[torch.Tensor]]  # per deepstack layer, one per frame


@dataclass
class _Features:
    """A step's image features: per active row (in row order) its frame's pooled features (a row per
    placeholder token) and, per deepstack layer, the same rows of that layer's features."""

    pooled: tuple[torch.Tensor, ...]
    deepstack: list[tuple[torch.Tensor, ...]]


@dataclass
class _Row:
    stream: Stream
    frames: np.ndarray
    result: StreamResult
    pending: list[int] = field(default_factory=list)  # closing tokens of the last assistant turn
    pending_flags: list[bool] = field(default_factory=list)  # which of them the model generated
    pending_logprobs: list[float] = field(default_factory=list)
    offset: int = 0  # next M-RoPE position
    whole: dict[int, list[tuple[int, int]]] = field(default_factory=dict)  # step -> column ranges
    frame_span: dict[int, tuple[int, int]] = field(default_factory=dict)
    keep: set[int] = field(default_factory=set)  # steps with an instruction or a reply
    context_at: set[int] | None = None  # the steps whose user turn may carry context (lazily)


@dataclass(frozen=True)
class _Mark:
    """A point of a run to come back to: cache columns, attention-mask length, rows' next positions."""

    columns: int
    mask_len: int
    offsets: list[int]


class StreamingEngine:
    """KV-cache streaming over one or many streams (see the module docstring)."""

    def __init__(self, model, renderer: TurnRenderer, cfg: EngineConfig | None = None, memory=None):
        self.model = model
        self.memory = (
            memory  # optional: evidence(stream, step_time, frame=) -> str | None (eval.engine.memory)
        )
        self.renderer = renderer
        self.cfg = cfg or EngineConfig()
        if self.cfg.frame_window is not None and self.cfg.frame_window < 1:
            raise ValueError(f"frame_window must be at least 1 step, got {self.cfg.frame_window}")
        self.device = next(model.parameters()).device
        self._pad_id = renderer.tokenizer.pad_token_id
        self._decision_ids = torch.tensor([renderer.silence_id, renderer.response_id], device=self.device)
        self.frames_encoded = 0
        self.generator = torch.Generator().manual_seed(self.cfg.seed)
        #: Relative M-RoPE positions of a chunk, by its shape (length, image span, grid): the
        #: positions of a step's chunk follow one pattern, computed once and shifted by the offset.
        self._rope: dict[tuple, torch.Tensor] = {}
        #: The flat image positions of a step (on the device), by the rows' placeholder runs and the
        #: chunk's width when every row's run is one block: the same few patterns every step.
        self._flat: dict[tuple, torch.Tensor] = {}
        #: Per step, in CPU seconds of the engine's thread (``time.thread_time``: what a busy machine
        #: does to the wall clock does not count): the whole step, the language model's forward, the
        #: vision call (processor + vision tower); the rest is the engine's own host work
        #: (``python -m eval.bench``'s ``host_ms_per_step``). Wall time per step: ``StepDecision.latency_s``.
        self.step_timings: list[tuple[float, float, float]] = []
        #: Called as ``step_hook(engine, k)`` once step k is done (``python -m eval.bench profile``
        #: starts and stops its profiler there).
        self.step_hook: Callable[[StreamingEngine, int], None] | None = None

    # -- vision -------------------------------------------------------------------------------

    def _prepare(self, k: int, active: list[int]) -> None:
        """Make step k's frame ready for the active rows. A row past its frame array's prepared
        chunk gets the next ``frame_chunk`` frames through the processor and the vision tower, in
        one call for all such arrays (amortizing its fixed cost); arrays shared by rows once. The
        chunk it replaces is released (its pixels and features dropped, its mapped pages freed)."""
        need: dict[int, np.ndarray] = {}
        for b in active:
            frames = self.rows[b].frames
            held = self._chunks.get(id(frames))
            if held is None or not held.start <= k < held.end:
                need.setdefault(id(frames), frames)
        if not need:
            return
        t0 = time.thread_time()
        spans, pvs, grids = [], [], []
        for key, frames in need.items():
            end = min(k + self.cfg.frame_chunk, len(frames))
            pv, grid = self.renderer.encode_frames(frames[k:end])
            spans.append((key, frames, end))
            pvs.append(pv)
            grids.append(grid)
        grid = torch.cat(grids)
        out = self.model.model.get_image_features(self._upload(torch.cat(pvs)), self._upload(grid))
        self.frames_encoded += int(grid.shape[0])
        i = 0
        for key, frames, end in spans:
            n = end - k
            self._release(key, frames)
            self._chunks[key] = _Chunk(
                k,
                end,
                grid[i : i + n],
                [self.renderer.image_tokens(g) for g in grid[i : i + n]],
                out.pooler_output[i : i + n],
                [layer[i : i + n] for layer in out.deepstack_features],
            )
            i += n
        self._vision_s += time.thread_time() - t0

    def _release(self, key: int, frames: np.ndarray) -> None:
        held = self._chunks.pop(key, None)
        if held is not None:
            release_frames(frames, held.start, held.end)

    def _image_features(self, k: int, active: list[int]) -> _Features:
        """Step k's image features of the active rows (prepared by :meth:`_prepare`)."""
        picks = [self._chunks[id(self.rows[b].frames)] for b in active]
        return _Features(
            pooled=tuple(c.pooled[k - c.start] for c in picks),
            deepstack=[
                tuple(c.deepstack[j][k - c.start] for c in picks) for j in range(len(picks[0].deepstack))
            ],
        )

    def _grid(self, b: int, k: int) -> tuple[torch.Tensor, int]:
        """Step k's image grid in row b and its number of placeholder tokens."""
        chunk = self._chunks[id(self.rows[b].frames)]
        return chunk.grid[k - chunk.start], chunk.tokens[k - chunk.start]

    # -- one batched forward ------------------------------------------------------------------

    def _positions(
        self, chunk: list[int], grid: torch.Tensor | None, images: Sequence[int]
    ) -> tuple[torch.Tensor, int]:
        """The chunk's 3-row M-RoPE positions from 0 (``get_rope_index`` on the chunk) and their
        maximum, cached by the chunk's shape: its length, where its image placeholders run
        (``images``, :func:`eval.engine.image_merge.placeholder_columns`), and the image grid."""
        pad = self.renderer.image_pad_id
        if grid is None or not images:
            key: tuple = (len(chunk),)
        elif isinstance(images, range):
            key = (len(chunk), images.start, len(images), *grid.tolist())
        else:  # not one contiguous run: no shortcut
            key = (tuple(chunk), *grid.tolist())
        found = self._rope.get(key)
        if found is None:
            t = torch.tensor(chunk)
            if grid is not None and len(key) > 1:
                mm = (t == pad).int()[None]
                rel, _ = self.model.model.get_rope_index(t[None], mm, image_grid_thw=grid[None])
                rel = rel[:, 0].cpu()
            else:
                rel = torch.arange(len(chunk)).view(1, -1).expand(3, -1)
            found = self._rope[key] = (rel, int(rel.max()))
        return found

    def _flat_positions(self, columns: list[Sequence[int]], width: int) -> torch.Tensor:
        """:func:`eval.engine.image_merge.flat_positions` on the device, memoized by pattern."""
        if not all(isinstance(c, range) for c in columns):
            return self._upload(torch.tensor(flat_positions(columns, width)))
        key = (width, *((c.start, c.stop) for c in columns))
        found = self._flat.get(key)
        if found is None:
            found = self._flat[key] = self._upload(torch.tensor(flat_positions(columns, width)))
        return found

    def _append_mask(self, new: torch.Tensor | int, width: int) -> None:
        """Append ``width`` columns (a rows x width tensor, or one value for all) to the attention
        mask, in a buffer on the model's device that doubles: no copy of the whole mask, to the
        device or within it, at every step."""
        n = self._mask_len
        if n + width >= self._mask_buf.shape[1]:  # never full: a full view's strides differ
            buf = self._mask_buf
            grown = buf.new_zeros((buf.shape[0], max(2 * (n + width), 64)))
            grown[:, :n] = buf[:, :n]
            self._mask_buf = grown
        cols = self._mask_buf.narrow(1, n, width)
        if isinstance(new, int):
            cols.fill_(new)
        else:
            cols.copy_(new)
        self._mask_len = n + width

    @property
    def mask(self) -> torch.Tensor:
        """The attention mask over the cache (rows x cached columns; a view of the buffer)."""
        return self._mask_buf[:, : self._mask_len]

    def _upload(self, t: torch.Tensor) -> torch.Tensor:
        """A host tensor on the model's device. On a GPU through pinned memory without blocking: a
        plain copy from pageable memory makes the host wait for every kernel already queued."""
        if self.device.type == "cuda":
            return t.pin_memory().to(self.device, non_blocking=True)
        return t.to(self.device)

    def _head(self, hidden: torch.Tensor, decision: bool) -> torch.Tensor:
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

    def _language_model(
        self, ids: torch.Tensor, pos: torch.Tensor, at: torch.Tensor | None, image: _Features | None
    ) -> torch.Tensor:
        """The language model's last hidden states over the step's tokens, the image features merged
        at the flat positions ``at`` (``eval.engine.image_merge``), appended to the cache."""
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
        if self.cfg.compile and self.cache.get_seq_length():
            # the mask already counts the step's columns; one more keeps the buffers from filling
            reserve_columns(self.cache, self._mask_len + 1)
            forward = compiled_forward(lm)
        with streaming_attention(self.model), deepstack_at(lm, at, deepstack):
            out = forward(
                inputs_embeds=embeds,
                attention_mask=self.mask,
                position_ids=pos,
                cache=self.cache,
                use_cache=True,
            )
        return out.last_hidden_state

    def _forward(
        self,
        chunks: list[list[int]],
        grids: list[torch.Tensor | None],
        image: _Features | None = None,
        decision: bool = False,
    ) -> torch.Tensor:
        """Append right-padded chunks (one per row; empty = pad only) to the cache; returns the
        logits at each row's last real token (rows with no tokens: zeros): the vocabulary's, or
        with ``decision`` the decision pair's (:meth:`_head`). Every host tensor goes to the device
        by :meth:`_upload`; the logits coming back are the step's one wait for the device."""
        lengths = [len(c) for c in chunks]
        width = max(lengths)
        pad = self._pad_id
        if len(chunks) == 1:
            ids = torch.tensor(chunks, dtype=torch.long)
            new_mask: torch.Tensor | int = 1
        else:
            ids = torch.tensor([c + [pad] * (width - len(c)) for c in chunks], dtype=torch.long)
            new_mask = self._upload(torch.tensor([[1] * n + [0] * (width - n) for n in lengths]))
        image_pad = self.renderer.image_pad_id
        columns = [
            range(0) if g is None else placeholder_columns(c, image_pad) for c, g in zip(chunks, grids)
        ]
        rows_pos = []
        for b, chunk in enumerate(chunks):
            row = self.rows[b]
            if not chunk:
                rows_pos.append(torch.full((3, width), row.offset, dtype=torch.long))
                continue
            rel, top = self._positions(chunk, grids[b], columns[b])
            p = rel + row.offset
            if len(chunk) < width:
                p = torch.cat([p, p[:, -1:].expand(3, width - len(chunk))], dim=1)
            rows_pos.append(p)
            row.offset += top + 1
        pos = rows_pos[0][:, None] if len(rows_pos) == 1 else torch.stack(rows_pos, dim=1)
        self._append_mask(new_mask, width)
        at = None
        if image is not None:
            at = self._flat_positions(columns, width)
        t0 = time.thread_time()
        hidden = self._language_model(self._upload(ids), self._upload(pos), at, image)
        if len(chunks) == 1:
            last = hidden[:, lengths[0] - 1]
        else:
            ends = torch.tensor([b * width + max(n - 1, 0) for b, n in enumerate(lengths)])
            last = hidden.view(-1, hidden.shape[-1]).index_select(0, self._upload(ends))
        logits = self._head(last, decision).float().cpu()
        self._model_s += time.thread_time() - t0
        if 0 in lengths:
            logits[[b for b, n in enumerate(lengths) if n == 0]] = 0.0
        return logits

    # -- eviction -----------------------------------------------------------------------------

    def _evict(self, k: int) -> None:
        """Mask step k's columns in every row; drop the columns dead in every row from the cache every
        ``frame_window`` evictions (a masked column changes nothing, so compaction can wait: the cache
        holds at most two windows)."""
        for b, row in enumerate(self.rows):
            ranges = [row.frame_span[k]] if k in row.keep else row.whole.get(k, [])
            for a, z in ranges:
                self._mask_buf[b].narrow(0, a, z - a).zero_()
            row.whole.pop(k, None)
            row.frame_span.pop(k, None)
        self._dead += 1
        if self._dead >= self.cfg.frame_window:  # compact once a window's worth of steps is dead
            self._compact()

    def _compact(self) -> None:
        """Drop the cache columns that no row attends to any more."""
        self._dead = 0
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
        self._mask_buf[:, : kept.shape[1]] = kept
        self._mask_len = kept.shape[1]
        for row in self.rows:
            row.whole = {
                s: [(new_col[a], new_col[z - 1] + 1) for a, z in spans] for s, spans in row.whole.items()
            }
            row.frame_span = {s: (new_col[a], new_col[z - 1] + 1) for s, (a, z) in row.frame_span.items()}

    # -- decisions ----------------------------------------------------------------------------

    def _choose(
        self, pair: torch.Tensor
    ) -> tuple[list[bool], list[float], list[float], list[tuple[float, float]]]:
        """Per row, from its two decision logits (silence, response): fired, P(response), the
        log-prob of the chosen decision, and the two logits."""
        logits_pair = [tuple(x) for x in pair.tolist()]
        if self.cfg.sample:
            logp = torch.log_softmax(pair / self.cfg.temperature, dim=-1)
            fired_t = torch.multinomial(logp.exp(), 1, generator=self.generator)[:, 0].bool()
            chosen = logp.gather(1, fired_t.long()[:, None])[:, 0].tolist()
            p = torch.softmax(pair, dim=-1)[:, 1].tolist()
            return fired_t.tolist(), p, chosen, logits_pair
        fired, p, chosen = [], [], []
        for silence, response in logits_pair:  # a two-way softmax in plain floats
            d = silence - response
            p_resp = 1.0 / (1.0 + math.exp(d)) if d < 700 else 0.0
            fire = p_resp >= self.cfg.threshold
            top = max(silence, response)
            lse = top + math.log(math.exp(silence - top) + math.exp(response - top))
            fired.append(fire)
            p.append(p_resp)
            chosen.append((response if fire else silence) - lse)
        return fired, p, chosen, logits_pair

    def _next_token(self, logits: torch.Tensor) -> tuple[int, float]:
        logits = self.renderer.mask_text_logits(logits)
        if self.cfg.sample:
            logp = torch.log_softmax(logits / self.cfg.temperature, dim=-1)
            tok = int(torch.multinomial(logp.exp(), 1, generator=self.generator))
        else:
            logp = torch.log_softmax(logits, dim=-1)
            tok = int(logits.argmax())
        return tok, float(logp[tok])

    def _feed(self, b: int, tokens: list[int], generated: list[bool], logprobs: list[float]) -> None:
        res = self.rows[b].result
        res.tokens += tokens
        res.generated += generated
        res.logprobs += logprobs

    def _begin(self, streams: list[Stream], frames: list[np.ndarray]) -> None:
        """A run's empty state: one row per stream, an empty cache and attention mask."""
        self.rows = [_Row(s, fr, StreamResult(s.id)) for s, fr in zip(streams, frames, strict=True)]
        self._chunks: dict[int, _Chunk] = {}  # id(frame array) -> its prepared chunk
        self.cache = growing_cache(self.model.config)
        self._mask_buf = torch.zeros((len(streams), 256), dtype=torch.long, device=self.device)
        self._mask_len = 0
        self._dead = 0
        self._model_s = self._vision_s = 0.0

    def _mark(self) -> _Mark:
        """Where the cache stands now, for :meth:`_rewind` (a lookahead branch: ``eval.engine.probes``)."""
        return _Mark(self.cache.get_seq_length(), self._mask_len, [row.offset for row in self.rows])

    def _rewind(self, mark: _Mark) -> None:
        """Drop every column appended since ``mark``: the cache is cropped back to its length, the
        attention mask too, and each row's next M-RoPE position is what it was. The cache then holds
        exactly what it held at the mark (nothing is recomputed), so the next forward is the one it
        would have been. A mark holds until the next compaction (``frame_window``) moves columns."""
        extra = self.cache.get_seq_length() - mark.columns
        if extra < 0 or self._mask_len < mark.mask_len:
            raise ValueError(f"cannot rewind to a mark {-extra} columns ahead of the cache")
        if extra:
            self.cache.crop(-extra)
        self._mask_len = mark.mask_len
        for row, offset in zip(self.rows, mark.offsets, strict=True):
            row.offset = offset

    # -- one step of a run: open every row's turn, decide, reply, close ------------------------

    # hot path: one call per step, the row loop inside; no allocation beyond what the step had
    def _open_turns(
        self, k: int, active: list[int], first_steps: list[int], times: list[list[float]]
    ) -> tuple[list[list[int]], list[torch.Tensor | None]]:
        """Step ``k``'s chunk per row (the last turn's closing tokens, any evidence turn, the user
        turn with the frame, the assistant opening) and its image grid; records each row's column
        spans (for eviction) and feeds the chunk to the row's result."""
        r = self.renderer
        chunks: list[list[int]] = [[] for _ in self.rows]
        grids: list[torch.Tensor | None] = [None] * len(self.rows)
        for b in active:
            row = self.rows[b]
            if row.context_at is None:
                row.context_at = r.context_steps(row.stream, first_steps[b])
            step = first_steps[b] + k
            context = r.context_for_step(row.stream, step, first_steps[b]) if step in row.context_at else None
            grids[b], n_image = self._grid(b, k)
            user = r.user_turn(times[b][k] - row.stream.clip_start, n_image, context)
            block = None
            if self.memory is not None:  # a new evidence block becomes its own user turn
                block = self.memory.evidence(row.stream, times[b][k], frame=row.frames[k])
            mem = evidence_turn(r, block) if block else []  # never evicted: outside whole/frame_span
            chunks[b] = row.pending + mem + user + r.assistant_open
            start = self._mask_len
            if row.pending:  # closing tokens of step k-1's assistant turn (one range with its turn's)
                spans = row.whole.setdefault(k - 1, [])
                if spans and spans[-1][1] == start:
                    spans[-1] = (spans[-1][0], start + len(row.pending))
                else:
                    spans.append((start, start + len(row.pending)))
            u0 = start + len(row.pending) + len(mem)
            row.whole[k] = [(u0, start + len(chunks[b]))]
            ts = u0 + len(r._user_open) + (len(r.encode(context + "\n")) if context else 0)
            row.frame_span[k] = (ts, u0 + len(user) - 2)  # timestamp .. <|vision_end|>
            if context:
                row.keep.add(k)
            rest = [False] * (len(chunks[b]) - len(row.pending))
            self._feed(b, chunks[b], row.pending_flags + rest, row.pending_logprobs)
            row.pending, row.pending_flags, row.pending_logprobs = [], [], []
        return chunks, grids

    # hot path: one call per step; its forward per reply token is what costs
    def _respond(
        self, k: int, firing: list[int], logp_dec: list[float]
    ) -> tuple[dict[int, list[int]], dict[int, float]]:
        """Decode the reply of every row that fired at step ``k``, all rows in one forward per
        token: each row's reply tokens (without the response token), and the log-prob of
        ``<|im_end|>`` for the rows whose model closed its turn itself (the others hit
        ``max_new_tokens``)."""
        r = self.renderer
        texts: dict[int, list[int]] = {b: [] for b in firing}
        im_end_logprob: dict[int, float] = {}
        if not firing:
            return texts, im_end_logprob
        step_tokens = {b: [r.response_id] for b in firing}
        for b in firing:
            self._feed(b, [r.response_id], [True], [logp_dec[b]])
            self.rows[b].keep.add(k)
        live = set(firing)
        for _ in range(self.cfg.max_new_tokens + 1):
            feed = [step_tokens[b][-1:] if b in live else [] for b in range(len(self.rows))]
            out = self._forward(feed, [None] * len(self.rows))
            for b in list(live):
                if len(texts[b]) == self.cfg.max_new_tokens:
                    live.discard(b)
                    continue
                tok, lp = self._next_token(out[b])
                if tok == r.im_end_id:
                    live.discard(b)
                    im_end_logprob[b] = lp
                    continue
                texts[b].append(tok)
                step_tokens[b].append(tok)
                self._feed(b, [tok], [True], [lp])
            if not live:
                break
        return texts, im_end_logprob

    # hot path: one Python call per row per step, nothing beside the step's forward passes
    def _close_turn(
        self,
        row: _Row,
        reply: list[int] | None,
        im_end_logprob: float | None,
        logp_decision: float,
        silence_text: str,
    ) -> str:
        """Set the closing tokens of the row's assistant turn (fed at the start of its next chunk)
        and return the turn's text: the reply (``None``: the row stayed silent) or the silence."""
        r = self.renderer
        if reply is None:
            row.pending = [r.silence_id] + r.turn_end
            row.pending_flags = [True] + [False] * len(r.turn_end)
            row.pending_logprobs = [logp_decision]
            return silence_text
        ended = im_end_logprob is not None  # the model itself closed its turn
        row.pending = list(r.turn_end)
        row.pending_flags = [ended] + [False] * (len(r.turn_end) - 1)
        row.pending_logprobs = [im_end_logprob] if ended else []
        return r.tokenizer.decode([r.response_id] + reply, skip_special_tokens=False)

    @torch.no_grad()
    def run(
        self, streams: list[Stream], frames: list[np.ndarray], first_steps: list[int] | None = None
    ) -> list[StreamResult]:
        """Stream every row to its last frame; rows with fewer frames stop early. ``frames[b][i]`` is
        step ``first_steps[b] + i`` of its stream (default 0): a window of a stream keeps the clip
        clock and gets the instruction (and history) in its first turn, as ``TurnRenderer.render``
        renders it for SFT."""
        r = self.renderer
        first_steps = list(first_steps) if first_steps is not None else [0] * len(streams)
        self._begin(streams, frames)
        silence_text = r.tokenizer.decode([r.silence_id], skip_special_tokens=False)
        sps = r.steps_per_second
        times = [
            step_times(row.stream, sps)[a : a + len(row.frames)]
            for row, a in zip(self.rows, first_steps, strict=True)
        ]
        r.warm([timestamp_text(t - row.stream.clip_start) for row, ts in zip(self.rows, times) for t in ts])
        for k in range(max(len(t) for t in times)):
            t0, c0 = time.perf_counter(), time.thread_time()
            self._model_s = self._vision_s = 0.0
            active = [b for b in range(len(self.rows)) if k < len(times[b])]
            self._prepare(k, active)
            chunks, grids = self._open_turns(k, active, first_steps, times)
            pair = self._forward(chunks, grids, self._image_features(k, active), decision=True)
            fired, p, logp_dec, decision_logits = self._choose(pair)
            replies, im_end_logprob = self._respond(k, [b for b in active if fired[b]], logp_dec)
            for b in active:
                row = self.rows[b]
                reply = replies.get(b)
                text = self._close_turn(row, reply, im_end_logprob.get(b), logp_dec[b], silence_text)
                row.result.steps.append(
                    StepDecision(
                        first_steps[b] + k,
                        times[b][k],
                        p[b],
                        reply is not None,
                        text,
                        decision_logits[b],
                        time.perf_counter() - t0,
                    )
                )
            if self.cfg.frame_window is not None and k - self.cfg.frame_window >= 0:
                self._evict(k - self.cfg.frame_window)
            self.step_timings.append((time.thread_time() - c0, self._model_s, self._vision_s))
            if self.step_hook is not None:
                self.step_hook(self, k)
        if self._dead:
            self._compact()  # the cache a run leaves holds no dead column
        for b, row in enumerate(self.rows):  # the last turn's closing tokens (never fed to the cache)
            self._feed(b, row.pending, row.pending_flags, row.pending_logprobs)
            self._release(id(row.frames), row.frames)
        return [row.result for row in self.rows]

    def cache_length(self) -> int:
        return self._mask_len


def stream_batches(
    model,
    renderer: TurnRenderer,
    streams: list[Stream],
    path: Path,
    engine_cfg: EngineConfig,
    *,
    batch_size: int,
    cache: FrameCache | None = None,
    blank: bool = False,
    video_root: str | None = None,
    memory=None,
    skip: set[str] | frozenset[str] = frozenset(),
) -> Iterator[tuple[list[Stream], list[StreamResult]]]:
    """The streams not in ``skip``, ``batch_size`` at a time, through the engine (frames read per
    batch, every frame blank grey with ``blank``): yields each batch with its results."""
    for i in range(0, len(streams), batch_size):
        batch = [s for s in streams[i : i + batch_size] if s.id not in skip]
        if not batch:
            continue
        frames = [
            stream_frames(
                s, resolve_video(s, path, video_root), renderer.cfg, renderer.steps_per_second, cache
            )
            for s in batch
        ]
        if blank:
            frames = [np.full_like(f, BLANK_GREY) for f in frames]
        with torch.inference_mode():
            results = StreamingEngine(model, renderer, engine_cfg, memory=memory).run(batch, frames)
        yield batch, results
