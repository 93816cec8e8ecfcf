"""UCF-Crime temporal annotations -> ``crime_alert`` streams (``Warning`` when an anomaly starts).

``python -m data_builders build source=ucf_crime annotations=/data/ucf/Temporal_Anomaly_Annotation_for_Testing_Videos.txt videos=/data/ucf/videos out=/data/built/ucf_crime``

Input: the whitespace-separated text file, one video per line:
``video_name event_class start1 end1 start2 end2``, frame numbers at ``frame_rate`` (30) fps, ``-1``
for no (second) segment; ``Normal`` videos have all ``-1`` and become negatives.

Targets: one ``Warning`` per annotated segment at ``start / frame_rate`` seconds, with window
``[start, end] / frame_rate`` (two segments = two separate incidents, each alerted once). With
``segments=first`` only the first segment is used. Frame numbers are used as given (no 1-based
shift), so frame 165 is 5.5 s. The video path is ``video_pattern`` formatted with ``video_name``
and ``event_class`` (the release keeps videos in per-class folders; adapt the pattern).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from data_builders.records import RecordError, Stream, Target
from data_builders.registry import (
    BuildInputs,
    ConversionError,
    Pending,
    clip_end_from,
    each_record,
    register_source,
)
from data_builders.video import VideoInfo


@dataclass
class UcfCrimeOptions:
    """Keys of ``source=ucf_crime``."""

    frame_rate: float = 30.0
    """Frame rate the annotation's frame numbers refer to."""
    video_pattern: str = "{video_name}"
    """Video path under ``videos``; fields ``video_name`` and ``event_class``."""
    segments: str = "all"
    """``all``: one target per segment; ``first``: only the first segment."""
    instruction: str = (
        "Watch this surveillance feed and warn me once when a crime or suspicious activity begins."
    )
    """The user's instruction, given at t=0."""
    response: str = "Warning: suspicious activity is happening."
    """The reference reply at each target."""


def _frame(text: str, name: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise RecordError(f"field '{name}': expected a frame number, got {text!r}") from None


@register_source("ucf_crime", UcfCrimeOptions)
def build_ucf_crime(inputs: BuildInputs, options: UcfCrimeOptions) -> Iterator[Pending | ConversionError]:
    """One stream per annotated video (see the module docstring)."""
    if options.segments not in ("all", "first"):
        raise RecordError(f"segments must be 'all' or 'first', got {options.segments!r}")
    path = inputs.annotations
    lines = [
        (n, line.split())
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if line.strip() and not line.lstrip().startswith("#")
    ]

    def parse(rid: str, cols: list[str]) -> Iterator[Pending]:
        if len(cols) != 6:
            raise RecordError(f"expected 6 columns (name class start1 end1 start2 end2), got {len(cols)}")
        name, event_class = cols[0], cols[1]
        frames = [_frame(c, f"col{i + 3}") for i, c in enumerate(cols[2:])]
        spans = []
        for k in (0, 2):
            start, end = frames[k], frames[k + 1]
            if (start == -1) != (end == -1):
                raise RecordError(f"segment {k // 2 + 1}: start and end must both be -1 or both be frames")
            if start == -1:
                continue
            if start < 0 or end < start:
                raise RecordError(f"segment {k // 2 + 1}: ends before it starts (frames {start} > {end})")
            spans.append((start / options.frame_rate, end / options.frame_rate))
        if event_class == "Normal" and spans:
            raise RecordError("a Normal video has an anomaly segment")
        if event_class != "Normal" and not spans:
            raise RecordError(f"class {event_class} but no anomaly segment")
        if options.segments == "first":
            spans = spans[:1]
        video = options.video_pattern.format(video_name=name, event_class=event_class)

        def make(info: VideoInfo | None) -> list[Stream]:
            targets = [
                Target(time=s, window=(s, e), content=options.response, label="Warning") for s, e in spans
            ]
            stem = name.rsplit(".", 1)[0]
            return [
                Stream(
                    id=f"ucf_crime-{stem}",
                    source="ucf_crime",
                    task="crime_alert",
                    video=video,
                    clip_start=0.0,
                    clip_end=clip_end_from(info, None, rid),
                    instruction=options.instruction,
                    instruction_time=0.0,
                    targets=targets,
                    meta={"video_id": f"ucf_crime/{stem}", "event_class": event_class},
                )
            ]

        yield Pending(str(path), rid, video, make)

    yield from each_record(((cols[0] if cols else f"line {n}", cols) for n, cols in lines), path, parse)
