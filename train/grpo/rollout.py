"""GRPO rollouts: windows of a stream, G sampled streaming rollouts per window, and their advantages.

A *window* is steps ``[start, end)`` of a stream (``data_builders.stream_steps.step_windows``, the rule
SFT windows follow): its steps keep the clip clock, its first turn carries the instruction (and the
history), and it holds the targets that land on its steps (``targets_in_window``). Each window is one
GRPO prompt. A rollout runs the window through the :class:`~engine.streaming.StreamingEngine` with
sampled decisions and responses; the G rollouts of a window are one batch whose rows share the
same frame array, so each frame is encoded once for the whole group.

A rollout keeps what the policy update needs: the token sequence (user turns and the model's
turns interleaved), which tokens the model generated and their log-probs at rollout time, plus
the turns with their times for the reward.
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


def group_advantages(rewards: list[float], eps: float = 1e-4, std: float | None = None) -> list[float]:
    """(r - mean) / (std + eps) within a group; all zeros when the rewards are all equal. The
    one-step case of :func:`decision_advantages` (``std`` as there).

    >>> [round(a, 3) for a in group_advantages([1.0, 0.0, 0.0, 1.0])]
    [1.0, -1.0, -1.0, 1.0]
    >>> [round(a, 3) for a in group_advantages([1.0, 0.0], std=1.0)]
    [0.5, -0.5]
    """
    return [row[0] for row in decision_advantages([[r] for r in rewards], 0.0, eps, std)]


def step_returns(step_rewards: list[list[float]], gamma: float) -> list[list[float]]:
    """Each step's discounted return ``G_j = sum_{i>=j} gamma^(i-j) r_i``, per rollout.

    >>> step_returns([[1.0, 0.0, 2.0]], 0.5)
    [[1.5, 1.0, 2.0]]
    """
    out = []
    for rewards in step_rewards:
        acc, row = 0.0, []
        for r in reversed(rewards):
            acc = r + gamma * acc
            row.append(acc)
        out.append(row[::-1])
    return out


def moments(values: list[float]) -> tuple[float, float, float]:
    """(count, sum, sum of squares): what ranks add up for an update-wide std (``batch_std``)."""
    return float(len(values)), float(sum(values)), float(sum(v * v for v in values))


def batch_std(count: float, total: float, squares: float) -> float:
    """Population std from summed :func:`moments` (``scale_rewards=batch``: over the whole update).

    >>> batch_std(*moments([1.0, 0.0, 0.0, 1.0]))
    0.5
    """
    if count == 0:
        return 0.0
    mean = total / count
    return max(squares / count - mean * mean, 0.0) ** 0.5


def decision_advantages(
    step_rewards: list[list[float]], gamma: float, eps: float = 1e-4, std: float | None = None
) -> list[list[float]]:
    """Per-decision advantages of a group from its per-step rewards (``train.grpo.rewards.step_rewards``).

    The G rollouts of a window see the same frames at the same steps, so a decision is compared with
    the group's decisions at the same step: return ``G_j = sum_{i>=j} gamma^(i-j) r_i``, minus the
    group's mean return at step j, divided by the std of those differences over the steps where
    the rollouts differ (steps where all agree would only shrink the std and inflate the rest). A
    reply that repeats an earlier one is charged at its own step, and the first on-time reply is
    credited at its own, which a single advantage per rollout cannot tell apart. With ``gamma=0``
    and rollouts that differ at one step only, that step gets GRPO's per-rollout advantages and
    every other step 0. All zeros when every rollout's return is the same at every step.

    ``std`` replaces the group's own spread (``grpo.scale_rewards``: ``batch`` passes the update's,
    ``none`` passes 1 - eps so the differences stay as they are).

    >>> [[round(a, 3) for a in row] for row in decision_advantages([[0.0, 1.0, -0.7], [0.0, 1.0, 0.0]], 0.0)]
    [[0.0, 0.0, -1.0], [0.0, 0.0, 1.0]]
    """
    lengths = {len(r) for r in step_rewards}
    if len(lengths) != 1:
        raise ValueError(f"rollouts of one window must have the same number of steps, got {sorted(lengths)}")
    returns = step_returns(step_rewards, gamma)
    g = len(returns)
    base = [sum(col) / g for col in zip(*returns, strict=True)]
    diff = [[x - b for x, b in zip(row, base, strict=True)] for row in returns]
    live = [col for col in zip(*diff, strict=True) if any(abs(x) > 1e-12 for x in col)]
    if not live:
        return [[0.0] * len(row) for row in diff]
    if std is None:
        std = (sum(x * x for col in live for x in col) / (g * len(live))) ** 0.5
    return [[x / (std + eps) for x in row] for row in diff]
