"""GRPO rollouts: windows of a stream and G sampled streaming rollouts per window.

A *window* is steps ``[start, end)`` of a stream (``data_builders.stream_steps.step_windows``, the rule
SFT windows follow): its steps keep the clip clock, its first turn carries the instruction (and the
history), and it holds the targets that land on its steps (``targets_in_window``). Each window is one
GRPO prompt. A rollout runs the window through the :class:`~engine.streaming.StreamingEngine` with
sampled decisions and responses; the G rollouts of a window are one batch whose rows share the
same frame array, so each frame is encoded once for the whole group.

A rollout keeps what the policy update needs: the token sequence (user turns and the model's
turns interleaved), which tokens the model generated and their log-probs at rollout time, plus
the turns with their times for the reward (their advantages: ``train.grpo.algorithm``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np

from data_builders.records import Stream, Target
from data_builders.stream_steps import step_windows, targets_in_window
from engine.render import TurnRenderer
from engine.streaming import EngineConfig, StreamingEngine, StreamResult


@dataclass
class Window:
    """One GRPO prompt: steps ``[start, end)`` of a stream, their frames, the targets landing there."""

    stream: Stream
    start: int
    end: int
    frames: np.ndarray
    targets: list[Target] = field(default_factory=list)


@dataclass
class Rollout:
    """One sampled pass over a window."""

    window: Window
    result: StreamResult

    @property
    def turns(self) -> list[dict]:
        """One ``{"time", "text"}`` per decision step (``train.grpo.rewards.Turns``)."""
        return [{"time": s.time, "text": s.text} for s in self.result.steps]

    @property
    def reward_input(self) -> tuple[list[dict], list[Target], str]:
        """What a reward of ``train.grpo.rewards`` takes: the turns, the window's targets, the task."""
        return self.turns, self.window.targets, self.window.stream.task


def make_windows(
    streams: list[Stream],
    frames: dict[str, np.ndarray],
    window_steps: int,
    negative_share: float,
    seed: int,
    steps_per_second: float = 1.0,
) -> list[Window]:
    """Windows of ``window_steps`` steps: every window with a target, plus windows without one,
    sampled so that they make up about ``negative_share`` of the result (seeded)."""
    rng = random.Random(seed)
    positive, negative = [], []
    for s in streams:
        for start, end in step_windows(s, steps_per_second, window_steps):
            targets = targets_in_window(s, start, end, steps_per_second)
            w = Window(s, start, end, frames[s.id][start:end], targets)
            (positive if targets else negative).append(w)
    want = (
        round(len(positive) * negative_share / max(1e-9, 1 - negative_share))
        if negative_share < 1
        else len(negative)
    )
    rng.shuffle(negative)
    out = positive + negative[: min(want, len(negative))]
    rng.shuffle(out)
    return out


def rollout_group(
    model,
    renderer: TurnRenderer,
    window: Window,
    num_generations: int,
    temperature: float,
    max_new_tokens: int,
    seed: int,
    compile: bool = False,
    step: str = "auto",
) -> tuple[list[Rollout], StreamingEngine]:
    """G sampled rollouts of one window, batched; the frame array is shared by every row. With
    ``compile`` the engine's language model runs compiled (``EngineConfig.compile``); ``step`` is
    the engine's step (``EngineConfig.step``: ``auto``, ``eager`` or ``static``)."""
    cfg = EngineConfig(
        sample=True,
        temperature=temperature,
        max_new_tokens=max_new_tokens,
        seed=seed,
        compile=compile,
        step=step,
    )
    engine = StreamingEngine(model, renderer, cfg)
    results = engine.run(
        [window.stream] * num_generations,
        [window.frames] * num_generations,
        first_steps=[window.start] * num_generations,
    )
    return [Rollout(window, r) for r in results], engine
