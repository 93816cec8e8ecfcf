"""ESTP-Bench questions -> ``estp`` streams (one per question, the benchmark's answers as targets).

``python -m data_builders build source=estp annotations=/data/ESTP-Bench/estp_dataset/estp_bench_sq.json videos=/data/ESTP-Bench/full_scale_2fps_max384 out=/data/built/estp``

Format (no release file was seen; fields as the benchmark's own code reads them:
``zhangyl4/EyeWO`` ``data/estp/livechat.py`` (``Ego4DESTPSQA``, ``Ego4DESTPCQA``) and
``eval_estp_batch.py``), both release files being ``{video_uid: {clip_uid: [qa, ...]}}``:

- single question (``estp_bench_sq.json``): ``{"clip_start_time", "clip_end_time", "Task Type",
  "question", "conversation": [{"role": "assistant", "content", "start_time", "end_time"}, ...]}``;
  the question has no time of its own: it is asked when the clip starts (the polling baselines
  start there);
- contextual (``estp_bench_cq_v3.json``): the same, the clip bounds possibly as ``start_time`` /
  ``end_time``, the questions as ``{"role": "user", "content", "time"}`` turns among the assistant
  turns (a qa with both a ``question`` and user turns has them all).

Times are seconds on the Ego4D video's clock (the video file ``<video_uid>.mp4`` is the whole
video; the clip is a part of it). One stream per qa: instruction = its first question at its time,
every question in ``meta["questions"]`` and the later ones in ``meta["user_turns"]`` (given to the
model at their times: ``engine.render.TurnRenderer.later_turns``); targets = the assistant turns, each with ``window =
[start_time, end_time]`` and due at the paper's optimal time (the window's start for the tasks
answered on sight, else its midpoint: ``metrics.estp.optimal_time``). ``meta`` keeps what the
official prediction file needs (``video_uid``, ``clip_uid``, ``qa_index``: the qa's place in its
clip's list), the benchmark's task type (``benchmark_task``) and the qa as the file holds it
(``release``: ``eval.run`` writes the ground truth of the qa it evaluated from it). A qa of an unknown task type, a
question without a time, an answer without its interval or one ending before it starts is an error
of that qa, never a silent drop.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
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
    require,
    seconds,
)
from metrics.estp import TASK_TYPES, optimal_time


@dataclass
class EstpSourceConfig:
    """Keys of ``source=estp``."""

    video_pattern: str = "{video_uid}.mp4"
    """Video path under ``videos``; the release's 2 fps videos are named by the Ego4D video uid."""


@dataclass(frozen=True)
class Question:
    """One user question of a qa."""

    time: float
    text: str


@dataclass(frozen=True)
class GroundTruthAnswer:
    """One assistant turn of a qa: what to say and in which interval."""

    start: float
    end: float
    content: str


@dataclass(frozen=True)
class ReleaseQA:
    """One qa of a release file, parsed (``raw`` is the qa object as the file holds it)."""

    video_uid: str
    clip_uid: str
    index: int
    task_type: str
    task: str
    """The paper's short name of ``task_type`` (``metrics.estp.TASK_TYPES``)."""
    clip_start: float
    clip_end: float
    questions: tuple[Question, ...]
    answers: tuple[GroundTruthAnswer, ...]
    raw: dict[str, Any] = field(compare=False, repr=False)

    @property
    def key(self) -> tuple[str, str, int]:
        return self.video_uid, self.clip_uid, self.index

    @property
    def name(self) -> str:
        """How errors name the qa: ``video_uid/clip_uid[index]``."""
        return qa_name(self.video_uid, self.clip_uid, self.index)

    @property
    def record_id(self) -> str:
        return f"estp-{self.video_uid}-{self.clip_uid}-{self.index}"


def qa_name(video_uid: str, clip_uid: str, index: int) -> str:
    return f"{video_uid}/{clip_uid}[{index}]"


def iter_release(data: Any) -> Iterator[tuple[str, str, int, Any]]:
    """``(video_uid, clip_uid, index, qa)`` of a release-shaped object; a level of the wrong type
    is a :class:`RecordError` naming where."""
    if not isinstance(data, dict):
        raise RecordError(f"expected {{video_uid: {{clip_uid: [qa, ...]}}}}, got a {type(data).__name__}")
    for video_uid, clips in data.items():
        if not isinstance(clips, dict):
            raise RecordError(
                f"expected {{clip_uid: [qa, ...]}}, got a {type(clips).__name__}", record=video_uid
            )
        for clip_uid, qas in clips.items():
            if not isinstance(qas, list):
                raise RecordError(
                    f"expected a list of qa, got a {type(qas).__name__}", record=f"{video_uid}/{clip_uid}"
                )
            for index, qa in enumerate(qas):
                yield video_uid, clip_uid, index, qa


def _bound(qa: dict, *names: str) -> float:
    for name in names:
        if qa.get(name) is not None:
            return seconds(qa[name], name)
    raise RecordError(f"missing field '{names[0]}' (or '{names[1]}')")


def parse_qa(video_uid: str, clip_uid: str, index: int, qa: Any) -> ReleaseQA:
    """One qa of the release; a malformed one raises :class:`RecordError` (record = the qa)."""
    try:
        if not isinstance(qa, dict):
            raise RecordError(f"expected a qa object, got a {type(qa).__name__}")
        task_type = str(require(qa, "Task Type")).strip()
        if task_type not in TASK_TYPES:
            raise RecordError(
                f"field 'Task Type': unknown task type {task_type!r} (known: {', '.join(sorted(TASK_TYPES))})"
            )
        start = _bound(qa, "clip_start_time", "start_time")
        end = _bound(qa, "clip_end_time", "end_time")
        if end <= start:
            raise RecordError(f"the clip ends before it starts ({start} >= {end})")
        turns = require(qa, "conversation")
        if not isinstance(turns, list):
            raise RecordError("field 'conversation': expected a list of turns")
        questions = []
        if qa.get("question") is not None:
            questions.append(Question(start, str(qa["question"])))
        answers = []
        for i, turn in enumerate(turns):
            where = f"conversation[{i}]"
            if not isinstance(turn, dict):
                raise RecordError(f"{where}: expected a turn object, got a {type(turn).__name__}")
            role = str(require(turn, "role")).lower()
            if role == "user":
                if turn.get("time") is None:
                    raise RecordError(f"{where}: a question with no time")
                questions.append(
                    Question(seconds(turn["time"], f"{where}.time"), str(require(turn, "content")))
                )
            elif role == "assistant":
                if not questions:
                    raise RecordError(f"{where}: an answer before any question")
                s = seconds(require(turn, "start_time"), f"{where}.start_time")
                e = seconds(require(turn, "end_time"), f"{where}.end_time")
                if e < s:
                    raise RecordError(f"{where}: the answer's interval ends before it starts ({s} > {e})")
                answers.append(GroundTruthAnswer(s, e, str(turn.get("content") or "")))
            else:
                raise RecordError(f"{where}: unknown role {turn.get('role')!r}")
        if not questions:
            raise RecordError("no question: neither a 'question' field nor a user turn")
        if not answers:
            raise RecordError("no answer: the conversation has no assistant turn")
        return ReleaseQA(
            video_uid=str(video_uid),
            clip_uid=str(clip_uid),
            index=index,
            task_type=task_type,
            task=TASK_TYPES[task_type],
            clip_start=start,
            clip_end=end,
            questions=tuple(sorted(questions, key=lambda q: q.time)),
            answers=tuple(answers),
            raw=qa,
        )
    except RecordError as err:
        raise err.located(record=qa_name(video_uid, clip_uid, index)) from None


def read_release(path: str | Path) -> list[ReleaseQA]:
    """Every qa of a release file (single or contextual); the first bad one raises, naming the file."""
    path = Path(path)
    try:
        return [parse_qa(*item) for item in iter_release(load_json(path))]
    except RecordError as err:
        raise err.located(file=path) from None


def stream_of(qa: ReleaseQA, video: str) -> Stream:
    """The stream record of one qa (see the module docstring)."""
    first = qa.questions[0]
    return Stream(
        id=qa.record_id,
        source="estp",
        task="estp",
        video=video,
        clip_start=qa.clip_start,
        clip_end=qa.clip_end,
        instruction=first.text,
        instruction_time=first.time,
        targets=[
            Target(time=optimal_time(qa.task, a.start, a.end), content=a.content, window=(a.start, a.end))
            for a in qa.answers
        ],
        meta={
            "video_id": qa.video_uid,
            "video_uid": qa.video_uid,
            "clip_uid": qa.clip_uid,
            "qa_index": qa.index,
            "benchmark_task": qa.task_type,
            "questions": [{"time": q.time, "text": q.text} for q in qa.questions],
            "user_turns": [{"time": q.time, "content": q.text} for q in qa.questions[1:]],
            "release": qa.raw,
        },
    )


def build_estp(inputs: BuildInputs, options: EstpSourceConfig) -> Iterator[Pending | ConversionError]:
    """One stream per qa (see the module docstring)."""
    path = inputs.annotations
    data = load_json(path)
    try:
        items = list(iter_release(data))
    except RecordError as err:
        raise err.located(file=path) from None

    def parse(rid: str, item: tuple) -> Iterator[Pending]:
        qa = parse_qa(*item)
        video = options.video_pattern.format(video_uid=qa.video_uid, clip_uid=qa.clip_uid)

        def make(_info: object) -> list[Stream]:
            return [stream_of(qa, video)]

        yield Pending(str(path), rid, video, make, needs_info=False, lookup=(qa.video_uid,))

    yield from each_record(((qa_name(v, c, k), (v, c, k, qa)) for v, c, k, qa in items), path, parse)


SPEC = SourceSpec("estp", build=build_estp, config=EstpSourceConfig)
