"""Causal streaming with a KV cache: one forward pass per step, the decisions of a full re-run.

    streamer = StreamingEngine(model, renderer, EngineConfig(threshold=0.5))
    [result] = streamer.run([stream], [frames])        # result.steps, result.replies()
    streamer.run([stream] * 4, [window_frames] * 4, first_steps=[20] * 4)   # steps 20.. of a stream (GRPO)

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

Branches (``engine.probes``): ``KVWindow.mark`` records where the cache stands and
``KVWindow.rewind`` crops it back there, the mask and the rows' M-RoPE offsets too, so a lookahead
(a probe's question and answer) leaves the cache exactly as it found it.

Work per step is kept flat in the stream's length: memoized token ids, M-RoPE positions shifted per
chunk shape, a mask buffer on the device, an in-place KV cache (``engine.kv_cache``), attention over the
grouped heads (``engine.attention``), a decision read from two rows of the LM head, and one
device-to-host read per step (image features merged by ``engine.image_merge``, uploads through pinned
memory; a reply's tokens drawn on the device, one id and log-prob per row read back a token,
``engine.decisions``). With ``compile`` the language model's forward runs through ``torch.compile``
(:func:`engine.step_forward.compiled_forward`). ``step_timings`` records each step's CPU,
language-model and vision time. Why each of these, and the measurements: docs/performance.md.

Frames are prepared when a row reaches them: ``frame_chunk`` steps at a time, the frames are
prepared (pixel values, grids: by default on the model's device from uint8, ``engine.frame_prep``;
``frame_prep="host"``: the image processor) and the vision tower runs on that chunk only (a live
camera would use 1), so host memory holds one chunk of pixels and features, whatever the stream's length. Frames arrive
as arrays, possibly memory-mapped (a ``FrameCache`` hit): the engine reads each chunk once, then
hands its pages back to the OS (``data_builders.frame_pages.release_frames``), so a long stream's
frames do not pile up in the process either. Frames shared by several rows (the same array
object, as in a GRPO group) are prepared once and their features reused for every row.
``frames_encoded`` counts the frames the vision tower saw.

Where each part is: this module holds the step loop (turns opened, decided, replied, closed) and
its results; the engine holds one collaborator per concern: the frames and their vision features
(``engine.frame_features``), the batched forward with its positions, head and compiled graphs
(``engine.step_forward``), the cache, mask, offsets, eviction and branches of a run
(``engine.kv_window``), and the decisions and reply decoding (``engine.decisions``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from data_builders.frame_cache import FrameCache
from data_builders.frames import stream_frames
from data_builders.record_io import resolve_video
from data_builders.records import Stream
from data_builders.stream_steps import step_times
from data_builders.turn_grammar import parse_turn
from engine.decisions import Decider
from engine.frame_features import FrameFeatures
from engine.kv_static import StaticKV
from engine.kv_window import KVWindow
from engine.render import TurnRenderer, timestamp_text
from engine.replies import Reply
from engine.step_choice import resolve_step, say_once
from engine.step_forward import StepForward

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
    frame_prep: str = "device"
    """Where frames are resized, normalised and cut into patches: ``device`` (uploaded as uint8,
    prepared in torch on the model's device, ``engine.frame_prep``; the processor's values bit for
    bit) or ``host`` (the image processor itself). ``device`` falls back to the host for an image
    processor whose steps ``engine.frame_prep`` does not know."""
    vision: str = "project"
    """How the vision tower runs: ``project`` (:func:`engine.vision_tower.vision_features`: its grid
    tensors planned once per chunk shape, no read from the device, one attention call per block for
    a chunk's same-size frames) or ``transformers`` (``get_image_features``; the same features)."""
    compile: bool = False
    """Run the language model's forward through ``torch.compile`` (:func:`compiled_forward`): faster
    steps once its graphs are built, minutes for a 4B model's on first use in a process. With
    ``step="static"``: the static step functions, ``fullgraph=True`` (``engine.static_step``)."""
    step: str = "eager"
    """``eager``: the cache grows and the shapes of a step change with it (``engine.kv_window``);
    ``static``: a fixed-capacity cache and steps padded to fixed pieces, one function of fixed
    shapes per step (``engine.kv_static``, ``engine.static_step``; no branches: ``engine.probes``
    refuses it); ``auto`` (the default of ``eval.run``, the demo and GRPO): the compiled static step
    where the run and the device gain from it, else eager (``engine.step_choice``)."""
    static_bucket: int | None = None
    """``step="static"``: tokens per piece of a frame step (None: a frame's placeholders + 32, in 32s)."""
    static_capacity: int | None = None
    """``step="static"``: cache columns per row (None: two frame windows of pieces past the first step)."""


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
    """Ids of a memory evidence block appended as its own user turn (before a step's user turn); the
    block is text (special-token strings in it split)."""
    return [renderer.im_start_id, *renderer.encode(f"user\nEvidence:\n{text}"), *renderer.turn_end]


@dataclass
class _Row:
    stream: Stream
    frames: np.ndarray
    result: StreamResult
    pending: list[int] = field(default_factory=list)  # closing tokens of the last assistant turn
    pending_flags: list[bool] = field(default_factory=list)  # which of them the model generated
    pending_logprobs: list[float] = field(default_factory=list)
    context_at: set[int] | None = None  # the steps whose user turn may carry context (lazily)


class StreamingEngine:
    """KV-cache streaming over one or many streams (see the module docstring). The engine runs the
    step loop; it holds its collaborators: ``vision`` (:class:`~engine.frame_features.FrameFeatures`),
    ``forward`` (:class:`~engine.step_forward.StepForward`), ``decide``
    (:class:`~engine.decisions.Decider`) and, during a run, ``kv``
    (:class:`~engine.kv_window.KVWindow`)."""

    #: Whether the run branches its cache (``engine.probes``): ``step="auto"`` is then eager.
    BRANCHES = False

    def __init__(self, model, renderer: TurnRenderer, cfg: EngineConfig | None = None, memory=None):
        self.model = model
        self.memory = memory  # optional: evidence(stream, step_time, frame=) -> str | None (engine.memory)
        self.renderer = renderer
        self.cfg, choice = resolve_step(
            cfg or EngineConfig(), next(model.parameters()).device, branches=self.BRANCHES
        )
        say_once(choice)
        if self.cfg.frame_window is not None and self.cfg.frame_window < 1:
            raise ValueError(f"frame_window must be at least 1 step, got {self.cfg.frame_window}")
        self.forward = StepForward(model, renderer, self.cfg)
        self.device = self.forward.device
        self.vision = FrameFeatures(model, renderer, self.cfg, self.forward.upload)
        self.decide = Decider(renderer, self.cfg, self.device)
        #: Per step, in CPU seconds of the engine's thread (``time.thread_time``: what a busy machine
        #: does to the wall clock does not count): the whole step, the language model's forward, the
        #: vision call (processor + vision tower); the rest is the engine's own host work
        #: (``python -m perf engine``'s ``host_ms_per_step``). Wall time per step: ``StepDecision.latency_s``.
        self.step_timings: list[tuple[float, float, float]] = []
        #: Called as ``step_hook(engine, k)`` once step k is done (``python -m perf profile``
        #: starts and stops its profiler there).
        self.step_hook: Callable[[StreamingEngine, int], None] | None = None

    @property
    def frames_encoded(self) -> int:
        """Frames the vision tower has seen over this engine's runs."""
        return self.vision.frames_encoded

    def cache_length(self) -> int:
        """Columns of the last run's cache (the attention mask's width)."""
        return self.kv.mask_len

    def _feed(self, b: int, tokens: list[int], generated: list[bool], logprobs: list[float]) -> None:
        res = self.rows[b].result
        res.tokens += tokens
        res.generated += generated
        res.logprobs += logprobs

    def _begin(self, streams: list[Stream], frames: list[np.ndarray]) -> None:
        """A run's empty state: one row per stream, an empty cache and attention mask."""
        self.rows = [_Row(s, fr, StreamResult(s.id)) for s, fr in zip(streams, frames, strict=True)]
        self.vision.chunks = {}  # id(frame array) -> its prepared chunk
        window = StaticKV if self.cfg.step == "static" else KVWindow
        self.kv = window(self.model.config, len(streams), self.device, self.cfg.frame_window)
        self.forward.seconds = self.vision.seconds = 0.0

    # -- one step of a run: open every row's turn, decide, reply, close ------------------------

    # hot path: one call per step, the row loop inside; no allocation beyond what the step had
    def _open_turns(
        self, k: int, active: list[int], first_steps: list[int], times: list[list[float]]
    ) -> tuple[list[list[int]], list[tuple[int, int, int] | None]]:
        """Step ``k``'s chunk per row (the last turn's closing tokens, any evidence turn, the user
        turn with the frame, the assistant opening) and its image grid; records each row's column
        spans (for eviction) and feeds the chunk to the row's result."""
        r = self.renderer
        chunks: list[list[int]] = [[] for _ in self.rows]
        grids: list[tuple[int, int, int] | None] = [None] * len(self.rows)
        for b in active:
            row = self.rows[b]
            if row.context_at is None:
                row.context_at = r.context_steps(row.stream, first_steps[b])
            step = first_steps[b] + k
            context = r.context_for_step(row.stream, step, first_steps[b]) if step in row.context_at else None
            grids[b], n_image = self.vision.grid(row.frames, k)
            user = r.user_turn(times[b][k] - row.stream.clip_start, n_image, context)
            block = None
            if self.memory is not None:  # a new evidence block becomes its own user turn
                block = self.memory.evidence(row.stream, times[b][k], frame=row.frames[k])
            mem = evidence_turn(r, block) if block else []  # never evicted: outside the step's spans
            chunks[b] = row.pending + mem + user + r.assistant_open
            frame_from = len(r._user_open) + (len(r.encode(context + "\n")) if context else 0)
            self.kv.note_step(
                b, k, len(row.pending), len(mem), len(user), len(chunks[b]), frame_from, bool(context)
            )
            rest = [False] * (len(chunks[b]) - len(row.pending))
            self._feed(b, chunks[b], row.pending_flags + rest, row.pending_logprobs)
            row.pending, row.pending_flags, row.pending_logprobs = [], [], []
        return chunks, grids

    def _respond(
        self, k: int, firing: list[int], logp_dec: list[float]
    ) -> tuple[dict[int, list[int]], dict[int, float]]:
        """The replies of the rows that fired at step ``k`` (:meth:`Decider.replies`), their
        response token fed first and their step kept whole from eviction but for its frame."""
        if not firing:
            return {b: [] for b in firing}, {}
        for b in firing:
            self._feed(b, [self.renderer.response_id], [True], [logp_dec[b]])
            self.kv.columns[b].keep.add(k)
        n = len(self.rows)
        return self.decide.replies(
            lambda chunks: self.forward(self.kv, chunks, [None] * n, on_device=True), n, firing, self._feed
        )

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

    def _step(self, k: int, first_steps: list[int], times: list[list[float]], silence_text: str) -> None:
        """Step ``k`` of every row that has it: its frame, its turn, the decision, any reply."""
        t0, c0 = time.perf_counter(), time.thread_time()
        self.forward.seconds = self.vision.seconds = 0.0
        active = [b for b in range(len(self.rows)) if k < len(times[b])]
        arrays = [self.rows[b].frames for b in active]
        self.vision.prepare(k, arrays)
        chunks, grids = self._open_turns(k, active, first_steps, times)
        pair = self.forward(self.kv, chunks, grids, self.vision.features(k, arrays), decision=True)
        fired, p, logp_dec, decision_logits = self.decide.choose(pair)
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
            self.kv.evict(k - self.cfg.frame_window)
        self.step_timings.append((time.thread_time() - c0, self.forward.seconds, self.vision.seconds))

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
            self._step(k, first_steps, times, silence_text)
            if self.step_hook is not None:
                self.step_hook(self, k)
        if self.kv.dead:
            self.kv.compact()  # the cache a run leaves holds no dead column
        for b, row in enumerate(self.rows):  # the last turn's closing tokens (never fed to the cache)
            self._feed(b, row.pending, row.pending_flags, row.pending_logprobs)
            self.vision.release(row.frames)
        return [row.result for row in self.rows]


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
