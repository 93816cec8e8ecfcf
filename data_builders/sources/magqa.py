"""Shot2Story-MAGQA timed QA -> ``timed_qa`` streams (each answer at its reply time, with its span).

``python -m data_builders build source=magqa annotations=/data/MMDuetIT/shot2story/annotations/magqa_train-0.25_0.5-earlier.json videos=/data/shot2story/videos out=/data/built/magqa``

Format (no real record was seen; fields as MMDuet reads them: ``yellow-binary-tree/MMDuet``
``data/magqa.py`` and ``data/stream.py`` for the train file, ``test/datasets.py`` and
``test/evaluate.py`` for the test file). Two structures, told apart per record:

- train (``magqa_train-0.25_0.5-earlier.json``): ``{"video_uid", "video_start_time",
  "conversation": [{"role": "user", "content", "time"}, {"role": "assistant", "content", "time",
  "timespan": [start, end], "learn"?}, ...]}``; ``video_uid`` is the Shot2Story clip's file name,
  extension included (``<youtube_id>.<chapter>.mp4``);
- test (``magqa_test.json``): ``{"question_id", "video", "conversation": [{"role": "user",
  "content", "time"}], "answer": [{"content", "time": [start, end]}, ...]}``; an answer is due at
  its span's end (MMDuet's gold generation time), window = the span.

Times are seconds on the clip file. One stream per user question: instruction = the question at its
``time``; targets = the assistant turns after it (until the next question), each at its reply
``time`` with ``window = timespan``. The clip starts at ``video_start_time`` (0 if absent), or
earlier when a question or span starts earlier (MMDuet only requires the input to start by
``video_start_time``), and ends at the probed video's end; replies past the end are the driver's
(clamped up to 1 s, else dropped). An inverted span is repaired or dropped
(``registry.event_span``); replies before their question and answers before any question are errors.
"""

from __future__ import annotations

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
    clip_end_from,
    each_record,
    event_span,
    load_json,
    require,
    seconds,
)
from data_builders.video import VideoInfo


@dataclass
class MagqaSourceConfig:
    """Keys of ``source=magqa``."""

    video_pattern: str = "{video_uid}"
    """Video path under ``videos``; ``video_uid`` (or the test file's ``video``) already ends in .mp4."""


def _span(value: object, name: str, tally: Tally) -> tuple[float, float] | None:
    if not isinstance(value, list) or len(value) != 2:
        raise RecordError(f"field '{name}': expected [start, end], got {value!r}")
    return event_span(seconds(value[0], name), seconds(value[1], name), name, tally)


def train_questions(rec: dict, tally: Tally) -> list[tuple[float, str, list[Target]]]:
    """(time, question, targets) of a train-format record."""
    turns = require(rec, "conversation")
    if not isinstance(turns, list) or not turns:
        raise RecordError("field 'conversation': expected a non-empty list")
    questions: list[tuple[float, str, list[Target]]] = []
    for i, turn in enumerate(turns):
        role, text = require(turn, "role"), str(require(turn, "content"))
        t = seconds(require(turn, "time"), f"conversation[{i}].time")
        if role == "user":
            questions.append((t, text, []))
        elif role == "assistant":
            if not questions:
                raise RecordError(f"conversation[{i}]: an answer before any question")
            if t < questions[-1][0]:
                raise RecordError(
                    f"conversation[{i}]: reply at {t}s is before its question at {questions[-1][0]}s"
                )
            window = None
            if turn.get("timespan") is not None:
                window = _span(turn["timespan"], f"conversation[{i}].timespan", tally)
                if window is None:
                    continue
            questions[-1][2].append(Target(time=t, content=text, window=window))
        else:
            raise RecordError(f"conversation[{i}]: unknown role {role!r}")
    return questions


def benchmark_questions(rec: dict, tally: Tally) -> list[tuple[float, str, list[Target]]]:
    """(time, question, targets) of a test-format record: answers due at their span's end."""
    turns = require(rec, "conversation")
    if not isinstance(turns, list) or not turns or require(turns[0], "role") != "user":
        raise RecordError("field 'conversation': expected the question as its first (user) turn")
    q_time = seconds(require(turns[0], "time"), "conversation[0].time")
    targets = []
    for i, answer in enumerate(require(rec, "answer")):
        span = _span(require(answer, "time"), f"answer[{i}].time", tally)
        if span is None:
            continue
        if span[1] < q_time:
            raise RecordError(f"answer[{i}]: due at {span[1]}s, before its question at {q_time}s")
        targets.append(Target(time=span[1], content=str(require(answer, "content")), window=span))
    return [(q_time, str(require(turns[0], "content")), targets)]


def build_magqa(inputs: BuildInputs, options: MagqaSourceConfig) -> Iterator[Pending | ConversionError]:
    """One stream per question (see the module docstring)."""
    path = inputs.annotations
    data = load_json(path)
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        raise RecordError("expected a list of MAGQA records", file=path)

    def parse(rid: str, rec: dict) -> Iterator[Pending]:
        tally = Tally()
        is_test = isinstance(rec, dict) and "answer" in rec and "video_uid" not in rec
        uid = str(require(rec, "video" if is_test else "video_uid"))
        questions = benchmark_questions(rec, tally) if is_test else train_questions(rec, tally)
        given = seconds(rec.get("video_start_time") or 0.0, "video_start_time")
        earliest = [t for t, _, ts in questions] + [
            x.window[0] for _, _, ts in questions for x in ts if x.window
        ]
        start = max(0.0, min([given, *earliest]))
        video = options.video_pattern.format(video_uid=uid)
        clip = Path(uid).stem if uid.lower().endswith(".mp4") else uid

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
                    meta={"video_id": f"shot2story/{clip}", "video_start_time": given},
                )
                for k, (t, q, targets) in enumerate(questions)
            ]

        yield Pending(str(path), rid, video, make, lookup=(clip,), tally=tally)

    def record_id(k: int, rec: object) -> str:
        if not isinstance(rec, dict):
            return f"item {k}"
        if rec.get("question_id") is not None:
            return str(rec["question_id"])
        uid = rec.get("video_uid")
        return f"{Path(str(uid)).stem}-{k}" if uid else f"item {k}"

    yield from each_record(((record_id(k, r), r) for k, r in enumerate(data)), path, parse)


SPEC = SourceSpec("magqa", build=build_magqa, config=MagqaSourceConfig)
