"""What every source builder is made of: its :class:`SourceSpec`, its inputs and outputs, shared helpers.

A builder turns a source's own annotation files into :class:`Pending` items, one per source record
(a video, a row, a recording). A pending item names its video (relative to the video root, plus
names to look it up by when the layout differs) and carries a ``make`` function that finishes the
conversion once the driver has found the video and, where needed, probed it (duration, fps). This
two-stage shape is what lets the driver list every missing video before anything is decoded.
Records that cannot be parsed at all come out as :class:`ConversionError` instead. The driver
(:mod:`data_builders.build`) does the rest.

Tolerances shared by every source: an event whose end precedes its start by less than
:data:`INVERSION_TOLERANCE` (0.5 s) is swapped and counted (``repaired_inversions``), a worse one is
dropped alone and listed (:func:`event_span`); what a record repaired, left out or dropped goes in
its :class:`Tally`, which the driver sums into ``stats.json``.

A source is one module of ``data_builders/sources/`` ending in its ``SPEC``, listed in the table
``data_builders.sources.SOURCES``:

>>> from dataclasses import dataclass
>>> @dataclass
... class NoSourceConfig:
...     pass
>>> def doc_example(inputs, options):
...     return []
>>> SPEC = SourceSpec("doc_example", build=doc_example, config=NoSourceConfig, needs_annotations=False)
>>> SPEC.make_config({}), SPEC.needs_annotations
(NoSourceConfig(), False)
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from data_builders.records import RecordError, Stream, no_duplicate_keys
from data_builders.video import VideoInfo
from infra.files import json_lines

#: A builder: (inputs, config dataclass) -> pending items and per-record errors.
Builder = Callable[["BuildInputs", Any], Iterable["Pending | ConversionError"]]


@dataclass(frozen=True)
class BuildInputs:
    """Where a build reads and writes: the annotation file or dir, the video root, the output dir."""

    annotations: Path | None
    videos: Path | None
    out: Path


#: An event whose end precedes its start by less than this many seconds is annotation noise: the
#: two times are swapped and the repair counted. A worse inversion drops that one event.
INVERSION_TOLERANCE = 0.5

#: Scopes of a :class:`ConversionError`: what was lost.
SCOPES = ("record", "event", "skipped")

#: Exceptions that a malformed source record can raise while it is parsed; each becomes that
#: record's :class:`ConversionError` instead of stopping the build.
RECORD_EXCEPTIONS = (ValueError, TypeError, KeyError, AttributeError, OverflowError, IndexError)


@dataclass(frozen=True)
class ConversionError:
    """Something of a source record that did not become data: the file, the record id and why.

    ``scope`` says what was lost: ``record`` (the record made no stream; counts against
    ``max_error_rate``), ``event`` (one event was dropped, the record's other events were kept) or
    ``skipped`` (the record was left out on purpose, e.g. a redacted video; counted, not an error).
    """

    source_file: str
    record: str
    reason: str
    scope: str = "record"

    def to_dict(self) -> dict[str, str]:
        return {
            "source_file": self.source_file,
            "record": self.record,
            "reason": self.reason,
            "scope": self.scope,
        }


@dataclass
class Tally:
    """What converting one source record repaired, left out or dropped.

    ``counts`` are named counts summed over the build into ``stats.json`` (``conversion``);
    ``dropped`` are the reasons of dropped events (each listed in ``errors.jsonl``); ``lost`` counts
    the targets among them: replies that were due but could not be kept. A stream left without
    targets by such losses is not a negative, and the driver rejects it.
    """

    counts: Counter = field(default_factory=Counter)
    dropped: list[str] = field(default_factory=list)
    lost: int = 0

    def count(self, key: str, n: int = 1) -> None:
        self.counts[key] += n

    def drop(self, reason: str, *, target: bool = True) -> None:
        """Drop one event (listed with ``reason``); ``target``: it would have been a target."""
        self.dropped.append(reason)
        self.counts["dropped_events"] += 1
        self.lost += int(target)

    def lose(self, key: str) -> None:
        """A target left out on purpose (e.g. an unintelligible transcription): counted under ``key``."""
        self.counts[key] += 1
        self.lost += 1


@dataclass
class Pending:
    """A parsed source record waiting for its video facts.

    ``video`` is the path the source's pattern gives, relative to the build's video root (or
    absolute). When no file is there, the driver looks the video up in an index of the root by the
    file name of ``video`` and then by each name in ``lookup`` (a file stem or an enclosing folder,
    e.g. the record's id), so other layouts work without a pattern. ``make`` receives the probed
    :class:`VideoInfo` (``None`` when ``needs_info`` is false and probing is off: the annotation
    states what the record needs) and returns the finished streams, whose ``video`` is still the
    pattern's path (the driver substitutes the file it found); it raises ``ValueError`` (e.g.
    :class:`RecordError`) for records that turn out unconvertible. ``tally`` carries the record's
    repairs and dropped events.
    """

    source_file: str
    record: str
    video: str
    make: Callable[[VideoInfo | None], list[Stream]]
    needs_info: bool = True
    lookup: tuple[str, ...] = ()
    tally: Tally = field(default_factory=Tally)


@dataclass(frozen=True)
class SourceSpec:
    """A source: its name, its builder, its config dataclass (its own config keys, with defaults;
    ``conf/source/<name>.yaml`` mirrors it) and whether it reads annotations."""

    name: str
    build: Builder
    config: type
    needs_annotations: bool = True

    def make_config(self, values: dict[str, Any] | None = None) -> Any:
        """The config dataclass from plain values; an unknown key fails with the known ones."""
        values = dict(values or {})
        known = {f.name for f in fields(self.config)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"source {self.name!r} has no option(s) {unknown}; known: {sorted(known)}")
        try:
            return self.config(**values)
        except ValueError as exc:
            raise ValueError(f"source {self.name!r}: {exc}") from None


# ----------------------------------------------------------------------------------------------
# Helpers shared by the source modules


def check_options(
    options: Any,
    *,
    positive: Sequence[str] = (),
    non_negative: Sequence[str] = (),
    at_least_one: Sequence[str] = (),
    choices: dict[str, Sequence[str]] | None = None,
) -> None:
    """Validate numeric and enumerated options; a ``ValueError`` names the option, the rule and the
    value. Numbers must be finite. ``None`` passes (an unset optional number).

    >>> @dataclass
    ... class Opts:
    ...     fps: float = 0.0
    >>> check_options(Opts(), positive=["fps"])
    Traceback (most recent call last):
    ...
    ValueError: option fps must be > 0, got 0.0
    """

    def number(name: str) -> float | None:
        value = getattr(options, name)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"option {name} must be a number, got {value!r}")
        if not math.isfinite(value):
            raise ValueError(f"option {name} must be finite, got {value!r}")
        return value

    for name in positive:
        v = number(name)
        if v is not None and v <= 0:
            raise ValueError(f"option {name} must be > 0, got {v!r}")
    for name in non_negative:
        v = number(name)
        if v is not None and v < 0:
            raise ValueError(f"option {name} must be >= 0, got {v!r}")
    for name in at_least_one:
        v = number(name)
        if v is not None and v < 1:
            raise ValueError(f"option {name} must be at least 1, got {v!r}")
    for name, allowed in (choices or {}).items():
        if getattr(options, name) not in allowed:
            raise ValueError(f"option {name} must be one of {list(allowed)}, got {getattr(options, name)!r}")


def each_record(
    items: Iterable[tuple[str, Any]], source_file: str | Path, parse: Callable[[str, Any], Iterable[Pending]]
) -> Iterator[Pending | ConversionError]:
    """Run ``parse(record_id, item)`` on every ``(record_id, item)``; a ``ValueError`` (or
    :class:`RecordError`), or a type error from a malformed record, becomes a
    :class:`ConversionError` for that record, never a silent drop nor a stopped build."""
    for rid, item in items:
        try:
            yield from list(parse(rid, item))
        except RECORD_EXCEPTIONS as exc:
            yield ConversionError(str(source_file), str(rid), record_reason(exc))


def record_reason(exc: BaseException) -> str:
    """The reason text of a record's exception: a :class:`RecordError`'s own words, else the
    exception type and message (a malformed record: a list where an object was expected, ...)."""
    if isinstance(exc, RecordError):
        return exc.reason if exc.field is None and exc.file is None else str(exc)
    if isinstance(exc, ValueError):
        return str(exc)
    return f"malformed record ({type(exc).__name__}: {exc})"


def read_text(path: Path) -> str:
    """An annotation file's text (UTF-8, a leading BOM dropped). A missing or empty file, or bytes
    that are not UTF-8, raise a :class:`RecordError` naming the file (and the line and byte)."""
    if not path.is_file():
        raise RecordError("annotation file does not exist", file=path)
    data = path.read_bytes()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise RecordError(
            f"not UTF-8 text: byte 0x{data[exc.start]:02x} at offset {exc.start} ({exc.reason})",
            file=path,
            record=f"line {line}",
        ) from None
    if not text.strip():
        raise RecordError("annotation file is empty", file=path)
    return text


def _json(text: str, path: Path, line: int | None = None, unique_keys: bool = False) -> Any:
    """``json.loads`` whose failures (syntax, a number too long to convert, nesting too deep for
    the parser; with ``unique_keys``, a key given twice in one object) become a :class:`RecordError`
    naming the file and the line."""
    where = None if line is None else f"line {line}"
    try:
        return json.loads(text, object_pairs_hook=no_duplicate_keys if unique_keys else None)
    except RecordError as err:
        raise err.located(file=path, record=where) from None
    except json.JSONDecodeError as exc:
        at = f"line {exc.lineno + (line or 1) - 1}, column {exc.colno}"
        raise RecordError(f"invalid JSON at {at}: {exc.msg}", file=path, record=where) from None
    except RecursionError:
        raise RecordError("invalid JSON: nested too deeply to parse", file=path, record=where) from None
    except ValueError as exc:  # e.g. an integer literal over the interpreter's digit limit
        raise RecordError(f"invalid JSON: {exc}", file=path, record=where) from None


def load_json(path: Path, unique_keys: bool = False) -> Any:
    """A JSON file, or a JSON Lines file (the list of its lines).

    ``.jsonl`` / ``.ndjson`` files are always read as JSON Lines (a one-line file is a one-item
    list); other files as one JSON document, or as JSON Lines when the document does not parse but
    its first line does. Every failure names the file, the line and the reason. ``unique_keys``
    (the prediction readers): a key given twice in one object is such a failure, naming the key,
    where plain JSON keeps the last value silently.
    """
    text = read_text(path)
    if path.suffix.lower() in (".jsonl", ".ndjson"):
        return _json_lines(text, path, unique_keys)
    try:
        return _json(text, path, unique_keys=unique_keys)
    except RecordError as whole:
        lines = json_lines(text)
        first = next(n for n, line in enumerate(lines, start=1) if line.strip())
        try:
            _json(lines[first - 1], path, first, unique_keys)
        except RecordError:
            raise whole from None
        return _json_lines(text, path, unique_keys)


def each_json_line(
    path: Path, parse: Callable[[str, Any], Iterable[Pending]]
) -> Iterator[Pending | ConversionError]:
    """:func:`each_record` over the lines of a JSON Lines file, ids ``line <n>``: a line that is not
    valid JSON is that line's :class:`ConversionError`, and every other line is still parsed."""
    text = read_text(path)
    for n, line in enumerate(json_lines(text), start=1):
        if not line.strip():
            continue
        try:
            item = _json(line, path, n)
        except RecordError as exc:
            yield ConversionError(str(path), f"line {n}", exc.reason)
            continue
        yield from each_record([(f"line {n}", item)], path, parse)


def _json_lines(text: str, path: Path, unique_keys: bool = False) -> list[Any]:
    lines = enumerate(json_lines(text), start=1)
    return [_json(line, path, n, unique_keys) for n, line in lines if line.strip()]


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
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RecordError(f"field '{name}': expected a finite time in seconds, got {value!r}")
    try:
        out = float(value)
    except OverflowError:
        raise RecordError(f"field '{name}': time out of range ({len(str(value))}-digit number)") from None
    if not math.isfinite(out):
        raise RecordError(f"field '{name}': expected a finite time in seconds, got {value!r}")
    return out


_CLOCK = re.compile(r"^(?:(\d+):)?(\d+):(\d+(?:\.\d+)?)$")


def clock_seconds(text: str, name: str) -> float:
    """``HH:MM:SS(.f)`` or ``MM:SS(.f)`` -> seconds.

    >>> clock_seconds("00:12:10.470", "t"), clock_seconds("01:24.1", "t")
    (730.47, 84.1)
    """
    m = _CLOCK.match(str(text).strip())
    if not m:
        raise RecordError(f"field '{name}': cannot parse clock time {text!r}")
    h, mnt, sec = int(m.group(1) or 0), int(m.group(2)), float(m.group(3))
    if mnt >= 60 or sec >= 60:
        raise RecordError(f"field '{name}': minutes/seconds out of range in {text!r}")
    return round(h * 3600 + mnt * 60 + sec, 6)


def check_span(start: float, end: float, name: str) -> None:
    """A ``RecordError`` when a time span ends before it starts (for spans that define the record
    itself, e.g. a clip; an event's span goes through :func:`event_span`)."""
    if end < start:
        raise RecordError(f"field '{name}': ends before it starts ({start} > {end})")


def event_span(
    start: float, end: float, name: str, tally: Tally, *, target: bool = True
) -> tuple[float, float] | None:
    """An event's ``(start, end)``: as given, swapped when it is inverted by less than
    :data:`INVERSION_TOLERANCE` (counted as ``repaired_inversions``), or ``None`` when it is
    inverted by more (the event is dropped and listed; ``target``: it was a target).

    >>> t = Tally()
    >>> event_span(5.037, 5.0, "events[3]", t), t.counts["repaired_inversions"]
    ((5.0, 5.037), 1)
    >>> event_span(9.0, 5.0, "events[4]", t), t.dropped
    (None, ['events[4]: ends 4.000 s before it starts (9.0 > 5.0); event dropped'])
    """
    if end >= start:
        return start, end
    if start - end < INVERSION_TOLERANCE:
        tally.count("repaired_inversions")
        return end, start
    tally.drop(
        f"{name}: ends {start - end:.3f} s before it starts ({start} > {end}); event dropped", target=target
    )
    return None


def clip_end_from(info: VideoInfo | None, stated: float | None, record: str) -> float:
    """The clip end (s): the probed duration, else the duration the annotation states; an error
    when neither is known."""
    if info is not None:
        return info.duration
    if stated is None:
        raise RecordError(
            f"record {record}: clip length unknown (no probe and no duration in the annotation)"
        )
    return stated
