"""Per-frame object visibility -> ``object_monitoring`` streams (``Warning`` each time it disappears).

``python -m data_builders build source=object_tracks annotations=/data/tracks/tracks.jsonl videos=/data/tracks/videos out=/data/built/object_tracks``

This format is ours (the P3I object source is not public); one JSON object per track (a JSON list
or JSON Lines)::

    {"id": "track_0007", "video": "kitchen_03.mp4", "object": "the red mug", "fps": 30,
     "visible": [true, true, false, ...]}          # or
     "boxes": [[x1, y1, x2, y2], null, [], ...]     # null / [] = absent, or
     "mask_areas": [812, 790, 0, ...]               # mask pixel counts, 0 = absent

One entry per annotated frame from frame 0, at ``fps`` frames per second (the annotation's rate,
which may differ from the video's). A target is due at the first frame of every visible -> absent
transition that lasts at least ``min_absent_frames`` frames: time = frame / fps, label ``Warning``.
Reappearing and disappearing again is a new target; an object absent from frame 0 has not
disappeared. The clip is ``[0, n_frames / fps]`` (no probe needed); a track with no disappearance
is a negative.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from data_builders.records import RecordError, Stream, Target
from data_builders.toolkit import (
    BuildInputs,
    ConversionError,
    Pending,
    SourceSpec,
    check_options,
    each_record,
    load_json,
    require,
    seconds,
)

KINDS = ("visible", "boxes", "mask_areas")


@dataclass
class ObjectTracksSourceConfig:
    """Keys of ``source=object_tracks``."""

    min_absent_frames: int = 1
    """A disappearance counts when the object stays absent at least this many frames."""
    instruction: str = "Warn me when {object} disappears from view."
    """Instruction; ``{object}`` is the track's object phrase."""
    response: str = "Warning: {object} has disappeared."
    """Reference reply at each target."""

    def __post_init__(self) -> None:
        check_options(self, at_least_one=["min_absent_frames"])


def visibility(track: dict) -> list[bool]:
    """Per-frame visibility from whichever of ``visible``, ``boxes``, ``mask_areas`` the track has."""
    present = [k for k in KINDS if k in track]
    if len(present) != 1:
        raise RecordError(f"expected exactly one of {KINDS}, got {present or 'none'}")
    values = track[present[0]]
    if not isinstance(values, list) or not values:
        raise RecordError(f"field '{present[0]}': expected a non-empty per-frame list")
    if present[0] == "visible":
        if not all(isinstance(v, bool) for v in values):
            raise RecordError("field 'visible': expected true/false per frame")
        return values
    if present[0] == "boxes":
        out = []
        for i, b in enumerate(values):
            if b is not None and not (isinstance(b, list) and len(b) in (0, 4)):
                raise RecordError(f"field 'boxes[{i}]': expected [x1, y1, x2, y2], [] or null")
            out.append(bool(b) and b[2] > b[0] and b[3] > b[1])
        return out
    return [seconds(v, f"mask_areas[{i}]") > 0 for i, v in enumerate(values)]


def disappearances(visible: list[bool], min_absent: int) -> list[int]:
    """First frames of visible -> absent transitions lasting at least ``min_absent`` frames.

    >>> disappearances([True, True, False, False, True, False, True], 1)
    [2, 5]
    >>> disappearances([False, True, False, True, False, False], 2)
    [4]
    """
    out = []
    f = 1
    while f < len(visible):
        if visible[f - 1] and not visible[f]:
            end = f
            while end < len(visible) and not visible[end]:
                end += 1
            if end - f >= min_absent:
                out.append(f)
            f = end
        else:
            f += 1
    return out


def build_object_tracks(
    inputs: BuildInputs, options: ObjectTracksSourceConfig
) -> Iterator[Pending | ConversionError]:
    """One stream per track (see the module docstring)."""
    path = inputs.annotations
    data = load_json(path)
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        raise RecordError("expected a list of tracks (a JSON list or JSON Lines)", file=path)

    def parse(rid: str, track: dict) -> Iterator[Pending]:
        video, obj = str(require(track, "video")), str(require(track, "object"))
        fps = seconds(require(track, "fps"), "fps")
        if fps <= 0:
            raise RecordError(f"field 'fps': must be positive, got {fps}")
        vis = visibility(track)
        frames = disappearances(vis, options.min_absent_frames)
        targets = [
            Target(time=f / fps, content=options.response.format(object=obj), label="Warning") for f in frames
        ]
        stream = Stream.whole_video(
            id=f"object_tracks-{rid}",
            source="object_tracks",
            task="object_monitoring",
            video=video,
            clip_end=len(vis) / fps,
            instruction=options.instruction.format(object=obj),
            targets=targets,
            meta={"video_id": f"object_tracks/{video}", "object": obj},
        )
        yield Pending(str(path), rid, video, lambda info: [stream], needs_info=False)

    yield from each_record(
        (
            (str(t.get("id", f"item {k}")) if isinstance(t, dict) else f"item {k}", t)
            for k, t in enumerate(data)
        ),
        path,
        parse,
    )


SPEC = SourceSpec("object_tracks", build=build_object_tracks, config=ObjectTracksSourceConfig)
