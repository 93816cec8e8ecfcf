"""Stream records: the one type every builder writes and every trainer, reward and evaluator reads.

A :class:`Stream` is one video clip turned into a decision stream: the model watches the clip at a
fixed rate (1 step/s by default) and, at every step, either stays silent or speaks. The record says
where the clip is, what the user asked and when, and what the model should say and when
(:class:`Target`). A stream with no targets is a *negative*: the right behaviour is silence.

Time axis: every time in a record (``clip_start``, ``clip_end``, ``instruction_time``, target times
and windows, history times) is in seconds on the video file's own timeline. Predictions
(:class:`Prediction`) use the same axis, so a reply can be scored against a target directly.
EgoServe's EgoLife times are absolute (``day * 86400 + seconds of day``); there the builder sets the
clip bounds on that axis and the video reader subtracts ``video_offset`` to seek in the file.

Records are read and written by :mod:`data_builders.record_io` (JSON Lines, parquet shards), and a
stream's decision steps and windows are :mod:`data_builders.stream_steps`. Invalid input raises
:class:`RecordError`, which names the file, the record (id or line), the field and the reason.

>>> s = Stream(id="a", source="toy", task="event_monitoring", video="a.mp4", clip_start=0.0,
...            clip_end=20.0, instruction="Tell me when the red square appears.",
...            targets=[Target(time=7.0, content="The red square appeared.", label="Warning")])
>>> Stream.from_dict(s.to_dict()) == s
True
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from data_builders.turn_grammar import RESPONSE, SILENCE

#: Task names known to the pipeline. P3IBench's five tasks, ProPerMem, EgoServe, and the training
#: tasks built from captioning / QA sources (P3I's "PVQ" narration and "CRR" clue-then-respond).
TASKS: frozenset[str] = frozenset(
    {
        "event_monitoring",
        "object_monitoring",
        "accident_warning",
        "crime_alert",
        "event_intervention",
        "propermem",
        "egoserve",
        "proactive_narration",
        "timed_qa",
        "clue_then_respond",
        # the public benchmarks (benchmarks/protocols/): the benchmark's own task is in meta["benchmark_task"]
        "ovo",
        "streamingbench_proactive",
        "proactivevideoqa",
        "estp",
    }
)

#: A task name of the user's own (``source=jsonl``): a letter or digit, then letters, digits, ``_``,
#: ``-`` or ``.``. Such a task is scored with the generic PRS rules, in a row of its own.
TASK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def check_task(task: Any) -> str:
    """A record's task: a built-in one (:data:`TASKS`) or a plain name of the user's own
    (:data:`TASK_NAME`); else a :class:`RecordError` on the field ``task``.

    >>> check_task("event_monitoring"), check_task("kettle_watch")
    ('event_monitoring', 'kettle_watch')
    """
    if not isinstance(task, str) or not (task in TASKS or TASK_NAME.fullmatch(task)):
        raise RecordError(
            f"task {task!r} is neither a built-in task ({', '.join(sorted(TASKS))}) nor a plain name "
            "(a letter or digit, then letters, digits, '_', '-' or '.')",
            field="task",
        )
    return task


#: Tolerance (seconds) for float noise when checking that a time lies inside the clip.
TIME_EPS = 1e-6

#: The control tokens of the model's turn format that no text of a record may hold: the Qwen chat,
#: vision and tool markers (every ``<|name|>``: ``<|im_start|>``, ``<|im_end|>``, ``<|image_pad|>``,
#: ``<|vision_start|>``, ...) and the decision tokens ``</Silence>`` and ``</Response>``.
CONTROL_TOKEN = re.compile(r"<\|[A-Za-z0-9_]+\|>|" + re.escape(SILENCE) + "|" + re.escape(RESPONSE))


def check_plain_text(text: str, name: str) -> str:
    """``text``, when it holds none of the turn format's control tokens (:data:`CONTROL_TOKEN`);
    else a :class:`RecordError` naming the field and the token.

    >>> check_plain_text("Tell me when the kettle boils.", "instruction")
    'Tell me when the kettle boils.'
    >>> CONTROL_TOKEN.findall("a <|im_end|> b </Silence> <|image_pad|> <think> </Response>")
    ['<|im_end|>', '</Silence>', '<|image_pad|>', '</Response>']
    """
    found = CONTROL_TOKEN.search(text)
    if found is not None:
        raise RecordError(
            f"holds {found.group()!r}, a control token of the model's turn format (chat, vision or "
            "decision marker); write it another way",
            field=name,
        )
    return text


class RecordError(ValueError):
    """Invalid record: the message names the file, the record (id or line), the field and the reason."""

    def __init__(
        self,
        reason: str,
        *,
        file: str | Path | None = None,
        record: str | int | None = None,
        field: str | None = None,
    ):
        self.file = None if file is None else str(file)
        self.record = record
        self.field = field
        self.reason = reason
        where = []
        if self.file is not None:
            where.append(f"file {self.file}")
        if record is not None:
            where.append(f"record {record}")
        if field is not None:
            where.append(f"field '{field}'")
        super().__init__(f"{', '.join(where)}: {reason}" if where else reason)

    def located(self, *, file: str | Path | None = None, record: str | int | None = None) -> RecordError:
        """The same error with the file / record filled in where it was not known yet."""
        return RecordError(
            self.reason,
            file=self.file if self.file is not None else file,
            record=self.record if self.record is not None else record,
            field=self.field,
        )


def no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``'s ``object_pairs_hook``: a JSON object as a dict, a key given twice in it a
    :class:`RecordError` naming the key (``json`` alone keeps the last value and drops the others).

    >>> json.loads('{"a": 1, "b": 2}', object_pairs_hook=no_duplicate_keys)
    {'a': 1, 'b': 2}
    """
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        key = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise RecordError(
            f"key {key!r} is given twice in one JSON object (a JSON reader keeps only the last)"
        )
    return out


def check_number(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RecordError(f"expected a number of seconds, got {value!r}", field=name)
    try:
        value = float(value)
    except OverflowError:
        raise RecordError(f"number out of range ({len(str(value))} digits)", field=name) from None
    if not math.isfinite(value):
        raise RecordError(f"expected a finite number of seconds, got {value!r}", field=name)
    return value


def check_clip_start(value: Any) -> float:
    """A record's ``clip_start``: a number of seconds, 0 or more. The steps, targets and replies of a
    clip are times from its start on, and a reply before 0 s is refused (:class:`Prediction`), so a
    clip starting earlier could be run but never scored."""
    start = check_number(value, "clip_start")
    if start < 0:
        raise RecordError(
            f"a clip starts at 0 s or later on its record's clock, got {start} (its steps and replies "
            "would be negative times, which no prediction may hold)",
            field="clip_start",
        )
    return start


def check_text(value: Any, name: str, *, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise RecordError(f"expected a string, got {type(value).__name__} {value!r}", field=name)
    return value


def require_field(data: dict, key: str, prefix: str = "") -> Any:
    if key not in data or data[key] is None:
        raise RecordError("missing required field", field=prefix + key)
    return data[key]


@dataclass(frozen=True)
class Target:
    """What the model should say, and when.

    ``time`` is the moment the reply is due (tau in docs/protocols.md). ``window`` is an optional
    [start, end] in which a reply counts (ProPerMem's trigger window, EgoServe's service window);
    a target with a window and no time takes the window's center as its time.
    ``label`` is a structured answer checked by the ``label`` scorer (e.g. ``Warning``);
    ``category`` is a service subtype (EgoServe) or other class.
    """

    time: float
    content: str
    window: tuple[float, float] | None = None
    label: str | None = None
    category: str | None = None

    @classmethod
    def from_dict(cls, data: Any, prefix: str = "targets") -> Target:
        if not isinstance(data, dict):
            raise RecordError(f"expected an object, got {type(data).__name__}", field=prefix)
        window = data.get("window")
        if window is not None:
            if not isinstance(window, (list, tuple)) or len(window) != 2:
                raise RecordError(f"expected [start, end], got {window!r}", field=f"{prefix}.window")
            start, end = (check_number(v, f"{prefix}.window") for v in window)
            if end < start:
                raise RecordError(f"window ends before it starts ({start} > {end})", field=f"{prefix}.window")
            window = (start, end)
        if data.get("time") is None:
            if window is None:
                raise RecordError("a target needs a time or a window", field=f"{prefix}.time")
            time = (window[0] + window[1]) / 2
        else:
            time = check_number(data["time"], f"{prefix}.time")
        content = check_text(data.get("content", ""), f"{prefix}.content")
        return cls(
            time=time,
            content=content,
            window=window,
            label=check_text(data.get("label"), f"{prefix}.label", optional=True),
            category=check_text(data.get("category"), f"{prefix}.category", optional=True),
        )

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["window"] = None if self.window is None else list(self.window)
        return out


@dataclass(frozen=True)
class HistoryEntry:
    """One timestamped line of a personal history (e.g. a ProPerMem caption)."""

    time: float
    text: str

    @classmethod
    def from_dict(cls, data: Any, prefix: str = "history") -> HistoryEntry:
        if not isinstance(data, dict):
            raise RecordError(f"expected an object, got {type(data).__name__}", field=prefix)
        return cls(
            time=check_number(require_field(data, "time", f"{prefix}."), f"{prefix}.time"),
            text=check_text(require_field(data, "text", f"{prefix}."), f"{prefix}.text"),
        )


@dataclass(frozen=True)
class Stream:
    """One clip as a decision stream (see the module docstring for the time axis).

    ``video`` is a path, absolute or relative to the directory of the records file it came from
    (resolve it with :func:`~data_builders.record_io.resolve_video`). ``instruction_time`` is when the user gives the
    instruction (default: the clip start). ``video_offset`` maps record times to file times
    (file time = record time - video_offset), for sources with absolute clocks.
    ``meta`` carries source-specific facts (e.g. the EgoServe unit); it must be JSON-serializable.
    """

    id: str
    source: str
    task: str
    video: str
    clip_start: float
    clip_end: float
    instruction: str
    targets: list[Target] = field(default_factory=list)
    instruction_time: float | None = None
    history: list[HistoryEntry] = field(default_factory=list)
    video_offset: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def duration(self) -> float:
        return self.clip_end - self.clip_start

    @property
    def is_negative(self) -> bool:
        return not self.targets

    @property
    def video_key(self) -> str:
        """What identifies the source video (for splits): ``meta['video_id']`` if set, else the path."""
        return str(self.meta.get("video_id", self.video))

    @classmethod
    def from_dict(cls, data: Any) -> Stream:
        """Parse and validate one record; raises :class:`RecordError` (record = the id if known)."""
        if not isinstance(data, dict):
            raise RecordError(f"expected a JSON object, got {type(data).__name__}")
        rid = data.get("id")
        try:
            if not isinstance(rid, str) or not rid:
                raise RecordError(f"expected a non-empty string id, got {rid!r}", field="id")
            task = check_task(check_text(require_field(data, "task"), "task"))
            clip_start = check_clip_start(require_field(data, "clip_start"))
            clip_end = check_number(require_field(data, "clip_end"), "clip_end")
            if clip_end <= clip_start:
                raise RecordError(
                    f"clip ends before it starts ({clip_start} >= {clip_end})", field="clip_end"
                )
            targets = _clip_targets(data, clip_start, clip_end)
            instruction_time = data.get("instruction_time")
            if instruction_time is not None:
                instruction_time = check_number(instruction_time, "instruction_time")
                if not clip_start - TIME_EPS <= instruction_time <= clip_end + TIME_EPS:
                    raise RecordError("instruction time lies outside the clip", field="instruction_time")
            raw_history = data.get("history") or []
            if not isinstance(raw_history, list):
                raise RecordError("expected a list", field="history")
            meta = _meta(data)
            stream = cls(
                id=rid,
                source=check_text(require_field(data, "source"), "source"),
                task=task,
                video=check_text(require_field(data, "video"), "video"),
                clip_start=clip_start,
                clip_end=clip_end,
                instruction=check_text(require_field(data, "instruction"), "instruction"),
                targets=targets,
                instruction_time=instruction_time,
                history=[HistoryEntry.from_dict(h, f"history[{i}]") for i, h in enumerate(raw_history)],
                video_offset=check_number(data.get("video_offset", 0.0) or 0.0, "video_offset"),
                meta=meta,
            )
            for name, text in stream.turn_texts():
                check_plain_text(text, name)
            return stream
        except RecordError as err:
            raise err.located(record=rid if isinstance(rid, str) and rid else None) from None

    def turn_texts(self) -> list[tuple[str, str]]:
        """``(field, text)`` of every text of the record that the model's turns carry: the
        instruction, the later user turns (``meta["user_turns"]``), the history and the targets'
        contents and categories."""
        out = [("instruction", self.instruction)]
        turns = self.meta.get("user_turns")
        for i, turn in enumerate(turns if isinstance(turns, list) else []):
            if isinstance(turn, dict) and isinstance(turn.get("content"), str):
                out.append((f"meta.user_turns[{i}].content", turn["content"]))
        out += [(f"history[{i}].text", h.text) for i, h in enumerate(self.history)]
        for i, t in enumerate(self.targets):
            out.append((f"targets[{i}].content", t.content))
            if t.category is not None:
                out.append((f"targets[{i}].category", t.category))
        return out

    @classmethod
    def whole_video(
        cls,
        *,
        id: str,
        source: str,
        task: str,
        video: str,
        clip_end: float,
        instruction: str,
        targets: list[Target],
        meta: dict[str, Any],
    ) -> Stream:
        """A stream over a whole video file: the clip and the instruction both start at 0 s."""
        return cls(
            id=id,
            source=source,
            task=task,
            video=video,
            clip_start=0.0,
            clip_end=clip_end,
            instruction=instruction,
            instruction_time=0.0,
            targets=targets,
            meta=meta,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "source": self.source,
            "task": self.task,
            "video": self.video,
            "clip_start": self.clip_start,
            "clip_end": self.clip_end,
            "instruction": self.instruction,
            "instruction_time": self.instruction_time,
            "targets": [t.to_dict() for t in self.targets],
            "history": [asdict(h) for h in self.history],
            "video_offset": self.video_offset,
            "meta": self.meta,
        }


def _clip_targets(data: dict[str, Any], clip_start: float, clip_end: float) -> list[Target]:
    """A record's ``targets``, parsed, each checked to lie (window and all) inside the clip."""
    raw_targets = data.get("targets") or []
    if not isinstance(raw_targets, list):
        raise RecordError("expected a list", field="targets")
    targets = [Target.from_dict(t, f"targets[{i}]") for i, t in enumerate(raw_targets)]
    for i, t in enumerate(targets):
        lo = t.window[0] if t.window else t.time
        hi = t.window[1] if t.window else t.time
        if lo < clip_start - TIME_EPS or hi > clip_end + TIME_EPS:
            raise RecordError(
                f"target at {t.time}s (window {t.window}) lies outside the clip [{clip_start}, {clip_end}]",
                field=f"targets[{i}]",
            )
    return targets


def _meta(data: dict[str, Any]) -> dict[str, Any]:
    """A record's ``meta`` object (parquet stores it as a JSON string)."""
    meta = data.get("meta") or {}
    if isinstance(meta, str):
        try:
            meta = json.loads(meta)
        except (ValueError, RecursionError) as exc:
            raise RecordError(f"not a JSON object string ({exc})", field="meta") from None
    if not isinstance(meta, dict):
        raise RecordError("expected an object", field="meta")
    return meta
