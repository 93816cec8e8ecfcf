"""Toy source: seeded, scripted mp4 videos whose events mirror the benchmark tasks, with exact times.

``python -m data_builders build source=toy out=/tmp/toy n=32 seed=0``

Every clip is ``duration`` seconds of ``size x size`` frames on a plain background (its shade varies
by clip). Records cycle through four tasks; a share ``negative_share`` of them are negatives in
which nothing happens (same instruction, no target). Event times are whole seconds, so on the
1 step/s grid a target lands exactly on the step of its time (see ``stream_steps.target_step``).

- ``event_monitoring``: a red square appears at second ``k`` and stays. Target at ``k``.
- ``object_monitoring``: a blue square is visible from the start and disappears at ``k``.
  Target at ``k``, label ``Warning``.
- ``accident_warning``: an orange and a purple square stand apart, start moving towards each other
  so that at second ``k`` both have visibly moved, and touch at ``k + 3``. Target at ``k`` (the
  first frame that shows the approach) with window ``[k, k + 3]`` (alert to contact), label
  ``Warning``.
- ``event_intervention``: blocks are placed every 3 s in the order red, green, blue, yellow, one per
  cell of a 2 x 2 grid (top left, top right, bottom left, bottom right); one placement uses a wrong
  colour. Target at the wrong placement, saying what to place. One block per cell: at the demo's
  64 x 64 frames the tiny model sees 2 x 2 merged visual tokens of 32 x 32 pixels, so each block has
  a token of its own. (A row of four blocks put two blocks in each token and across two token rows,
  and the tiny model read the last block's colour at p 0.4-0.6.)

Everything is drawn from ``numpy.random.default_rng([seed, index])``, so record ``i`` is the same
whatever ``n`` is, and two runs write byte-identical records.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from data_builders.records import Stream, Target

TOY_TASKS = ("event_monitoring", "object_monitoring", "accident_warning", "event_intervention")
COLOURS = {
    "red": (220, 30, 30),
    "green": (30, 190, 60),
    "blue": (40, 70, 230),
    "yellow": (235, 215, 30),
    "orange": (245, 140, 20),
    "purple": (150, 40, 190),
}
PROCEDURE = ("red", "green", "blue", "yellow")
INSTRUCTIONS = {
    "event_monitoring": "Tell me when the red square appears.",
    "object_monitoring": "Warn me when the blue square leaves the scene.",
    "accident_warning": "Warn me before the two squares collide.",
    "event_intervention": "I am placing blocks in the order red, green, blue, yellow: top left, top right, "
    "bottom left, bottom right. Tell me if I place a wrong block and what to place instead.",
}


@dataclass(frozen=True)
class ToyScript:
    """What happens in one clip: task, event second (None = negative) and drawing parameters."""

    task: str
    event: int | None
    background: int
    x: int
    y: int
    wrong: tuple[int, str] | None = None  # (placement index, colour used) for intervention
    placements: tuple[int, ...] = ()


def _square(img: np.ndarray, x: int, y: int, side: int, colour: str) -> None:
    img[max(0, y) : max(0, y + side), max(0, x) : max(0, x + side)] = COLOURS[colour]


def draw_frame(script: ToyScript, t: float, size: int) -> np.ndarray:
    img = np.full((size, size, 3), script.background, dtype=np.uint8)
    side = size // 4
    if script.task == "event_monitoring":
        if script.event is not None and t >= script.event:
            _square(img, script.x, script.y, side, "red")
    elif script.task == "object_monitoring":
        if script.event is None or t < script.event:
            _square(img, script.x, script.y, side, "blue")
    elif script.task == "accident_warning":
        gap = size - 2 * side  # pixels between the squares at rest
        moved = 0.0
        if script.event is not None:  # closes the gap over 4 s, starting 1 s before the event
            moved = min(gap / 2, max(0.0, t - (script.event - 1)) * gap / 8)
        y = size // 2 - side // 2
        _square(img, int(round(moved)), y, side, "orange")
        _square(img, size - side - int(round(moved)), y, side, "purple")
    else:  # event_intervention: placement i fills cell (row i // 2, column i % 2) of a 2 x 2 grid
        cell = size // 2
        for i, at in enumerate(script.placements):
            if t >= at:
                colour = script.wrong[1] if script.wrong and script.wrong[0] == i else PROCEDURE[i]
                row, col = divmod(i, 2)
                _square(img, col * cell + cell // 8, row * cell + cell // 8, cell - cell // 4, colour)
    return img


def make_script(index: int, seed: int, duration: int, size: int, negative_share: float) -> ToyScript:
    """The clip script of record ``index``: a pure function of (seed, index) and the options."""
    rng = np.random.default_rng([seed, index])
    task = TOY_TASKS[index % len(TOY_TASKS)]
    negative = bool(rng.random() < negative_share)
    background = int(rng.integers(60, 140))
    side = size // 4
    x, y = (int(v) for v in rng.integers(0, size - side, size=2))
    if task == "event_intervention":
        first = int(rng.integers(1, max(2, duration - 12)))
        placements = tuple(first + 3 * i for i in range(len(PROCEDURE)))
        wrong = None
        event = None
        if not negative:
            step = int(rng.integers(0, len(PROCEDURE)))
            used = str(rng.choice([c for c in PROCEDURE if c != PROCEDURE[step]]))
            wrong = (step, used)
            event = placements[step]
        return ToyScript(task, event, background, x, y, wrong, placements)
    low, high = (3, duration - 5) if task == "accident_warning" else (2, duration - 2)
    event = None if negative else int(rng.integers(low, high))
    return ToyScript(task, event, background, x, y)


def _targets(script: ToyScript) -> list[Target]:
    if script.event is None:
        return []
    k = float(script.event)
    if script.task == "event_monitoring":
        return [Target(time=k, content="The red square appeared.")]
    if script.task == "object_monitoring":
        return [Target(time=k, content="Warning: the blue square left the scene.", label="Warning")]
    if script.task == "accident_warning":
        return [
            Target(
                time=k,
                window=(k, k + 3.0),
                content="Warning: the two squares are about to collide.",
                label="Warning",
            )
        ]
    step, used = script.wrong
    return [Target(time=k, content=f"Wrong block: place {PROCEDURE[step]} instead of {used}.")]


def write_mp4(path: Path, frames: list[np.ndarray], fps: int) -> None:
    """Encode RGB frames as H.264 mp4 (single-threaded, so the bytes are reproducible)."""
    import av

    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.height, stream.width = frames[0].shape[:2]
        stream.pix_fmt = "yuv420p"
        stream.options = {"crf": "12", "threads": "1", "preset": "veryfast"}
        for arr in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(arr, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def generate_toy(
    out_dir: str | Path,
    n: int = 64,
    seed: int = 0,
    duration: int = 20,
    size: int = 64,
    video_fps: int = 2,
    negative_share: float = 0.25,
) -> list[Stream]:
    """Write ``n`` toy clips under ``out_dir/videos/`` and return their stream records.

    ``duration`` in seconds (whole), ``size`` in pixels (square frames), ``video_fps`` frames per
    second of the mp4 (the decision rate is the renderer's choice, 1 step/s by default).
    Record ``video`` paths are relative to ``out_dir``.
    """
    if duration < 12:
        raise ValueError(f"toy clips need at least 12 s to script every task, got duration={duration}")
    out_dir = Path(out_dir)
    streams = []
    for i in range(n):
        script = make_script(i, seed, duration, size, negative_share)
        rel = f"videos/toy_{i:05d}.mp4"
        frames = [draw_frame(script, f / video_fps, size) for f in range(duration * video_fps)]
        write_mp4(out_dir / rel, frames, video_fps)
        streams.append(
            Stream(
                id=f"toy-{seed}-{i:05d}",
                source="toy",
                task=script.task,
                video=rel,
                clip_start=0.0,
                clip_end=float(duration),
                instruction=INSTRUCTIONS[script.task],
                instruction_time=0.0,
                targets=_targets(script),
                meta={"video_id": f"toy-{seed}-{i:05d}", "event_second": script.event},
            )
        )
    return streams
