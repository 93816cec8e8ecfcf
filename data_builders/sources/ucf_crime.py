"""UCF-Crime temporal annotations -> ``crime_alert`` streams (``Warning`` when an anomaly starts).

``python -m data_builders build source=ucf_crime annotations=/data/ucf/Temporal_Anomaly_Annotation_for_Testing_Videos.txt videos=/data/ucf/videos out=/data/built/ucf_crime``

Input: the whitespace-separated text file (``Temporal_Anomaly_Annotation.txt`` in
``WaqasSultani/AnomalyDetectionCVPR2018``; the same content as the dataset zip's
``Temporal_Anomaly_Annotation_for_Testing_Videos.txt``), one test video per line:
``video_name event_class start1 end1 start2 end2``, frame numbers, ``-1`` for no (second) segment;
``Normal`` videos have all ``-1`` and become negatives.

Videos: the release keeps anomaly videos in ``<root>/<Class>/<name>`` and the Normal test videos
in ``<root>/Testing_Normal_Videos_Anomaly/<name>``; the default ``video_pattern``
``{folder}/{video_name}`` gives exactly that (``folder`` = ``normal_folder`` for Normal lines, the
class otherwise), and a flat or other layout is found by the driver's video index.

Frame numbers become seconds at the probed video's fps (``use_probed_fps``; the annotation's
frames count the file's frames), ``frame_rate`` (30, the official evaluation's) when the video is
not probed or the option is off; a probed fps that differs from ``frame_rate`` is logged as a
warning and counted (``fps_differs_from_frame_rate``). Targets: one ``Warning`` per annotated
segment at ``start / fps`` seconds, window ``[start, end] / fps`` (two segments = two separate
incidents, each alerted once); ``segments=first`` keeps only the first. Frame numbers are used as
given (no 1-based shift: frame 165 at 30 fps is 5.5 s; the official 1-based convention would be
33 ms earlier).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

from data_builders.records import RecordError, Stream, Target
from data_builders.toolkit import (
    BuildInputs,
    ConversionError,
    Pending,
    SourceSpec,
    Tally,
    check_options,
    clip_end_from,
    each_record,
    read_text,
)
from data_builders.video import VideoInfo

log = logging.getLogger("data_builders")
#: Largest frame number accepted (about 9 years at 30 fps): bigger ones are typos.
MAX_FRAME = 10**10


@dataclass
class UcfCrimeSourceConfig:
    """Keys of ``source=ucf_crime``."""

    frame_rate: float = 30.0
    """Frame rate of the frame numbers when the video is not probed (the official evaluation's 30)."""
    use_probed_fps: bool = True
    """Convert frames at the probed video's fps (warn when it differs from ``frame_rate``)."""
    video_pattern: str = "{folder}/{video_name}"
    """Video path under ``videos``; fields ``video_name``, ``event_class`` and ``folder`` (the class, or
    ``normal_folder``)."""
    normal_folder: str = "Testing_Normal_Videos_Anomaly"
    """``folder`` of the Normal lines (the anomaly lines' ``folder`` is their class)."""
    segments: str = "all"
    """``all``: one target per segment; ``first``: only the first segment."""
    instruction: str = (
        "Watch this surveillance feed and warn me once when a crime or suspicious activity begins."
    )
    """The user's instruction, given at t=0."""
    response: str = "Warning: suspicious activity is happening."
    """The reference reply at each target."""

    def __post_init__(self) -> None:
        check_options(self, positive=["frame_rate"], choices={"segments": ("all", "first")})


def _frame(text: str, name: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise RecordError(f"field '{name}': expected a frame number, got {text[:40]!r}") from None
    if abs(value) > MAX_FRAME:
        raise RecordError(f"field '{name}': frame number {text[:40]} out of range")
    return value


def _anomaly_spans(event_class: str, frames: list[int]) -> list[tuple[int, int]]:
    """The (start, end) frames of a line's anomaly segments (``-1 -1``: none), checked against
    its class: a Normal video has none, any other class at least one."""
    spans = []
    for k in (0, 2):
        start, end = frames[k], frames[k + 1]
        if (start == -1) != (end == -1):
            raise RecordError(f"segment {k // 2 + 1}: start and end must both be -1 or both be frames")
        if start == -1:
            continue
        if start < 0 or end < start:
            raise RecordError(f"segment {k // 2 + 1}: ends before it starts (frames {start} > {end})")
        spans.append((start, end))
    if event_class == "Normal" and spans:
        raise RecordError("a Normal video has an anomaly segment")
    if event_class != "Normal" and not spans:
        raise RecordError(f"class {event_class} but no anomaly segment")
    return spans


def _fps(info: VideoInfo | None, options: UcfCrimeSourceConfig, name: str, tally: Tally) -> float:
    """The rate the frame numbers are converted at: the probed one with ``use_probed_fps`` (a
    difference from ``frame_rate`` is logged and counted), else ``frame_rate``."""
    fps = options.frame_rate
    if info is not None and options.use_probed_fps and info.fps > 0:
        fps = info.fps
        if abs(fps - options.frame_rate) > 1e-3:
            log.warning(
                "ucf_crime %s: probed %.3f fps, not %.3g: frames converted at %.3f fps",
                name,
                fps,
                options.frame_rate,
                fps,
            )
            tally.count("fps_differs_from_frame_rate")
    return fps


def build_ucf_crime(
    inputs: BuildInputs, options: UcfCrimeSourceConfig
) -> Iterator[Pending | ConversionError]:
    """One stream per annotated video (see the module docstring)."""
    path = inputs.annotations
    lines = [
        (n, line.split())
        for n, line in enumerate(read_text(path).splitlines(), start=1)
        if line.strip() and not line.lstrip().startswith("#")
    ]

    def parse(rid: str, cols: list[str]) -> Iterator[Pending]:
        if len(cols) != 6:
            raise RecordError(f"expected 6 columns (name class start1 end1 start2 end2), got {len(cols)}")
        name, event_class = cols[0], cols[1]
        spans = _anomaly_spans(event_class, [_frame(c, f"col{i + 3}") for i, c in enumerate(cols[2:])])
        if options.segments == "first":
            spans = spans[:1]
        folder = options.normal_folder if event_class == "Normal" else event_class
        video = options.video_pattern.format(video_name=name, event_class=event_class, folder=folder)
        stem = name.rsplit(".", 1)[0]
        tally = Tally()

        def make(info: VideoInfo | None) -> list[Stream]:
            fps = _fps(info, options, name, tally)
            targets = [
                Target(time=s / fps, window=(s / fps, e / fps), content=options.response, label="Warning")
                for s, e in spans
            ]
            return [
                Stream.whole_video(
                    id=f"ucf_crime-{stem}",
                    source="ucf_crime",
                    task="crime_alert",
                    video=video,
                    clip_end=clip_end_from(info, None, rid),
                    instruction=options.instruction,
                    targets=targets,
                    meta={"video_id": f"ucf_crime/{stem}", "event_class": event_class, "fps": fps},
                )
            ]

        yield Pending(str(path), rid, video, make, lookup=(stem,), tally=tally)

    yield from each_record(((cols[0] if cols else f"line {n}", cols) for n, cols in lines), path, parse)


SPEC = SourceSpec("ucf_crime", build=build_ucf_crime, config=UcfCrimeSourceConfig)
