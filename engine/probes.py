"""Probes: questions asked at given steps of a video, all answered from one causal pass.

    answers = answer_probes(model, renderer, stream, frames, [Probe(step=30, prompt="How many?", key="q1")])
    answers[0].text, answers[0].p_response, answers[0].logits       # in the probes' order

A per-probe harness (OVO-Bench's official one) asks each question at a time t and the model answers
from the video cut to [0, t]: one run per probe. With the KV-cache engine one pass serves every
probe of a video. At a probe's step the cache is marked, the question turn is fed and its answer
decoded, and the cache is rewound to the mark (cropped, the mask and the M-RoPE offset reset:
``engine.kv_window.KVWindow.rewind``) before the step's own turn goes on. The branch leaves nothing behind,
so each answer is the one a fresh run on the cut video gives (``mode="rerun"`` is that run, the
reference ``tests/engine/test_probes.py`` checks the branches against).

What the model sees (the engine's turn format, ``engine.render``):

- Main pass: one user turn per step (timestamp + frame), every assistant turn forced silent
  (``</Silence><|im_end|>``): as in the official harness, the model is only asked at the probes.
  The stream's history is rendered in the first step's user turn; the stream's own instruction is
  not (``instruction=True`` renders it at its step, as the engine does).
- A probe at step k: from the cache as it stands after step k-1's assistant header (the closing
  tokens of step k-1, ``</Silence><|im_end|>\\n``, come first, as in every chunk), step k's user turn
  with the probe's ``prompt`` as its context, after any context the step has (history, instruction),
  and before the step's timestamp and frame, as an instruction is rendered; then the assistant
  header, the response token forced, and the answer decoded greedily (the engine's banned tokens
  masked) until ``<|im_end|>`` or ``max_new_tokens``. So the model has seen frames 0..k when it
  answers. Several probes on one step each branch from the same point.
- The pass stops after the last probe's step: later frames cannot change a causal answer.

``ProbeAnswer.logits`` (fp32, on the host) has one row per forward of the answer: row 0 the
logits at the decision position, then for each token the model generated (its text tokens, and
``<|im_end|>`` when it closed the answer itself) the logits it was chosen from (raw: the banned
tokens are masked only to choose). Rows are the whole vocabulary, ``[n_generated + 1, V]``; with
``full_logits=False`` only the decision pair (silence, response) is kept, ``[1, 2]``, which is
what a benchmark of many probes can afford on a large vocabulary.

One stream at a time (a batch of one); no frame window, no sampling, no memory hook: a
``cfg`` passed in lends only ``frame_chunk`` and ``compile``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from data_builders.records import RecordError, Stream
from data_builders.stream_steps import step_times
from engine.decisions import decision_probability
from engine.frame_features import Features
from engine.render import TurnRenderer, timestamp_text
from engine.streaming import EngineConfig, StreamingEngine

MODES = ("branch", "rerun")


@dataclass(frozen=True)
class Probe:
    """A question asked in the user turn of stream step ``step`` (after that step's own context)."""

    step: int
    prompt: str
    key: Any = None
    """The caller's handle, returned as is."""


@dataclass
class ProbeAnswer:
    probe: Probe
    time: float
    """The probe step's time on the record axis."""
    text: str
    """The decoded answer, without the response token and ``<|im_end|>``, stripped of outer spaces."""
    p_response: float
    """P(response) at the probe's decision position (informative: the response is forced)."""
    logits: torch.Tensor
    """fp32 ``[n_generated + 1, V]`` (or ``[1, 2]``): see the module docstring."""


def answer_probes(
    model,
    renderer: TurnRenderer,
    stream: Stream,
    frames: np.ndarray,
    probes: Sequence[Probe],
    *,
    max_new_tokens: int = 32,
    mode: str = "branch",
    instruction: bool = False,
    full_logits: bool = True,
    cfg: EngineConfig | None = None,
    follow_up: Callable[[ProbeAnswer], Probe | None] | None = None,
) -> list[ProbeAnswer]:
    """Answer every probe of one stream (``frames``: its (N, H, W, 3) uint8 frames, ``frames[k]``
    step k), in the probes' order.

    ``mode="branch"``: one pass, a branch per probe. ``mode="rerun"``: per probe, a fresh pass over
    ``frames[: probe.step + 1]`` asking that probe alone (a per-probe harness; the reference).

    ``follow_up`` (branch mode): called on each answer; a probe it returns is asked at once on the
    same step, from the same point (a harness that asks again after a cue, on the same clip), and
    the pass ends after that step (the harness has its answer). The answers are then those asked,
    in the order asked, each follow-up right after the answer that called for it."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if follow_up is not None and mode != "branch":
        raise ValueError("follow_up asks on the branch of its step: mode must be 'branch'")
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be at least 0, got {max_new_tokens}")
    cfg = cfg or EngineConfig()
    if cfg.frame_window is not None:
        raise ValueError("probes need the whole cache: a frame_window would drop frames a probe must see")
    if cfg.sample:
        raise ValueError("probes decode greedily: sample=True has no meaning here")
    cfg = dataclasses.replace(cfg, max_new_tokens=max_new_tokens)
    probes = list(probes)
    n_steps = len(step_times(stream, renderer.steps_per_second)[: len(frames)])
    for i, probe in enumerate(probes):
        _check(stream, i, probe, n_steps)
    if not probes:
        return []
    if mode == "branch":
        engine = _ProbeEngine(model, renderer, cfg)
        return engine.answer(stream, frames, probes, instruction, full_logits, follow_up=follow_up)
    return [
        _ProbeEngine(model, renderer, cfg).answer(
            stream, frames[: p.step + 1], [p], instruction, full_logits, branch=False
        )[0]
        for p in probes
    ]


def _check(stream: Stream, i: int, probe: Probe, n_steps: int) -> None:
    name = f"probe {i} (key {probe.key!r})"
    step = probe.step
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)):
        raise RecordError(f"step must be an integer, got {step!r}", record=stream.id, field=name)
    if not 0 <= step < n_steps:
        raise RecordError(
            f"step {step} is out of range: the stream has {n_steps} steps (0..{n_steps - 1})",
            record=stream.id,
            field=name,
        )
    if not isinstance(probe.prompt, str) or not probe.prompt.strip():
        raise RecordError(f"empty prompt {probe.prompt!r}", record=stream.id, field=name)


@dataclass
class _Step:
    """What every probe of one step is asked from: the step's time and turn parts."""

    time: float
    elapsed: float
    n_image: int
    context: str | None
    pending: list[int]
    grid: tuple[int, int, int]
    image: Features


def _with_prompt(context: str | None, prompt: str) -> str:
    return f"{context}\n{prompt}" if context else prompt


class _ProbeEngine(StreamingEngine):
    """The engine's cache, forwards and decoding, driven step by step for one stream of probes."""

    BRANCHES = True  # the cache is marked and rewound around each probe (no static step)

    @torch.no_grad()
    def answer(
        self,
        stream: Stream,
        frames: np.ndarray,
        probes: list[Probe],
        instruction: bool,
        full_logits: bool,
        branch: bool = True,
        follow_up: Callable[[ProbeAnswer], Probe | None] | None = None,
    ) -> list[ProbeAnswer]:
        """The probes' answers; ``branch=False`` (a rerun): the last step's turn is the probe's
        own, decoded straight into the cache with nothing to rewind (one probe, on the last step)."""
        r = self.renderer
        times = step_times(stream, r.steps_per_second)[: len(frames)]
        at: dict[int, list[int]] = {}
        for i, probe in enumerate(probes):
            at.setdefault(int(probe.step), []).append(i)
        last = max(at)
        if not branch and (len(probes) != 1 or last != len(times) - 1):
            raise ValueError("a rerun asks one probe, on its last step")
        self._begin([stream], [frames])
        r.warm([timestamp_text(t - stream.clip_start) for t in times[: last + 1]])
        closing = [r.silence_id] + r.turn_end  # a main-pass assistant turn, after its header
        answers: list[ProbeAnswer | None] = [None] * len(probes)
        asked: list[ProbeAnswer] = []
        for k in range(last + 1):
            self.vision.prepare(k, [frames])
            grid, n_image = self.vision.grid(frames, k)
            step = _Step(
                time=times[k],
                elapsed=times[k] - stream.clip_start,
                n_image=n_image,
                context=r.context_for_step(stream, k, 0, instruction=instruction),
                pending=closing if k else [],
                grid=grid,
                image=self.vision.features(k, [frames]),
            )
            followed = False
            for i in at.get(k, []):
                answers[i] = self._ask(probes[i], step, branch, full_logits, asked)
                extra = follow_up(answers[i]) if follow_up is not None else None
                if extra is not None:
                    self._ask(extra, step, branch, full_logits, asked)
                    followed = True
            if followed:
                break
            if k < last:
                user = r.user_turn(step.elapsed, n_image, step.context)
                self.forward(
                    self.kv, [step.pending + user + r.assistant_open], [grid], step.image, decision=True
                )
        self.vision.release(frames)
        return asked if follow_up is not None else answers

    def _ask(
        self, probe: Probe, step: _Step, branch: bool, full_logits: bool, asked: list[ProbeAnswer]
    ) -> ProbeAnswer:
        """One probe on its step's branch (marked and rewound unless a rerun), appended to ``asked``."""
        r = self.renderer
        mark = self.kv.mark() if branch else None
        user = r.user_turn(step.elapsed, step.n_image, _with_prompt(step.context, probe.prompt))
        chunk = step.pending + user + r.assistant_open
        got = self._decode(probe, step.time, chunk, step.grid, step.image, full_logits)
        if mark is not None:
            self.kv.rewind(mark)
        asked.append(got)
        return got

    def _decode(
        self,
        probe: Probe,
        time: float,
        chunk: list[int],
        grid: tuple[int, int, int],
        image: Features,
        full_logits: bool,
    ) -> ProbeAnswer:
        """Feed a probe's chunk, force the response token, decode greedily to ``<|im_end|>``."""
        r = self.renderer
        first = self.forward(self.kv, [chunk], [grid], image, decision=not full_logits)[0]
        if full_logits:
            p = float(decision_probability(first, r.silence_id, r.response_id))
        else:
            p = float(torch.softmax(first, dim=-1)[1])
        rows, text, tok = [first], [], r.response_id
        while len(text) < self.cfg.max_new_tokens:
            logits = self.forward(self.kv, [[tok]], [None])[0]
            tok, _ = self.decide.next_token(logits)
            if full_logits:
                rows.append(logits)
            if tok == r.im_end_id:
                break
            text.append(tok)
        answer = r.tokenizer.decode(text, skip_special_tokens=False).strip()
        return ProbeAnswer(probe, time, answer, p, torch.stack(rows))
