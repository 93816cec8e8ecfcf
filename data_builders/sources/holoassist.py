"""HoloAssist annotations -> ``event_intervention`` streams (the instructor's corrections and guidance).

``python -m data_builders build source=holoassist annotations=/data/holoassist/data-annotation-trainval-v1.json videos=/data/holoassist/videos out=/data/built/holoassist``

Input: ``data-annotation-trainval-v1.json``, a list of ``{"video_name", "events": [{"label", "start",
"end", "attributes"}]}``, times in seconds. Targets are the conversations the instructor starts
(``Conversation Purpose`` beginning with ``instructor-start-conversation``): the instructor
spoke when an intervention was due, so the target is at the conversation's start, window = the
conversation, content = its ``Transcription``. Purposes ending in "correct the wrong action"
get category ``error_recovery``, the other instructor-started ones ``next_step_guidance``.
Conversations the student starts are questions (reactive), not targets. A video where the
instructor never steps in is a negative. One stream per video, duration probed.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from data_builders.records import RecordError, Stream, Target
from data_builders.registry import (
    BuildInputs,
    ConversionError,
    Pending,
    check_span,
    clip_end_from,
    each_record,
    load_json,
    register_source,
    require,
    seconds,
)
from data_builders.video import VideoInfo

INSTRUCTOR = "instructor-start-conversation"


@dataclass
class HoloAssistOptions:
    """Keys of ``source=holoassist``."""

    video_pattern: str = "{video_name}.mp4"
    """Video path under ``videos`` (adapt to how the release's videos are unpacked)."""
    instruction: str = (
        "I am doing a task. Correct me when I do something wrong and tell me what to do next when I need it."
    )
    """The user's instruction at t=0."""


@register_source("holoassist", HoloAssistOptions)
def build_holoassist(inputs: BuildInputs, options: HoloAssistOptions) -> Iterator[Pending | ConversionError]:
    """One intervention stream per video (see the module docstring)."""
    path = inputs.annotations
    data = load_json(path)
    if not isinstance(data, list):
        raise RecordError("expected a list of videos", file=path)

    def parse(rid: str, rec: dict) -> Iterator[Pending]:
        targets = []
        for i, ev in enumerate(require(rec, "events")):
            if require(ev, "label") != "Conversation":
                continue
            attrs = ev.get("attributes") or {}
            purpose = str(attrs.get("Conversation Purpose") or "")
            if not purpose.startswith(INSTRUCTOR):
                continue
            start, end = (
                seconds(require(ev, "start"), f"events[{i}].start"),
                seconds(require(ev, "end"), f"events[{i}].end"),
            )
            check_span(start, end, f"events[{i}]")
            text = str(attrs.get("Transcription") or "").strip()
            if not text:
                raise RecordError(f"events[{i}]: instructor conversation without a Transcription")
            category = (
                "error_recovery" if purpose.endswith("correct the wrong action") else "next_step_guidance"
            )
            targets.append(Target(time=start, window=(start, end), content=text, category=category))
        targets.sort(key=lambda t: t.time)
        video = options.video_pattern.format(video_name=rid)

        def make(info: VideoInfo | None) -> list[Stream]:
            return [
                Stream(
                    id=f"holoassist-{rid}",
                    source="holoassist",
                    task="event_intervention",
                    video=video,
                    clip_start=0.0,
                    clip_end=clip_end_from(info, None, rid),
                    instruction=options.instruction,
                    instruction_time=0.0,
                    targets=targets,
                    meta={"video_id": f"holoassist/{rid}"},
                )
            ]

        yield Pending(str(path), rid, video, make)

    yield from each_record(
        (
            (str(r.get("video_name", f"item {k}")) if isinstance(r, dict) else f"item {k}", r)
            for k, r in enumerate(data)
        ),
        path,
        parse,
    )
