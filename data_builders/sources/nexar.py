"""Nexar dashcam collision clips -> ``accident_warning`` streams (``Warning`` once, before the event).

``python -m data_builders build source=nexar annotations=/data/nexar/train.csv videos=/data/nexar/train out=/data/built/nexar``

Input: a CSV with one row per clip. The video comes from the first present column of ``file_name``
(the HF folder layout), ``video`` or ``id`` (the Kaggle ``train.csv``; digit-only ids are zero-padded
to ``id_width`` and formatted with ``video_pattern``). ``time_of_alert`` and ``time_of_event`` are
seconds from the clip start; both empty/null/NaN make a negative (no collision). An optional
``target`` column (0/1) must agree with that.

Target: one ``Warning`` at ``time_of_alert`` (the moment the collision first becomes predictable:
the earliest reliable warning, as the task asks), with window ``[time_of_alert, time_of_event]``.
The clip is the whole file (its duration is probed). Errors: only one of the two times given, the
event more than 0.5 s before the alert (less is repaired, ``registry.event_span``), unparsable
times, a ``target`` flag that contradicts the times.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

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
    event_span,
    read_text,
    seconds,
)
from data_builders.video import VideoInfo

NULLS = {"", "null", "none", "nan"}


@dataclass
class NexarSourceConfig:
    """Keys of ``source=nexar``."""

    video_pattern: str = "{id}.mp4"
    """Video path (under ``videos``) for rows that name their clip by ``id``."""
    id_width: int = 5
    """Digit-only ids are zero-padded to this width (Kaggle ids 822 -> 00822.mp4)."""
    instruction: str = (
        "Watch the road. Warn me once, as early as it becomes predictable, if a collision is about to happen."
    )
    """The user's instruction, given at t=0."""
    response: str = "Warning: a collision is about to happen."
    """The reference reply at the target."""

    def __post_init__(self) -> None:
        check_options(self, non_negative=["id_width"])


def _time(row: dict, key: str) -> float | None:
    value = row.get(key)
    if value is None or str(value).strip().lower() in NULLS:
        return None
    t = seconds(value, key)
    if math.isnan(t):
        return None
    return t


def _video(row: dict, options: NexarSourceConfig) -> str:
    for key in ("file_name", "video"):
        if (row.get(key) or "").strip():
            return row[key].strip()
    vid = (row.get("id") or "").strip()
    if not vid:
        raise RecordError("missing field 'file_name', 'video' or 'id'")
    if vid.isdigit():
        vid = vid.zfill(options.id_width)
    return options.video_pattern.format(id=vid)


def _alert_span(row: dict, tally: Tally) -> tuple[float | None, float | None]:
    """A row's (time_of_alert, time_of_event), fitted by :func:`event_span`, or (None, None) for
    a video without an accident; checked against the row's ``target`` flag if it has one."""
    alert, event = _time(row, "time_of_alert"), _time(row, "time_of_event")
    if (alert is None) != (event is None):
        raise RecordError("time_of_alert and time_of_event must both be set or both be empty")
    if alert is not None:
        span = event_span(alert, event, "time_of_alert..time_of_event", tally)
        if span is None:
            raise RecordError(
                f"field 'time_of_alert..time_of_event': ends before it starts ({alert} > {event})"
            )
        alert, event = span
    flag = (row.get("target") or "").strip()
    if flag and flag not in ("0", "1"):
        raise RecordError(f"field 'target': expected 0 or 1, got {flag!r}")
    if flag and (flag == "1") != (alert is not None):
        raise RecordError(f"target={flag} contradicts the times ({alert}, {event})")
    return alert, event


def build_nexar(inputs: BuildInputs, options: NexarSourceConfig) -> Iterator[Pending | ConversionError]:
    """One stream per CSV row (see the module docstring for the target rule)."""
    path = inputs.annotations
    try:
        rows = list(csv.DictReader(io.StringIO(read_text(path), newline="")))
    except csv.Error as exc:
        raise RecordError(f"not a readable CSV: {exc}", file=path) from None
    if rows and not {"time_of_alert", "time_of_event"} <= set(rows[0]):
        raise RecordError("CSV lacks the columns time_of_alert and time_of_event", file=path)

    def record_id(k: int, row: dict) -> str:
        for key in ("file_name", "video", "id"):
            if (row.get(key) or "").strip():
                return Path(row[key].strip()).stem
        return f"row {k + 2}"

    def parse(rid: str, row: dict) -> Iterator[Pending]:
        video = _video(row, options)
        tally = Tally()
        alert, event = _alert_span(row, tally)

        def make(info: VideoInfo | None) -> list[Stream]:
            targets = (
                []
                if alert is None
                else [Target(time=alert, window=(alert, event), content=options.response, label="Warning")]
            )
            meta = {"video_id": f"nexar/{Path(video).stem}"}
            for key in ("light_conditions", "weather", "scene"):
                if row.get(key):
                    meta[key] = row[key]
            return [
                Stream.whole_video(
                    id=f"nexar-{Path(video).stem}",
                    source="nexar",
                    task="accident_warning",
                    video=video,
                    clip_end=clip_end_from(info, None, rid),
                    instruction=options.instruction,
                    targets=targets,
                    meta=meta,
                )
            ]

        yield Pending(str(path), rid, video, make, lookup=(Path(video).stem,), tally=tally)

    yield from each_record(((record_id(k, r), r) for k, r in enumerate(rows)), path, parse)


SPEC = SourceSpec("nexar", build=build_nexar, config=NexarSourceConfig)
