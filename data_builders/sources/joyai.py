"""JoyAI-VL-Interaction's released annotations -> stream records, one per item, every question kept.

``python -m data_builders build source=joyai annotations=/data/JoyAI-VL-Interaction videos=/data/joyai_videos out=/data/built/joyai``

Format (checked against the release's own ``datasets/README.md`` and ``datasets/convert_data.py``,
``jd-opensource/JoyAI-VL-Interaction``; no real record was seen). The Hugging Face dataset
``jdopensource/JoyAI-VL-Interaction`` holds one folder per subset, ``background/``, ``chat/``,
``event_grounding/`` and ``narration/``, each with its JSON file (``background/background.json``);
the release's converter reads every ``*.json`` under the folder it is given (``example.json`` left
out), a JSON list of items (one object is one item)::

    {"video_name": "name.mp4", "video_path": "/path/to/videos/name.mp4", "task_type": "...",
     "source": "source_dataset",
     "question": [{"content": "user question or instruction", "time": "4"}],
     "response": [{"content": "expected answer or event response", "time": "7"}]}

- ``time`` is a string of seconds from the video's first frame (``"4"``), or several separated by
  commas (``"5,6,7"``: the same text at each); a number is read as well. ``question`` may be absent
  or empty (nothing asked: the model speaks unprompted); ``response`` may hold lists of responses
  (the converter flattens them) or be empty (nothing is due: a negative).
- ``source`` names the dataset the video comes from; the README asks to fill ``video_path`` with
  the local file. A ``video_path`` that names an existing file (absolute, or relative to
  ``videos=``) is used (``use_video_path``); otherwise ``video_pattern`` (``{source}/{video_name}``
  under ``videos=``), and where that is absent the driver finds the file by its name under
  ``videos=``.

``annotations=`` is the release root (each subset folder in it), one subset folder, or one JSON file
(its subset told by its folder, else by its file name). One stream per item, over the whole video:
the clip is ``[0, duration]`` (probed). Clock: JoyAI counts every time from the video's first
frame and its converter gives second ``k`` the frame at ``k`` s; a record counts from the file's
first frame too (docs/data.md), and the clip starts there (``clip_start = 0``), so a time ``t``
becomes ``clip_start + t`` (:func:`on_record_clock`) and a whole second lands on the converter's
own step (a fractional one on the next step, where the converter truncates it: the project's rule
that a reply comes once its moment has been seen). The converter cuts videos after
``--max_duration`` (320 s by default); here the whole video is kept (training windows cut it).

Questions are the user's turns: the first (by time) is the instruction at its time, every later one
a later user turn in ``meta["user_turns"]`` (given to the model on its step:
``engine.render.TurnRenderer.later_turns``), and ``meta["questions"]`` lists them all; a chat
item's later questions are kept whole, with their times. Responses are the targets, each at its
time. Two turns on one second are both kept (the converter keeps the last). Each subset's task
(:data:`SUBSET_TASKS`, a key per subset): ``narration`` -> ``proactive_narration``, ``chat`` ->
``timed_qa`` (questions answered at their times), ``event_grounding`` -> ``event_monitoring``
(speak when the asked-for event happens), ``background`` -> ``joyai_background``, a task of its own
(no built-in task matches it; scored with the generic PRS rules in a row of its own).
``meta`` keeps the subset, the item's ``task_type``, ``source``, ``video_name`` and its place
(``file``, ``index``).

Errors, each naming the file, the item (``item <index> (<video_name>)``) and the reason: an item
that is not an object or has no ``video_name``, and a question without text, with a time that
cannot be read or is before 0, or past the video's end by more than 1 s, fail that item; a question
up to 1 s past the end is moved to the end (counted, ``clamped_questions``). A response without
text or a readable time (0 or later) is dropped alone and listed (scope ``event``); responses past
the end are the driver's (moved to the end up to 1 s, else dropped and listed).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from data_builders.records import RecordError, Stream, Target, check_task
from data_builders.toolkit import (
    BuildInputs,
    ConversionError,
    Pending,
    SourceSpec,
    Tally,
    clip_end_from,
    each_record,
    load_json,
    seconds,
)
from data_builders.video import VideoInfo

#: The release's subsets (its folders), each with its default project task (a key per subset).
SUBSET_TASKS = {
    "background": "joyai_background",
    "chat": "timed_qa",
    "event_grounding": "event_monitoring",
    "narration": "proactive_narration",
}
#: A file the release's converter leaves out.
SKIPPED_FILE = "example.json"
#: Where a clip starts on the record's clock: the video's first frame, where JoyAI counts from.
CLIP_START = 0.0
#: A question up to this far past the video's end is moved to the end (the driver's rule for targets).
QUESTION_TOLERANCE = 1.0


@dataclass
class JoyaiSourceConfig:
    """Keys of ``source=joyai``."""

    video_pattern: str = "{source}/{video_name}"
    """Video path under ``videos`` when the item's ``video_path`` names no file: ``source`` and
    ``video_name`` are the item's fields, ``subset`` its folder."""
    use_video_path: bool = True
    """Use the item's ``video_path`` (absolute, or relative to ``videos``) when that file exists."""
    narration_task: str = SUBSET_TASKS["narration"]
    """Task of the ``narration`` items."""
    chat_task: str = SUBSET_TASKS["chat"]
    """Task of the ``chat`` items."""
    event_grounding_task: str = SUBSET_TASKS["event_grounding"]
    """Task of the ``event_grounding`` items."""
    background_task: str = SUBSET_TASKS["background"]
    """Task of the ``background`` items."""

    def __post_init__(self) -> None:
        for subset in SUBSET_TASKS:
            check_task(getattr(self, f"{subset}_task"))

    def task(self, subset: str) -> str:
        return getattr(self, f"{subset}_task")


@dataclass(frozen=True)
class Turn:
    """One question or response: its time (seconds from the video's first frame) and its text."""

    time: float
    text: str


@dataclass(frozen=True)
class Item:
    """One release item, parsed: questions in time order, responses as given (one per time)."""

    subset: str
    file: str
    index: int
    video_name: str
    video_path: str | None
    source: str
    task_type: str | None
    questions: tuple[Turn, ...]
    responses: tuple[Turn, ...]


def on_record_clock(t: float, clip_start: float = CLIP_START) -> float:
    """A JoyAI time (seconds from the video's first frame) on the record's clock: the clip starts at
    the video's first frame, so the numbers are the same.

    >>> on_record_clock(7.0)
    7.0
    """
    return clip_start + t


def parse_times(value: Any, where: str) -> list[float]:
    """The times of one ``time`` field: ``"4"``, ``"5,6,7"`` or a number; each at or after 0.

    >>> parse_times("5, 6,7", "response[0].time"), parse_times(4, "question[0].time")
    ([5.0, 6.0, 7.0], [4.0])
    """
    if value is None:
        raise RecordError(f"field '{where}': missing")
    pieces = value.split(",") if isinstance(value, str) else [value]
    times = [seconds(p, where) for p in pieces if not (isinstance(p, str) and not p.strip())]
    if not times:
        raise RecordError(f"field '{where}': no time in {value!r}")
    if min(times) < 0:
        raise RecordError(f"field '{where}': a time before the video starts ({value!r})")
    return times


def _turns(entry: Any, where: str) -> list[Turn]:
    """The turns of one question or response entry (one per time); a ``RecordError`` names why not."""
    if not isinstance(entry, dict):
        raise RecordError(f"field '{where}': expected an object, got {type(entry).__name__}")
    text = entry.get("content")
    if not isinstance(text, str):
        raise RecordError(f"field '{where}.content': expected text, got {text!r}")
    return [Turn(on_record_clock(t), text) for t in parse_times(entry.get("time"), f"{where}.time")]


def _entries(item: dict, key: str) -> list[Any]:
    """An item's ``question`` or ``response`` list (absent: empty), nested lists flattened."""
    raw = item.get(key)
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise RecordError(f"field '{key}': expected a list, got {type(raw).__name__}")
    return [e for entry in raw for e in (entry if isinstance(entry, list) else [entry])]


def _responses(item: dict, tally: Tally) -> list[Turn]:
    """Every response turn; an unreadable response is dropped alone and listed."""
    out = []
    for i, entry in enumerate(_entries(item, "response")):
        try:
            out += _turns(entry, f"response[{i}]")
        except RecordError as exc:
            tally.drop(f"{exc.reason}; response dropped")
    return out


def _optional_text(item: dict, key: str) -> str | None:
    value = item.get(key)
    if value is not None and not isinstance(value, str):
        raise RecordError(f"field '{key}': expected text, got {value!r}")
    return value


def parse_item(raw: Any, subset: str, file: str, index: int, tally: Tally) -> Item:
    """One release item; a malformed one raises :class:`RecordError` (see the module docstring)."""
    if not isinstance(raw, dict):
        raise RecordError(f"expected an item object, got {type(raw).__name__}")
    name = raw.get("video_name")
    if not isinstance(name, str) or not name.strip():
        raise RecordError(f"field 'video_name': expected a file name, got {name!r}")
    questions = [t for i, q in enumerate(_entries(raw, "question")) for t in _turns(q, f"question[{i}]")]
    return Item(
        subset=subset,
        file=file,
        index=index,
        video_name=name,
        video_path=_optional_text(raw, "video_path") or None,
        source=(_optional_text(raw, "source") or "").strip("/"),
        task_type=_optional_text(raw, "task_type"),
        questions=tuple(sorted(questions, key=lambda q: q.time)),
        responses=tuple(_responses(raw, tally)),
    )


def item_name(index: int, raw: Any) -> str:
    """How errors name an item: its index in the file, and its video when it has one."""
    name = raw.get("video_name") if isinstance(raw, dict) else None
    return f"item {index}" + (f" ({name})" if isinstance(name, str) and name else "")


def _fit_questions(item: Item, end: float, tally: Tally) -> list[Turn]:
    """The questions on a clip ending at ``end``: one up to :data:`QUESTION_TOLERANCE` past it moved
    to it (counted), one further out an error of the item."""
    out = []
    for q in item.questions:
        if q.time > end + QUESTION_TOLERANCE:
            raise RecordError(
                f"a question at {q.time:g} s ({q.text!r}) is past the video's end ({end:.3f} s)"
            )
        if q.time > end:
            tally.count("clamped_questions")
            q = replace(q, time=end)
        out.append(q)
    return out


def record_id(item: Item) -> str:
    """``joyai-<subset>-<index>`` (the file's path under its subset folder too when it is not
    ``<subset>.json``)."""
    rel = Path(item.file).with_suffix("").as_posix()
    name = item.subset if rel == item.subset else f"{item.subset}-{rel.replace('/', '.')}"
    return f"joyai-{name}-{item.index}"


def stream_of(item: Item, task: str, video: str, end: float, tally: Tally) -> Stream:
    """The stream of one item on a video lasting ``end`` s (see the module docstring)."""
    questions = _fit_questions(item, end, tally)
    first = questions[0] if questions else Turn(CLIP_START, "")
    tally.count("later_questions", max(len(questions) - 1, 0))
    return Stream(
        id=record_id(item),
        source="joyai",
        task=task,
        video=video,
        clip_start=CLIP_START,
        clip_end=end,
        instruction=first.text,
        instruction_time=first.time,
        targets=[Target(time=r.time, content=r.text) for r in item.responses],
        meta={
            "video_id": "/".join(part for part in ("joyai", item.source, item.video_name) if part),
            "subset": item.subset,
            "task_type": item.task_type,
            "release_source": item.source,
            "video_name": item.video_name,
            "file": item.file,
            "index": item.index,
            "questions": [{"time": q.time, "text": q.text} for q in questions],
            "user_turns": [{"time": q.time, "content": q.text} for q in questions[1:]],
        },
    )


def video_of(item: Item, options: JoyaiSourceConfig, root: Path | None) -> str:
    """The item's video: its ``video_path`` when that file exists (and ``use_video_path``), else the
    pattern's path under the video root."""
    if options.use_video_path and item.video_path:
        given = Path(item.video_path)
        if (given if given.is_absolute() or root is None else root / given).is_file():
            return item.video_path
    path = options.video_pattern.format(source=item.source, video_name=item.video_name, subset=item.subset)
    return "/".join(part for part in path.split("/") if part)  # an item with no source: the name alone


def subset_of(path: Path, root: Path) -> str:
    """The subset of an annotation file: the nearest folder (up to ``root``) named after one, else
    the file's own name (``background.json``)."""
    for folder in [path.parent, *path.parent.parents]:
        if folder.name in SUBSET_TASKS:
            return folder.name
        if folder == root:
            break
    if path.stem in SUBSET_TASKS:
        return path.stem
    raise RecordError(
        f"cannot tell the subset of this file: no folder named {', '.join(SUBSET_TASKS)} holds it "
        "(keep the release layout <subset>/<subset>.json)",
        file=path,
    )


def release_files(path: Path) -> list[tuple[str, Path]]:
    """``(subset, file)`` of every annotation file: of a release root (its subset folders), of one
    subset folder, or one file. A root whose other folders hold JSON files is an error."""
    if path.is_file():
        return [(subset_of(path, path.parent), path)]
    if not path.is_dir():
        raise RecordError("annotation file or release folder does not exist", file=path)
    folders = [path] if path.name in SUBSET_TASKS else [path / s for s in SUBSET_TASKS if (path / s).is_dir()]
    others = sorted(
        p.relative_to(path).as_posix()
        for p in path.rglob("*.json")
        if not any(f in p.parents for f in folders) and p.name != SKIPPED_FILE
    )
    if others:
        raise RecordError(
            f"JSON files outside the subset folders ({', '.join(SUBSET_TASKS)}): {others[:5]}", file=path
        )
    files = [(f.name, p) for f in folders for p in sorted(f.rglob("*.json")) if p.name != SKIPPED_FILE]
    if not files:
        raise RecordError(
            f"no <subset>/*.json in this folder (subsets: {', '.join(SUBSET_TASKS)})", file=path
        )
    return files


def file_items(path: Path) -> list[Any]:
    """The items of one annotation file: a JSON list, or one object (as the converter reads it)."""
    data = load_json(path)
    if isinstance(data, dict):
        return [data]
    if not isinstance(data, list):
        raise RecordError(f"expected a JSON list of items, got {type(data).__name__}", file=path)
    return data


def build_joyai(inputs: BuildInputs, options: JoyaiSourceConfig) -> Iterator[Pending | ConversionError]:
    """One stream per item of every annotation file (see the module docstring)."""
    given = Path(inputs.annotations)
    for subset, path in release_files(given):
        base = path.parent if given.is_file() else (given if given.name in SUBSET_TASKS else given / subset)
        rel = path.name if given.is_file() else path.relative_to(base).as_posix()

        def parse(rid: str, pair: tuple[int, Any], subset: str = subset, path: Path = path, rel: str = rel):
            tally = Tally()
            item = parse_item(pair[1], subset, rel, pair[0], tally)
            video = video_of(item, options, inputs.videos)
            task = options.task(subset)

            def make(info: VideoInfo | None) -> list[Stream]:
                return [stream_of(item, task, video, clip_end_from(info, None, rid), tally)]

            yield Pending(str(path), rid, video, make, lookup=(Path(item.video_name).stem,), tally=tally)

        items = ((item_name(k, raw), (k, raw)) for k, raw in enumerate(file_items(path)))
        yield from each_record(items, path, parse)


SPEC = SourceSpec("joyai", build=build_joyai, config=JoyaiSourceConfig)
