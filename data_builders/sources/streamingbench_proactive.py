"""StreamingBench's Proactive Output questions -> ``streamingbench_proactive`` streams, one per question.

``python -m data_builders build source=streamingbench_proactive annotations=/data/StreamingBench/src/data/questions_proactive.json videos=/data/StreamingBench/src out=/data/built/streamingbench_proactive``

Format, as the benchmark's harness and scorer read it (``THUNLP-MT/StreamingBench``,
``src/benchmark/StreamingBenchProactive.py`` and ``src/data/count.py``): a JSON list of video
segments ``{"time": "[0:00:00 - 0:00:30]", "video_path": "./videos/sample_17_proactive.mp4",
"video_categories", "questions": [{"task_type": "Proactive Output", "question", "time_stamp":
"00:00:20", "ground_truth_time_stamp": "00:00:29", "ground_truth_output": "3", "required_ability"},
...]}`` (one or two questions each). Times are ``H:MM:SS`` or ``HH:MM:SS`` on the video file's clock
(``metrics.streamingbench_proactive.parse_clock``; anything else is refused, naming the field);
the segment's ``time`` is not read by the harness (a question may lie outside it) and is only kept.

One stream per question, built as the harness runs it: the harness cuts the video from the
question's ``time_stamp`` to each poll (``time_stamp + 1`` up to ``ground_truth_time_stamp + 4``),
so the clip is ``[time_stamp, ground_truth_time_stamp + 4]`` (its steps are the frames the polls
see; cut to the probed video's end), the instruction is the question at ``time_stamp``, and the one
target is due at ``ground_truth_time_stamp`` with content and label ``ground_truth_output``. ``meta``
holds the benchmark's task type (``benchmark_task``), the question's place in the file (``entry``,
``question_index``) and the release's own fields (``release_entry`` without its questions,
``release_question``), from which ``benchmarks.protocols.streamingbench_proactive.write_official`` writes
the official prediction file back. Errors (the question's record only): an unknown task type, a
missing or malformed time, an empty question or expected output, an answer due before its question.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from data_builders.records import RecordError, Stream, Target
from data_builders.toolkit import (
    BuildInputs,
    ConversionError,
    Pending,
    SourceSpec,
    each_record,
    load_json,
)
from data_builders.video import VideoInfo
from metrics.streamingbench_proactive import LAST_POLL_AFTER_GT_S, parse_clock

SOURCE = "streamingbench_proactive"
#: The task types of the Proactive Output release; another one is an error, never a silent guess.
TASK_TYPES = frozenset({"Proactive Output"})


@dataclass
class StreamingBenchProactiveSourceConfig:
    """Keys of ``source=streamingbench_proactive``."""

    video_pattern: str = "{video_path}"
    """Video path under ``videos``; the release's ``video_path`` is relative to its ``src/`` folder."""


@dataclass(frozen=True)
class ReleaseQuestion:
    """One question of the release, checked: where it is, its key and its parsed times (s)."""

    where: str
    video_path: str
    task_type: str
    question: str
    time_stamp: int
    ground_truth: int
    expected: str

    @property
    def key(self) -> tuple[str, str, str]:
        """What tells a question from every other of the release: video, time and wording."""
        return self.video_path, str(self.time_stamp), self.question


def _string(data: dict, key: str, *, empty_ok: bool = False) -> str:
    value = data.get(key)
    if value is None:
        raise RecordError("missing field", field=key)
    if not isinstance(value, str) or (not empty_ok and not value.strip()):
        raise RecordError(f"expected a non-empty string, got {value!r}", field=key)
    return value


def _clock(data: dict, key: str) -> int:
    try:
        return parse_clock(_string(data, key))
    except RecordError:
        raise
    except ValueError as exc:
        raise RecordError(str(exc), field=key) from None


def entry_questions(entry: Any) -> list[Any]:
    """A segment's ``questions`` list (else a ``RecordError`` naming the field)."""
    if not isinstance(entry, dict):
        raise RecordError(f"expected an object, got {type(entry).__name__}")
    questions = entry.get("questions")
    if not isinstance(questions, list):
        raise RecordError("missing or not a list", field="questions")
    return questions


def read_question(entry: dict, question: Any, where: str) -> ReleaseQuestion:
    """The checked fields of one question of a segment (``where``: its place in the file, e.g.
    ``[3].questions[0]``); a ``RecordError`` names the field and the reason (an unknown task type, a
    missing or malformed time, an empty text); the caller adds the file and the record."""
    video = _string(entry, "video_path")
    if not isinstance(question, dict):
        raise RecordError(f"expected an object, got {type(question).__name__}")
    task = _string(question, "task_type")
    if task not in TASK_TYPES:
        raise RecordError(
            f"unknown task type {task!r} (known: {', '.join(sorted(TASK_TYPES))})", field="task_type"
        )
    return ReleaseQuestion(
        where=where,
        video_path=video,
        task_type=task,
        question=_string(question, "question"),
        time_stamp=_clock(question, "time_stamp"),
        ground_truth=_clock(question, "ground_truth_time_stamp"),
        expected=_string(question, "ground_truth_output"),
    )


def build_streamingbench_proactive(
    inputs: BuildInputs, options: StreamingBenchProactiveSourceConfig
) -> Iterator[Pending | ConversionError]:
    """One stream per question (see the module docstring)."""
    path = inputs.annotations
    data = load_json(path)
    if not isinstance(data, list):
        raise RecordError(f"expected a list of video segments, got {type(data).__name__}", file=path)

    def parse(rid: str, item: tuple[int, Any, int | None, Any]) -> Iterator[Pending]:
        i, entry, k, raw = item
        if k is None:
            entry_questions(entry)  # raises, naming what is wrong
        q = read_question(entry, raw, rid)
        if q.ground_truth < q.time_stamp:
            raise RecordError(
                f"ground_truth_time_stamp {raw['ground_truth_time_stamp']} is before the question's "
                f"time_stamp {raw['time_stamp']}: the answer would be due before it is asked"
            )
        video = options.video_pattern.format(video_path=q.video_path)
        meta = {
            "video_id": q.video_path,
            "benchmark_task": q.task_type,
            "entry": i,
            "question_index": k,
            "release_entry": {key: value for key, value in entry.items() if key != "questions"},
            "release_question": raw,
        }
        make = partial(_question_stream, q=q, sid=f"{SOURCE}-{i}-{k}", video=video, meta=meta)
        yield Pending(str(path), rid, video, make, needs_info=False, lookup=(Path(q.video_path).stem,))

    yield from each_record(_questions(data), path, parse)


def _questions(data: list) -> Iterator[tuple[str, tuple[int, Any, int | None, Any]]]:
    """(where, (segment index, segment, question index, question)) of every question; a segment
    without a list of questions once, with question index None (its error)."""
    for i, entry in enumerate(data):
        questions = entry.get("questions") if isinstance(entry, dict) else None
        if not isinstance(questions, list):  # the segment's error, once
            yield f"[{i}]", (i, entry, None, None)
            continue
        for k, q in enumerate(questions):
            yield f"[{i}].questions[{k}]", (i, entry, k, q)


def _question_stream(
    info: VideoInfo | None, *, q: ReleaseQuestion, sid: str, video: str, meta: dict[str, Any]
) -> list[Stream]:
    """The question's stream: from its time stamp to a poll past the answer's time (or the file's end)."""
    end = q.ground_truth + LAST_POLL_AFTER_GT_S
    if info is not None and info.duration < end:
        end = info.duration  # the harness's cut ends at the file's end too
    if end <= q.time_stamp:
        raise RecordError(
            f"the video lasts {end:.3f}s, not past the question's time_stamp "
            f"{meta['release_question']['time_stamp']}"
        )
    return [
        Stream(
            id=sid,
            source=SOURCE,
            task=SOURCE,
            video=video,
            clip_start=float(q.time_stamp),
            clip_end=float(end),
            instruction=q.question,
            instruction_time=float(q.time_stamp),
            targets=[Target(time=float(q.ground_truth), content=q.expected, label=q.expected)],
            meta=meta,
        )
    ]


SPEC = SourceSpec(SOURCE, build=build_streamingbench_proactive, config=StreamingBenchProactiveSourceConfig)
