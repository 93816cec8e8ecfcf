"""A stream's decision steps: the step grid of a clip (:func:`step_times`), the step a target lands
on (:func:`target_step`), and the windows SFT and GRPO cut a stream into (:func:`step_windows`,
:func:`targets_in_window`). Times are on the record's clock (:mod:`data_builders.records`).
"""

from __future__ import annotations

import math

from data_builders.records import TIME_EPS, Stream, Target


def step_times(stream: Stream, steps_per_second: float = 1.0) -> list[float]:
    """Times (record axis) of the stream's decision steps: ``clip_start + k / steps_per_second`` for
    ``k = 0 .. n-1`` with ``n = max(1, floor(duration * steps_per_second))``. The frame shown at a
    step is the one on screen at that time, so a 20 s clip at 1 step/s has steps at 0..19 s."""
    n = max(1, math.floor(stream.duration * steps_per_second + TIME_EPS))
    return [stream.clip_start + k / steps_per_second for k in range(n)]


def target_step(stream: Stream, target: Target, steps_per_second: float = 1.0) -> int:
    """The step a target lands on: the first step at or after its time (the model can speak only
    once the frame showing the event has been seen), clamped to the last step.

    >>> s = Stream(id="a", source="toy", task="event_monitoring", video="a.mp4", clip_start=0.0,
    ...            clip_end=20.0, instruction="")
    >>> [target_step(s, Target(time=t, content="")) for t in (0.0, 7.0, 7.3, 19.5)]
    [0, 7, 8, 19]
    """
    n = max(1, math.floor(stream.duration * steps_per_second + TIME_EPS))
    k = math.ceil((target.time - stream.clip_start) * steps_per_second - TIME_EPS)
    return min(max(k, 0), n - 1)


def decision_counts(stream: Stream, steps_per_second: float = 1.0) -> tuple[int, int]:
    """(silence steps, response steps) of a stream: one response per distinct target step."""
    n = len(step_times(stream, steps_per_second))
    responses = len({target_step(stream, t, steps_per_second) for t in stream.targets})
    return n - responses, responses


def step_windows(
    stream: Stream, steps_per_second: float = 1.0, window_steps: int | None = None
) -> list[tuple[int, int]]:
    """``[start, end)`` step ranges that cut a stream into windows of at most ``window_steps`` steps
    (None: one window). The one windowing rule of SFT and GRPO: a window keeps the clip's clock (its
    steps show their time since the clip start, as at evaluation) and holds the targets that land on
    its steps (:func:`targets_in_window`).

    >>> s = Stream(id="a", source="toy", task="event_monitoring", video="a.mp4", clip_start=0.0,
    ...            clip_end=45.0, instruction="")
    >>> step_windows(s, 1.0, 20), step_windows(s, 1.0)
    ([(0, 20), (20, 40), (40, 45)], [(0, 45)])
    """
    n = len(step_times(stream, steps_per_second))
    if window_steps is not None and window_steps < 1:
        raise ValueError(f"window_steps must be at least 1, got {window_steps}")
    w = window_steps or n
    return [(s, min(s + w, n)) for s in range(0, n, w)]


def targets_in_window(stream: Stream, start: int, end: int, steps_per_second: float = 1.0) -> list[Target]:
    """The targets whose landing step (:func:`target_step`) is in ``[start, end)``: a target at
    19.5 s lands on step 20, so it belongs to the window that shows step 20.

    >>> s = Stream(id="a", source="toy", task="event_monitoring", video="a.mp4", clip_start=0.0,
    ...            clip_end=40.0, instruction="", targets=[Target(time=19.5, content="x")])
    >>> [len(targets_in_window(s, a, b)) for a, b in step_windows(s, 1.0, 20)]
    [0, 1]
    """
    return [t for t in stream.targets if start <= target_step(stream, t, steps_per_second) < end]
