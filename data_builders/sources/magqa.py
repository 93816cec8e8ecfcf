"""Shot2Story-MAGQA timed QA -> ``timed_qa`` streams (each answer at its reply time, with its span).

``python -m data_builders build source=magqa annotations=/data/shot2story/annotations/magqa_train.json videos=/data/shot2story/videos_extracted out=/data/built/magqa``

Input: a JSON list (or JSON Lines) of ``{"video_uid", "video_start_time"?, "conversation": [...]}``;
conversation turns are ``{"role": "user", "content", "time"}`` and
``{"role": "assistant", "content", "time", "timespan": [start, end]}``, times in seconds. We read
every time as a time on the video file (``video_start_time``, default 0, is the clip start).

One stream per user question: instruction = the question at its ``time``; targets = the assistant
turns after it (until the next question), each at its reply ``time`` with ``window = timespan``
(the span of the evidence, which MAGQA's in-span score uses). The clip runs from
``video_start_time`` to the end of the probed video ``video_pattern.format(video_uid=...)``.
Errors: missing fields, unparsable times, spans that end before they start, replies before their
question, an assistant turn before any question.
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


@dataclass
class MagqaOptions:
    """Keys of ``source=magqa``."""

    video_pattern: str = "{video_uid}.mp4"
    """Video path under ``videos`` (Shot2Story clips)."""


@register_source("magqa", MagqaOptions)
def build_magqa(inputs: BuildInputs, options: MagqaOptions) -> Iterator[Pending | ConversionError]:
    """One stream per question (see the module docstring)."""
    path = inputs.annotations
    data = load_json(path)
    if not isinstance(data, list):
        raise RecordError("expected a list of MAGQA records", file=path)

    def parse(rid: str, rec: dict) -> Iterator[Pending]:
        uid = str(require(rec, "video_uid"))
        start = seconds(rec.get("video_start_time") or 0.0, "video_start_time")
        turns = require(rec, "conversation")
        if not isinstance(turns, list) or not turns:
            raise RecordError("field 'conversation': expected a non-empty list")
        questions: list[tuple[float, str, list[Target]]] = []
        for i, turn in enumerate(turns):
            role, text = require(turn, "role"), str(require(turn, "content"))
            t = seconds(require(turn, "time"), f"conversation[{i}].time")
            if t < start:
                raise RecordError(f"conversation[{i}]: time {t} is before the clip start {start}")
            if role == "user":
                questions.append((t, text, []))
            elif role == "assistant":
                if not questions:
                    raise RecordError(f"conversation[{i}]: an answer before any question")
                if t < questions[-1][0]:
                    raise RecordError(
                        f"conversation[{i}]: reply at {t}s is before its question at {questions[-1][0]}s"
                    )
                span = turn.get("timespan")
                window = None
                if span is not None:
                    if not isinstance(span, list) or len(span) != 2:
                        raise RecordError(f"conversation[{i}].timespan: expected [start, end], got {span!r}")
                    window = (seconds(span[0], "timespan"), seconds(span[1], "timespan"))
                    check_span(*window, f"conversation[{i}].timespan")
                questions[-1][2].append(Target(time=t, content=text, window=window))
            else:
                raise RecordError(f"conversation[{i}]: unknown role {role!r}")
        video = options.video_pattern.format(video_uid=uid)

        def make(info: VideoInfo | None) -> list[Stream]:
            end = clip_end_from(info, None, rid)
            return [
                Stream(
                    id=f"magqa-{rid}-q{k}",
                    source="magqa",
                    task="timed_qa",
                    video=video,
                    clip_start=start,
                    clip_end=end,
                    instruction=q,
                    instruction_time=t,
                    targets=targets,
                    meta={"video_id": f"shot2story/{uid}"},
                )
                for k, (t, q, targets) in enumerate(questions)
            ]

        yield Pending(str(path), rid, video, make)

    def record_id(k: int, rec) -> str:
        uid = rec.get("video_uid") if isinstance(rec, dict) else None
        return f"{uid}-{k}" if uid else f"item {k}"

    yield from each_record(((record_id(k, r), r) for k, r in enumerate(data)), path, parse)
