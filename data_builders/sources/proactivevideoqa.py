"""ProactiveVideoQA's release annotations -> ``proactivevideoqa`` streams, one per question.

``python -m data_builders build source=proactivevideoqa annotations=/data/ProactiveVideoQA videos=/data/ProactiveVideoQA out=/data/built/proactivevideoqa``

Format (no real record was seen; fields as the public ports read them: VLMEvalKit's
``vlmeval/dataset/proactive_videoqa.py``, and MMDuet2's ``proactive_eval/`` whose
``<task>-proactivevideoqa_format.json`` files are said to be the release's annotation files). The
release holds one ``<TASK>/anno.json`` per task, ``EGO``, ``TV``, ``VAD`` and ``WEB``, with the videos
in ``<TASK>/videos/``; each file is a JSON list of::

    {"video": "xxx.mp4", "question_id": ..., "duration": seconds,
     "conversation": [{"role": "user", "content": ..., "time": seconds}, ...],
     "answer": [{"content": ..., "related_timespan": [t0, t1], "reply_timespan": [t0, t1]}, ...]}

``annotations=`` is the release root (every task folder in it that holds an ``anno.json``), one
``<TASK>/anno.json``, or one ``<task>-proactivevideoqa_format.json``; the task is the folder's (or
the file name's) and must be one of :data:`BENCHMARK_TASKS`. Times are seconds on the video file
(a number, or a string holding one).

One stream per question: the clip is ``[0, duration]`` (the stated duration: no probe is needed);
instruction = the first user turn at its ``time``; every user turn (the question, and any later
one, e.g. a TV subtitle) is kept with its time in ``meta["user_turns"]`` for the streaming runner
to feed at its time; targets = the answers, each at its ``reply_timespan`` start with ``window =
reply_timespan`` and ``content`` = the answer. ``meta`` keeps what the official prediction file
needs (``question_id`` as the release writes it, ``benchmark_task``, the release ``video`` name),
each answer's spans, and the release's item as it is (``release``: ``eval.run`` writes the ground
truth of the questions it evaluated from it, in the release's format). A question with no user turn, no answer, a turn or span without a time, an
inverted span or a time that is not a number is that record's error; the driver's tolerances apply
to answers past the clip end.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from data_builders.records import RecordError, Stream, Target
from data_builders.toolkit import (
    BuildInputs,
    ConversionError,
    Pending,
    SourceSpec,
    check_span,
    each_record,
    load_json,
    require,
    seconds,
)

#: The benchmark's tasks (its release folders).
BENCHMARK_TASKS = ("EGO", "TV", "VAD", "WEB")
#: The annotation file of a task folder.
ANNOTATION_FILE = "anno.json"
#: MMDuet2's name for the same file: ``<task>-proactivevideoqa_format.json``.
MMDUET2_SUFFIX = "-proactivevideoqa_format"


@dataclass(frozen=True)
class Answer:
    """One answer turn: its text, when it may be given (``reply_span``) and when its evidence is
    on screen (``related_span``; the reply span when the release gives none, as the port reads it)."""

    content: str
    reply_span: tuple[float, float]
    related_span: tuple[float, float]


@dataclass(frozen=True)
class Question:
    """One release item: the question (the first user turn), every user turn, the answers."""

    task: str
    question_id: Any
    video: str
    duration: float
    question: str
    question_time: float
    user_turns: list[tuple[float, str]]
    answers: list[Answer]

    @property
    def key(self) -> str:
        """The question id as text (the prediction files' ids are matched on this)."""
        return str(self.question_id)


def _span(value: Any, name: str) -> tuple[float, float]:
    if not isinstance(value, list) or len(value) != 2:
        raise RecordError(f"field '{name}': expected [start, end] in seconds, got {value!r}")
    start, end = seconds(value[0], name), seconds(value[1], name)
    check_span(start, end, name)
    return start, end


def _field(data: Any, key: str, name: str) -> Any:
    """``data[key]``, or a ``RecordError`` naming the missing field by its path (``answer[1].content``)."""
    if not isinstance(data, dict):
        raise RecordError(f"field '{name.rsplit('.', 1)[0]}': expected an object, got {type(data).__name__}")
    if data.get(key) is None:
        raise RecordError(f"field '{name}': missing")
    return data[key]


def parse_question(rec: Any, task: str) -> Question:
    """A release item as a :class:`Question`; a :class:`RecordError` names the field and the reason."""
    qid = require(rec, "question_id")
    if isinstance(qid, bool) or not isinstance(qid, (str, int)):
        raise RecordError(f"field 'question_id': expected a string or an integer, got {qid!r}")
    video = require(rec, "video")
    if not isinstance(video, str) or not video:
        raise RecordError(f"field 'video': expected a file name, got {video!r}")
    duration = seconds(require(rec, "duration"), "duration")
    if duration <= 0:
        raise RecordError(f"field 'duration': expected a positive number of seconds, got {duration}")
    turns = require(rec, "conversation")
    if not isinstance(turns, list):
        raise RecordError("field 'conversation': expected a list of turns")
    user_turns = []
    for i, turn in enumerate(turns):
        role = _field(turn, "role", f"conversation[{i}].role")
        if role != "user":
            continue
        content = _field(turn, "content", f"conversation[{i}].content")
        if not isinstance(content, str):
            raise RecordError(f"field 'conversation[{i}].content': expected text, got {content!r}")
        user_turns.append(
            (seconds(_field(turn, "time", f"conversation[{i}].time"), f"conversation[{i}].time"), content)
        )
    if not user_turns:
        raise RecordError("field 'conversation': no user turn (the question)")
    raw_answers = require(rec, "answer")
    if not isinstance(raw_answers, list) or not raw_answers:
        raise RecordError("field 'answer': expected a non-empty list of answers")
    answers = []
    for i, a in enumerate(raw_answers):
        content = _field(a, "content", f"answer[{i}].content")
        if not isinstance(content, str):
            raise RecordError(f"field 'answer[{i}].content': expected text, got {content!r}")
        reply = _span(
            _field(a, "reply_timespan", f"answer[{i}].reply_timespan"), f"answer[{i}].reply_timespan"
        )
        related = a.get("related_timespan")
        related = reply if related is None else _span(related, f"answer[{i}].related_timespan")
        answers.append(Answer(content, reply, related))
    return Question(
        task=task,
        question_id=qid,
        video=video,
        duration=duration,
        question=user_turns[0][1],
        question_time=user_turns[0][0],
        user_turns=user_turns,
        answers=answers,
    )


def file_task(path: Path) -> str:
    """The task of one annotation file: its folder's name (``EGO/anno.json``), or the prefix of an
    MMDuet2-style name (``ego-proactivevideoqa_format.json``)."""
    if path.parent.name in BENCHMARK_TASKS:
        return path.parent.name
    if path.stem.endswith(MMDUET2_SUFFIX) and path.stem[: -len(MMDUET2_SUFFIX)].upper() in BENCHMARK_TASKS:
        return path.stem[: -len(MMDUET2_SUFFIX)].upper()
    raise RecordError(
        f"cannot tell the task of this file: its folder {path.parent.name!r} is not one of "
        f"{', '.join(BENCHMARK_TASKS)} (keep the release layout <TASK>/{ANNOTATION_FILE})",
        file=path,
    )


def release_files(path: Path) -> list[tuple[str, Path]]:
    """``(task, annotation file)`` of a release root or of one annotation file. A root's folders
    that hold an ``anno.json`` must be known tasks; a root with none is an error."""
    if path.is_file():
        return [(file_task(path), path)]
    if not path.is_dir():
        raise RecordError("annotation file or release folder does not exist", file=path)
    found = sorted(p.parent.name for p in path.glob(f"*/{ANNOTATION_FILE}"))
    unknown = [name for name in found if name not in BENCHMARK_TASKS]
    if unknown:
        raise RecordError(
            f"folder(s) {unknown} hold an {ANNOTATION_FILE} but are not tasks of the benchmark "
            f"({', '.join(BENCHMARK_TASKS)})",
            file=path,
        )
    if not found:
        raise RecordError(
            f"no <TASK>/{ANNOTATION_FILE} in this folder (tasks: {', '.join(BENCHMARK_TASKS)})", file=path
        )
    return [(task, path / task / ANNOTATION_FILE) for task in found]


def release_items(path: Path) -> list[Any]:
    """The items of one annotation file (a JSON list)."""
    data = load_json(path)
    if not isinstance(data, list):
        raise RecordError(f"expected a JSON list of questions, got {type(data).__name__}", file=path)
    return data


def item_id(k: int, rec: Any) -> str:
    """How an item is named in errors: its question id, else its position."""
    if isinstance(rec, dict) and rec.get("question_id") is not None:
        return f"question_id {rec['question_id']}"
    return f"item {k}"


def stream_of(q: Question, video: str, release: dict | None = None) -> Stream:
    """The stream of one question (see the module docstring); ``release`` is the release's item as
    it is, kept in ``meta["release"]``."""
    return Stream(
        id=f"proactivevideoqa-{q.task}-{q.key}",
        source="proactivevideoqa",
        task="proactivevideoqa",
        video=video,
        clip_start=0.0,
        clip_end=q.duration,
        instruction=q.question,
        instruction_time=q.question_time,
        targets=[Target(time=a.reply_span[0], content=a.content, window=a.reply_span) for a in q.answers],
        meta={
            "benchmark_task": q.task,
            "question_id": q.question_id,
            "release_video": q.video,
            "video_id": f"proactivevideoqa/{q.task}/{q.video}",
            "user_turns": [{"time": t, "content": c} for t, c in q.user_turns],
            "answers": [
                {"reply_timespan": list(a.reply_span), "related_timespan": list(a.related_span)}
                for a in q.answers
            ],
            "release": release,
        },
    )


@dataclass
class ProactiveVideoQASourceConfig:
    """Keys of ``source=proactivevideoqa``."""

    video_pattern: str = "{task}/videos/{video}"
    """Video path under ``videos`` (the release root): ``task`` is EGO/TV/VAD/WEB, ``video`` the
    item's file name."""


def build_proactivevideoqa(
    inputs: BuildInputs, options: ProactiveVideoQASourceConfig
) -> Iterator[Pending | ConversionError]:
    """One stream per question of every task file (see the module docstring)."""
    for task, path in release_files(Path(inputs.annotations)):
        data = release_items(path)

        def parse(rid: str, rec: Any, task: str = task, path: Path = path) -> Iterator[Pending]:
            q = parse_question(rec, task)
            video = options.video_pattern.format(task=task, video=q.video)
            stream = stream_of(q, video, rec)
            yield Pending(
                str(path), rid, video, lambda info: [stream], needs_info=False, lookup=(Path(q.video).stem,)
            )

        yield from each_record(((item_id(k, r), r) for k, r in enumerate(data)), path, parse)


SPEC = SourceSpec("proactivevideoqa", build=build_proactivevideoqa, config=ProactiveVideoQASourceConfig)
