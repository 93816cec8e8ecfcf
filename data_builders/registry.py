"""The source registry: every dataset builder is a function registered under its source name.

A builder turns a source's own annotation files into :class:`Pending` items, one per source record
(a video, a row, a recording). A pending item names its video (relative to the video root) and
carries a ``make`` function that finishes the conversion once the driver has checked that the
video exists and, where needed, probed it (duration, fps). This two-stage shape is what lets the
driver list every missing video before anything is decoded. Records that cannot be parsed at all
come out as :class:`ConversionError` instead. The driver (:mod:`data_builders.build`) does the rest.

>>> from dataclasses import dataclass
>>> @dataclass
... class NoOptions:
...     pass
>>> @register_source("doc_example", NoOptions, needs_annotations=False)
... def doc_example(inputs, options):
...     return []
>>> SOURCES["doc_example"].options is NoOptions
True
>>> del SOURCES["doc_example"]
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from data_builders.records import RecordError, Stream
from data_builders.video import VideoInfo

#: A builder: (inputs, options dataclass) -> pending items and per-record errors.
Builder = Callable[["BuildInputs", Any], Iterable["Pending | ConversionError"]]


@dataclass(frozen=True)
class BuildInputs:
    """Where a build reads and writes: the annotation file or dir, the video root, the output dir."""

    annotations: Path | None
    videos: Path | None
    out: Path


@dataclass(frozen=True)
class ConversionError:
    """One source record that could not become a stream: the file, the record id and why."""

    source_file: str
    record: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"source_file": self.source_file, "record": self.record, "reason": self.reason}


@dataclass
class Pending:
    """A parsed source record waiting for its video facts.

    ``video`` is relative to the build's video root (or absolute). ``make`` receives the probed
    :class:`VideoInfo` (``None`` when ``needs_info`` is false and probing is off) and returns the
    finished streams, whose ``video`` is still root-relative; it raises ``ValueError`` (e.g.
    :class:`RecordError`) for records that turn out unconvertible.
    """

    source_file: str
    record: str
    video: str
    make: Callable[[VideoInfo | None], list[Stream]]
    needs_info: bool = True


@dataclass(frozen=True)
class SourceSpec:
    """A registered source: its builder, its options dataclass and whether it reads annotations."""

    name: str
    build: Builder
    options: type
    needs_annotations: bool = True

    def make_options(self, values: dict[str, Any] | None = None) -> Any:
        """The options dataclass from plain values; an unknown key fails with the known ones."""
        values = dict(values or {})
        known = {f.name for f in fields(self.options)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"source {self.name!r} has no option(s) {unknown}; known: {sorted(known)}")
        return self.options(**values)


SOURCES: dict[str, SourceSpec] = {}


def register_source(
    name: str, options: type, *, needs_annotations: bool = True
) -> Callable[[Builder], Builder]:
    """Decorator: register ``fn(inputs, options)`` as the builder of source ``name``.

    ``options`` is a dataclass whose fields are the source's own config keys (with defaults);
    ``conf/source/<name>.yaml`` mirrors it. Registering a name twice is an error.
    """

    def deco(fn: Builder) -> Builder:
        if name in SOURCES:
            raise ValueError(f"source {name!r} is already registered")
        SOURCES[name] = SourceSpec(name=name, build=fn, options=options, needs_annotations=needs_annotations)
        return fn

    return deco


def get_source(name: str) -> SourceSpec:
    """The registered source ``name`` (all source modules are imported first)."""
    import data_builders.sources  # noqa: F401  (registers every source)

    if name not in SOURCES:
        raise KeyError(f"unknown source {name!r}; known: {', '.join(sorted(SOURCES))}")
    return SOURCES[name]


# ----------------------------------------------------------------------------------------------
# Helpers shared by the source modules


def each_record(
    items: Iterable[tuple[str, Any]], source_file: str | Path, parse: Callable[[str, Any], Iterable[Pending]]
) -> Iterator[Pending | ConversionError]:
    """Run ``parse(record_id, item)`` on every ``(record_id, item)``; a ``ValueError`` (or
    :class:`RecordError`) becomes a :class:`ConversionError` for that record, never a silent drop."""
    for rid, item in items:
        try:
            yield from list(parse(rid, item))
        except ValueError as exc:
            reason = exc.reason if isinstance(exc, RecordError) and exc.field is None else str(exc)
            yield ConversionError(str(source_file), str(rid), reason)


def load_json(path: Path) -> Any:
    """A JSON file, or a JSON Lines file (list of its lines); bad JSON names the file and line."""
    if not path.is_file():
        raise RecordError("annotation file does not exist", file=path)
    text = path.read_text(encoding="utf-8")
    try:
        return json.loads(text)
    except json.JSONDecodeError as whole:
        rows = []
        for line in text.splitlines():
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                raise RecordError(f"invalid JSON: {whole.msg} (line {whole.lineno})", file=path) from None
        return rows


def require(data: Any, key: str) -> Any:
    """``data[key]``, or a ``RecordError`` naming the missing field."""
    if not isinstance(data, dict):
        raise RecordError(f"expected an object, got {type(data).__name__}")
    if data.get(key) is None:
        raise RecordError(f"missing field '{key}'")
    return data[key]


def seconds(value: Any, name: str) -> float:
    """A finite number of seconds from a number or a numeric string; else a ``RecordError``."""
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise RecordError(f"field '{name}': cannot parse time {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(float(value)):
        raise RecordError(f"field '{name}': expected a finite time in seconds, got {value!r}")
    return float(value)


_CLOCK = re.compile(r"^(?:(\d+):)?(\d+):(\d+(?:\.\d+)?)$")


def clock_seconds(text: str, name: str) -> float:
    """``HH:MM:SS(.f)`` or ``MM:SS(.f)`` -> seconds.

    >>> clock_seconds("00:12:10.470", "t"), clock_seconds("01:24.1", "t")
    (730.47, 84.1)
    """
    m = _CLOCK.match(text.strip())
    if not m:
        raise RecordError(f"field '{name}': cannot parse clock time {text!r}")
    h, mnt, sec = int(m.group(1) or 0), int(m.group(2)), float(m.group(3))
    if mnt >= 60 or sec >= 60:
        raise RecordError(f"field '{name}': minutes/seconds out of range in {text!r}")
    return round(h * 3600 + mnt * 60 + sec, 6)


def check_span(start: float, end: float, name: str) -> None:
    """A ``RecordError`` when a time span ends before it starts."""
    if end < start:
        raise RecordError(f"field '{name}': ends before it starts ({start} > {end})")


def clip_end_from(info: VideoInfo | None, fallback: float | None, record: str) -> float:
    """The clip end (s): the probed duration, else ``fallback``; an error when neither is known."""
    if info is not None:
        return info.duration
    if fallback is None:
        raise RecordError(
            f"record {record}: clip length unknown (no probe and no duration in the annotation)"
        )
    return fallback
