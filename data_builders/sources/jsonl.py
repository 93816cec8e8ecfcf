"""A user's own streams, one JSON object a line -> stream records of any task (docs/data.md).

``python -m data_builders build source=jsonl annotations=streams.jsonl videos=videos out=data/built/mine``

Each line describes one clip (times are seconds on the video file's own timeline)::

    {"video": "a.mp4", "instruction": "Tell me when the kettle boils.",
     "responses": [{"time": 42.0, "text": "The kettle is boiling."}]}

- ``video`` (required): the file, relative to ``videos`` (a ``..`` climbing out of it is refused)
  or absolute;
- ``instruction`` (required): what the user asks; ``instruction_time`` (optional, default the clip
  start): when they ask it;
- ``responses`` (optional): what the model should say and when; each has ``text`` and a ``time``
  and/or a ``window`` ``[start, end]`` in which a reply counts (a window without a time is due at
  its center), and optionally a ``label`` (a structured answer, e.g. ``Warning``) and a
  ``category``. No responses (absent or ``[]``) makes the clip a negative: silence is right there;
- ``task`` (optional, default the ``task`` option): a built-in task or a name of the user's own,
  scored with the generic PRS rules (``benchmark=p3i``) and reported in a row of its own;
- ``id`` (optional, a string or a whole number, default ``<name>-<line>``), ``start`` / ``end``
  (optional clip bounds, default the whole video; without ``end`` the video is probed for its
  duration);
- ``questions`` (optional): what the user says after the instruction, each ``{"time", "text"}``
  at or after the instruction's time and inside the clip; kept as later user turns
  (``meta["user_turns"]``), each given to the model on the step it lands on
  (``engine.render.TurnRenderer.later_turns``), so a chat of several questions is one stream.

Times are JSON numbers of seconds (a string, a boolean or a list is an error, never 0 s); a
response's ``time`` must lie inside its own ``window``.

Any other field is an error, so a misspelt key never drops data silently. A line that does not
parse, or whose fields are wrong, is listed in ``errors.jsonl`` with its line number and the field;
every other line is built. Responses up to 1 s past the clip end are moved to the end, later ones
are dropped and listed (the driver's rule).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from data_builders.records import TIME_EPS, RecordError, Stream, Target, check_number, check_task
from data_builders.toolkit import (
    BuildInputs,
    ConversionError,
    Pending,
    SourceSpec,
    Tally,
    check_span,
    clip_end_from,
    each_json_line,
    event_span,
)
from data_builders.video import VideoInfo

#: The fields a line may have.
LINE_FIELDS = (
    "id",
    "video",
    "instruction",
    "instruction_time",
    "responses",
    "task",
    "start",
    "end",
    "questions",
)
#: The fields a response may have.
RESPONSE_FIELDS = ("time", "window", "text", "label", "category")
#: The fields a later question may have.
QUESTION_FIELDS = ("time", "text")


@dataclass
class JsonlSourceConfig:
    """Keys of ``source=jsonl``."""

    task: str = "custom"
    """Task of the lines that name none: a built-in task or a name of your own."""
    name: str | None = None
    """The records' ``source`` and id prefix (null: the name of the ``out`` folder)."""

    def __post_init__(self) -> None:
        check_task(self.task)


def _text(item: dict, key: str, where: str = "") -> str:
    if item.get(key) is None:
        raise RecordError(f"missing field '{where}{key}'")
    value = item[key]
    if not isinstance(value, str):
        raise RecordError(f"field '{where}{key}': expected a string, got {type(value).__name__} {value!r}")
    return value


def _optional_text(item: dict, key: str, where: str) -> str | None:
    value = item.get(key)
    if value is not None and not isinstance(value, str):
        raise RecordError(f"field '{where}.{key}': expected a string, got {value!r}")
    return value


def _unknown(item: dict, known: tuple[str, ...], where: str) -> None:
    extra = sorted(set(item) - set(known))
    if extra:
        raise RecordError(f"{where}unknown field(s) {extra}; known: {', '.join(known)}")


def _time(value: Any, name: str) -> float:
    """A time of the line: a JSON number (not a boolean, not a string), finite."""
    if isinstance(value, str):
        raise RecordError(f"field '{name}': expected a number of seconds, got the string {value!r}")
    return check_number(value, name)


def _optional_time(line: dict, key: str) -> float | None:
    return None if line.get(key) is None else _time(line[key], key)


def _record_id(line: dict, default: str) -> str:
    """The line's ``id``: a non-empty string or a whole number (not a boolean); else ``default``."""
    value = line.get("id")
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (str, int)) or value == "":
        raise RecordError(
            f"field 'id': expected a non-empty string or a whole number, got {type(value).__name__} {value!r}"
        )
    return str(value)


def _video(line: dict, root: Path | None) -> str:
    """The line's ``video``: absolute, or relative to ``videos=`` without climbing out of it."""
    video = _text(line, "video")
    if not os.path.isabs(video) and os.path.normpath(video).split(os.sep)[0] == os.pardir:
        raise RecordError(
            f"field 'video': {video!r} climbs out of videos={root} with '..'; give a path inside it "
            "or an absolute path"
        )
    return video


def _response(item: Any, i: int, tally: Tally) -> Target | None:
    """One response as a target; None when its window is inverted past repair (dropped, listed)."""
    where = f"responses[{i}]"
    if not isinstance(item, dict):
        raise RecordError(f"field '{where}': expected an object, got {type(item).__name__}")
    _unknown(item, RESPONSE_FIELDS, f"field '{where}': ")
    text = _text(item, "text", f"{where}.")
    window = None
    if item.get("window") is not None:
        w = item["window"]
        if not isinstance(w, list) or len(w) != 2:
            raise RecordError(f"field '{where}.window': expected [start, end], got {w!r}")
        window = event_span(_time(w[0], f"{where}.window"), _time(w[1], f"{where}.window"), where, tally)
        if window is None:
            return None
    if item.get("time") is None and window is None:
        raise RecordError(f"field '{where}': a response needs a time or a window")
    time = _time(item["time"], f"{where}.time") if item.get("time") is not None else sum(window) / 2
    if window is not None and not window[0] - TIME_EPS <= time <= window[1] + TIME_EPS:
        raise RecordError(
            f"field '{where}.time': {time} lies outside its own window [{window[0]}, {window[1]}]"
        )
    return Target(
        time=time,
        content=text,
        window=window,
        label=_optional_text(item, "label", where),
        category=_optional_text(item, "category", where),
    )


def _responses(line: dict, tally: Tally) -> list[Target]:
    raw = line.get("responses")
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise RecordError(f"field 'responses': expected a list, got {type(raw).__name__}")
    return [t for i, item in enumerate(raw) if (t := _response(item, i, tally)) is not None]


def _questions(line: dict, asked: float) -> list[tuple[float, str]]:
    """The line's later questions (``questions``), ``(time, text)`` in time order; each must come at
    or after the instruction's time ``asked`` (the first question is the instruction)."""
    raw = line.get("questions")
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise RecordError(f"field 'questions': expected a list, got {type(raw).__name__}")
    out = []
    for i, item in enumerate(raw):
        where = f"questions[{i}]"
        if not isinstance(item, dict):
            raise RecordError(f"field '{where}': expected an object, got {type(item).__name__}")
        _unknown(item, QUESTION_FIELDS, f"field '{where}': ")
        text = _text(item, "text", f"{where}.")
        if item.get("time") is None:
            raise RecordError(f"missing field '{where}.time'")
        time = _time(item["time"], f"{where}.time")
        if time < asked - TIME_EPS:
            raise RecordError(
                f"field '{where}.time': {time:g} s is before the instruction ({asked:g} s); a later "
                "question comes at or after it"
            )
        out.append((time, text))
    return sorted(out, key=lambda q: q[0])


def _user_turns(questions: list[tuple[float, str]], clip_end: float) -> dict[str, Any]:
    """The ``meta`` entry of the later questions on a clip ending at ``clip_end`` (none: nothing);
    a question past the end, which the model would never be asked, is an error."""
    for time, text in questions:
        if time > clip_end + TIME_EPS:
            raise RecordError(
                f"field 'questions': the question at {time:g} s ({text!r}) is past the clip end ({clip_end:g} s)"
            )
    return {"user_turns": [{"time": t, "content": text} for t, text in questions]} if questions else {}


def build_jsonl(inputs: BuildInputs, options: JsonlSourceConfig) -> Iterator[Pending | ConversionError]:
    """One stream per line (see the module docstring)."""
    path = inputs.annotations
    # the driver builds into a staging folder inside ``out``: the source is named after ``out``
    name = options.name or Path(inputs.out).resolve().parent.name

    def parse(rid: str, line: Any) -> Iterator[Pending]:
        if not isinstance(line, dict):
            raise RecordError(f"expected a JSON object, got {type(line).__name__}")
        _unknown(line, LINE_FIELDS, "")
        video = _video(line, inputs.videos)
        task = check_task(line["task"]) if line.get("task") is not None else options.task
        start = _optional_time(line, "start") or 0.0
        end = _optional_time(line, "end")
        if end is not None:
            check_span(start, end, "start..end")
        asked = _optional_time(line, "instruction_time")
        tally = Tally()
        targets = _responses(line, tally)
        questions = _questions(line, asked if asked is not None else start)
        instruction = _text(line, "instruction")
        sid = _record_id(line, f"{name}-{rid.removeprefix('line ')}")

        def make(info: VideoInfo | None) -> list[Stream]:
            clip_end = end if end is not None else clip_end_from(info, None, rid)
            return [
                Stream(
                    id=sid,
                    source=name,
                    task=task,
                    video=video,
                    clip_start=start,
                    clip_end=clip_end,
                    instruction=instruction,
                    instruction_time=asked if asked is not None else start,
                    targets=targets,
                    meta={"video_id": f"{name}/{video}", **_user_turns(questions, clip_end)},
                )
            ]

        yield Pending(str(path), rid, video, make, needs_info=end is None, tally=tally)

    yield from each_json_line(path, parse)


SPEC = SourceSpec("jsonl", build=build_jsonl, config=JsonlSourceConfig)
