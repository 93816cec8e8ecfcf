"""EgoServe prediction files, read twice: as the official evaluator reads them and in the strict
(protocol) reading; what either drops or cannot read is counted by reason (:class:`Tally`).

``--pred`` forms (per dataset):

- **EgoMemo's inference folders**: one folder per unit named ``<unit><suffix>`` holding
  ``<response>.json`` (EgoLife: ``<person><suffix>/DAY<d>/<response>.json``). The suffixes are
  EgoMemo's (:data:`OFFICIAL_SUFFIX`: ``-qwenvl_3_8b_instruct_restart`` for EgoLife,
  ``-qwenvl_3_8b_instruct`` for HoloAssist, ``_qwenvl_3_8b_instruct`` for CaptainCook4D; another
  model's with ``--model-suffix``), the response name ``proactive_response_gpt_5``
  (``--response-name``). Each file is a list of entries ``{frame_timestamp, gemini_response, ...}``.
- a flat JSON list (or JSON Lines) of such entries, each naming its unit (first of :data:`UNIT_KEYS`;
  EgoLife ``A1_JAKE`` or ``A1_JAKE/DAY3``), its response under one of :data:`RESPONSE_KEYS`;
- a JSON object ``{unit: [entries]}`` (a list item that is a service, or a lone entry, is read too);
- this project's ``{"id", "replies"}`` lines (subtype = the reply's category, time = the reply time).

A response (``gemini_response``) is a list of services or ``{"finalized_services": {"services":
[...]}}`` / ``{"finalized_services": [...]}``; a service has ``trigger_time_window``,
``service_sub_type``, ``service_main_type`` and ``user_prompt`` (the message the judge reads).
The official reading takes nothing from a null or text response, a dict without
``finalized_services`` or a top-level ``decision: suppressed``; the strict reading also reads
``{"decision", "services"}`` and a lone service dict, and counts null and text responses as errors.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from data_builders.record_io import iter_jsonl
from data_builders.records import RecordError, no_duplicate_keys
from data_builders.turn_grammar import split_category
from engine.replies import load_predictions
from metrics.egoserve import SECONDS_PER_DAY, ServiceEvent
from metrics.egoserve_rules import (
    official_main_type,
    official_subtype,
    parse_day_window,
    parse_pred_window,
    parse_time_window,
    strict_subtype,
)

OFFICIAL_SUFFIX = {
    "egolife": "-qwenvl_3_8b_instruct_restart",
    "holoassist": "-qwenvl_3_8b_instruct",
    "captaincook4d": "_qwenvl_3_8b_instruct",
}
RESPONSE_NAME = "proactive_response_gpt_5"
#: The EgoLife persons and days the official evaluator reads.
EGOLIFE_PERSONS = ("A1_JAKE", "A4_LUCIA", "A5_KATRINA")
EGOLIFE_DAYS = frozenset({1, 2, 3, 4, 5})
UNIT_KEYS = ("unit", "id", "video_name", "recording_id", "person", "video_id")
RESPONSE_KEYS = ("gemini_response", "response", "services")
_DAY_DIR = re.compile(r"DAY([1-9]\d*)")
_UNIT_DAY = re.compile(r"(.+)/DAY([1-9]\d*)")


@dataclass
class Tally:
    """Counts by reason, with up to three named examples (file and record) each."""

    counts: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[str]] = field(default_factory=dict)

    def add(self, reason: str, where: str, n: int = 1) -> None:
        if n <= 0:
            return
        self.counts[reason] = self.counts.get(reason, 0) + n
        seen = self.examples.setdefault(reason, [])
        if len(seen) < 3:
            seen.append(where)

    def update(self, other: Tally) -> None:
        for reason, n in other.counts.items():
            self.counts[reason] = self.counts.get(reason, 0) + n
            seen = self.examples.setdefault(reason, [])
            seen.extend(other.examples.get(reason, [])[: 3 - len(seen)])

    def as_dict(self) -> dict[str, int]:
        return dict(sorted(self.counts.items()))


@dataclass
class Readings:
    """What reading one dataset's files found, in both views, and the tallies."""

    dropped: Tally = field(default_factory=Tally)
    """Official view: what the official rules drop or ignore."""
    errors: Tally = field(default_factory=Tally)
    """Strict view: input that cannot be read."""
    crashes: Tally = field(default_factory=Tally)
    """Input on which the official code stops with an exception (it is dropped here)."""
    official: list[ServiceEvent] = field(default_factory=list)
    strict: list[ServiceEvent] = field(default_factory=list)


@dataclass
class PredSource:
    """One unit's prediction input: entries ``(where, file day or None, entry)`` in reading order,
    the EgoLife days that have a response file (None: every day), ready events (replies format)."""

    unit: str
    days: set[int] | None = None
    entries: list[tuple[str, int | None, Any]] = field(default_factory=list)
    events: list[ServiceEvent] = field(default_factory=list)


def load_json(path: Path, unique_keys: bool = True) -> Any:
    """A JSON file, or :class:`RecordError` naming it; a key given twice in one object is such an
    error naming the key, unless ``unique_keys`` is false (the last value is kept, as ``json`` does)."""
    try:
        text = path.read_text(encoding="utf-8")
        return json.loads(text, object_pairs_hook=no_duplicate_keys if unique_keys else None)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RecordError(f"cannot read JSON: {exc}", file=path) from None
    except RecordError as err:
        raise err.located(file=path) from None


def _entries_of(path: Path, data: Any, dataset: str, out: Readings) -> list[Any]:
    """A response file's entries; a file the official code cannot iterate is counted and empty."""
    if isinstance(data, list):
        return data
    sized = isinstance(data, (dict, str))  # HoloAssist/CaptainCook4D skip an unsized one (len() fails)
    if data not in ({}, "") and (sized or dataset == "egolife"):
        out.crashes.add("pred: a response file must be a list", str(path))
    out.dropped.add("pred_unreadable_file", str(path))
    out.errors.add("pred_unreadable_file", str(path))
    return []


def _read_file(path: Path, dataset: str, out: Readings) -> list[Any]:
    """A response file as the official evaluator reads it; a key given twice in one object (the
    official ``json.load`` keeps the last value) is counted as dropped and as a strict error."""
    try:
        try:
            data = load_json(path)
        except RecordError as err:
            if "is given twice" not in err.reason:
                raise
            out.dropped.add("pred_duplicate_key", f"{path}: {err.reason}")
            out.errors.add("pred_duplicate_key", f"{path}: {err.reason}")
            data = load_json(path, unique_keys=False)
    except RecordError:
        out.dropped.add("pred_unreadable_file", str(path))
        out.errors.add("pred_unreadable_file", str(path))
        return []
    return _entries_of(path, data, dataset, out)


def folder_sources(
    path: Path, dataset: str, suffix: str | None, response: str, out: Readings
) -> dict[str, PredSource]:
    """EgoMemo's per-unit folders under ``path`` (units by folder name, the suffix stripped)."""
    suffix = suffix or OFFICIAL_SUFFIX.get(dataset, "")
    name = f"{response}.json"
    sources: dict[str, PredSource] = {}
    other = []
    for d in sorted(path.iterdir()):
        if not d.is_dir():
            out.dropped.add("pred_file_outside_unit_folders", str(d))
            continue
        if not d.name.endswith(suffix) or d.name == suffix:
            out.dropped.add("pred_folder_other_suffix", str(d))
            other.append(d.name)
            continue
        src = PredSource(d.name[: len(d.name) - len(suffix)])
        if dataset == "egolife":
            src.days = set()
            for day_dir in sorted(d.iterdir(), key=lambda p: (len(p.name), p.name)):
                m = _DAY_DIR.fullmatch(day_dir.name)
                if day_dir.is_dir():
                    _count_other_files(day_dir, name, out)
                if m is None or not (day_dir / name).exists():
                    out.dropped.add("pred_folder_without_response_file", str(day_dir))
                    continue
                day = int(m.group(1))
                src.days.add(day)
                for i, e in enumerate(_read_file(day_dir / name, dataset, out)):
                    src.entries.append((f"{day_dir / name}[{i}]", day, e))
        else:
            _count_other_files(d, name, out)
            if not (d / name).exists():
                out.dropped.add("pred_folder_without_response_file", str(d))
                continue
            src.entries = [
                (f"{d / name}[{i}]", None, e) for i, e in enumerate(_read_file(d / name, dataset, out))
            ]
        if src.entries or src.days or dataset != "egolife":
            sources[src.unit] = src
    if not sources and other:
        raise RecordError(
            f"no unit folder ends with {suffix!r} (found e.g. {other[0]!r}): pass --model-suffix",
            file=path,
        )
    return sources


def _count_other_files(folder: Path, name: str, out: Readings) -> None:
    for f in sorted(folder.glob("*.json")):
        if f.name != name:
            out.dropped.add("pred_file_other_response_name", str(f))


def file_sources(path: Path, dataset: str, out: Readings) -> dict[str, PredSource]:
    """A flat list / JSON Lines of entries, a ``{unit: [entries]}`` object or ``{"id", "replies"}`` lines."""
    if path.suffix == ".jsonl":
        rows = [row for _, row in iter_jsonl(path)]
        if rows and isinstance(rows[0], dict) and "replies" in rows[0]:
            return _reply_sources(path)
        data: Any = rows
    else:
        data = load_json(path)
    sources: dict[str, PredSource] = {}
    if isinstance(data, dict):
        for unit, value in data.items():
            items = value if isinstance(value, list) else [value]
            for i, item in enumerate(items):
                if isinstance(item, dict) and not any(k in item for k in RESPONSE_KEYS):
                    item = {"gemini_response": [item]}  # a service given directly
                _add_entry(sources, str(unit), f"{path}[{unit}][{i}]", item, dataset)
    elif isinstance(data, list):
        for i, entry in enumerate(data):
            key = next((k for k in UNIT_KEYS if isinstance(entry, dict) and k in entry), None)
            if key is None:
                out.dropped.add("pred_entry_without_unit", f"{path}[{i}]")
                out.errors.add("pred_entry_without_unit", f"{path}[{i}]")
                continue
            _add_entry(sources, str(entry[key]), f"{path}[{i}]", entry, dataset)
    else:
        raise RecordError("expected a JSON list or object of prediction entries", file=path)
    return sources


def _add_entry(sources: dict[str, PredSource], unit: str, where: str, entry: Any, dataset: str) -> None:
    day = None
    m = _UNIT_DAY.fullmatch(unit) if dataset == "egolife" else None
    if m is not None:
        unit, day = m.group(1), int(m.group(2))
    src = sources.setdefault(unit, PredSource(unit, days=set() if m is not None else None))
    if src.days is not None:
        if day is None:
            src.days = None
        else:
            src.days.add(day)
    src.entries.append((where, day, entry))


def _reply_sources(path: Path) -> dict[str, PredSource]:
    return {
        p.id: PredSource(p.id, events=events_from_replies(p.id, p.replies, path))
        for p in load_predictions(path)
    }


def events_from_replies(unit: str, replies: list, path: Path | str | None) -> list[ServiceEvent]:
    """Service events of one ``{"id", "replies"}`` prediction (point windows at the reply times);
    a reply without a known subtype raises :class:`RecordError`."""
    events = []
    for i, r in enumerate(replies):
        tag, text = split_category(r.text)
        raw = r.category if r.category is not None else tag
        if raw is None:
            raise RecordError(
                f"replies[{i}] has no subtype (set 'category' or start the text with [subtype])",
                file=path,
                record=unit,
            )
        subtype = strict_subtype(raw)
        if subtype is None:
            raise RecordError(f"unknown service subtype {raw!r}", file=path, record=f"{unit}/replies[{i}]")
        events.append(ServiceEvent(unit, subtype, r.time, r.time, text))
    return events


# ---------------------------------------------------------------------------------------------
# Entries and services, in both readings


def official_services(entry: Any, keys: tuple[str, ...]) -> tuple[list, str | None]:
    """The services the official code takes from an entry, and why it takes none (or None)."""
    if not isinstance(entry, dict):
        raise TypeError("an entry must be an object")
    response = next((entry[k] for k in keys if k in entry), None)
    if response is None:
        return [], "pred_response_null"
    if isinstance(response, list):
        return response, None
    if isinstance(response, str):
        return [], "pred_response_text"
    if not isinstance(response, dict):
        return [], "pred_response_other_type"
    if response.get("decision") == "suppressed":
        return [], "pred_entry_suppressed"
    if "finalized_services" not in response:
        return [], "pred_response_without_finalized_services"
    fs = response["finalized_services"]
    if isinstance(fs, list):
        return fs, None
    if isinstance(fs, dict) and isinstance(fs.get("services", []), list):
        return fs.get("services", []), None
    return [], "pred_response_without_finalized_services"


def strict_services(entry: Any, keys: tuple[str, ...]) -> tuple[list, str | None]:
    """The services the protocol reading takes from an entry, and the error when it cannot read it."""
    if not isinstance(entry, dict):
        return [], "pred_entry_not_an_object"
    response = next((entry[k] for k in keys if k in entry), None)
    if isinstance(response, list):
        return response, None
    if response is None or isinstance(response, str) or not isinstance(response, dict):
        kind = "null" if response is None else ("text" if isinstance(response, str) else "other_type")
        return [], f"pred_response_{kind}"
    if response.get("decision") == "suppressed":
        return [], None
    fs = response.get("finalized_services", response)
    if isinstance(fs, list):
        return fs, None
    if isinstance(fs, dict):
        if fs.get("decision") == "suppressed":
            return [], None
        if isinstance(fs.get("services"), list):
            return fs["services"], None
        if fs is response and "service_sub_type" in response:
            return [response], None
    return [], "pred_response_without_services"


def _text(svc: dict) -> str:
    text = svc.get("user_prompt", "")
    return text if isinstance(text, str) else ""


def official_event(dataset: str, unit: str, svc: Any, days: set[int] | None) -> ServiceEvent | str:
    """One service as the official reader of ``dataset`` takes it, or the reason it is dropped.
    Raises :class:`TypeError` where the official code would stop."""
    if not isinstance(svc, dict):
        return "pred_service_not_an_object"
    window = svc.get("trigger_time_window", "")
    if dataset == "egolife":
        parsed = parse_day_window(window)
        if parsed is None:
            return "pred_unparsable_window"
        day, s, e = parsed
        if days is not None and day not in days:
            return "pred_day_not_evaluated"
        start, end, center = (
            day * SECONDS_PER_DAY + s,
            day * SECONDS_PER_DAY + e,
            day * SECONDS_PER_DAY + (s + e) / 2.0,
        )
    else:
        span = parse_pred_window(window)
        if span is None:
            return "pred_unparsable_window"
        start, end = span
        center = (start + end) / 2.0
    main = official_main_type(dataset, svc.get("service_main_type", ""))
    subtype = official_subtype(dataset, svc.get("service_sub_type", ""))
    if subtype is None:
        return "pred_subtype_skipped"
    return ServiceEvent(unit, subtype, start, end, _text(svc), center=center, main_type=main)


def strict_event(dataset: str, unit: str, svc: Any) -> ServiceEvent | str:
    """One service in the strict reading, or the error."""
    if not isinstance(svc, dict):
        return "pred_service_not_an_object"
    try:
        start, end, center = parse_time_window(
            svc.get("trigger_time_window"), absolute_days=dataset == "egolife"
        )
    except ValueError:
        return "pred_unparsable_window"
    subtype = strict_subtype(svc.get("service_sub_type"))
    if subtype is None:
        return "pred_unknown_subtype"
    return ServiceEvent(unit, subtype, start, end, _text(svc), center=center)


def extract(
    dataset: str,
    sources: dict[str, PredSource],
    evaluated: dict[str, set[int] | None],
    out: Readings,
    keys: tuple[str, ...] = RESPONSE_KEYS,
) -> None:
    """Services of every source into ``out`` (official: only units in ``evaluated``, an EgoLife
    service only on its unit's days, None meaning all; strict: all)."""
    for unit, src in sources.items():
        days = evaluated.get(unit)
        for e in src.events:
            out.strict.append(e)
            if unit not in evaluated:
                out.dropped.add("pred_unit_not_evaluated", unit)
            elif dataset == "egolife" and days is not None and e.center // SECONDS_PER_DAY not in days:
                out.dropped.add("pred_day_not_evaluated", unit)
            else:
                out.official.append(e)
        for where, file_day, entry in src.entries:
            services, error = strict_services(entry, keys)
            if error:
                out.errors.add(error, where)
            for k, svc in enumerate(services):
                _keep(strict_event(dataset, unit, svc), out.strict, out.errors, f"{where}.services[{k}]")
            if unit not in evaluated:
                out.dropped.add("pred_unit_not_evaluated", where, max(len(services), 1))
            elif dataset == "egolife" and file_day is not None and days is not None and file_day not in days:
                out.dropped.add("pred_day_not_evaluated", where, max(len(services), 1))
            else:
                _official_entry(dataset, unit, where, entry, days, out, keys)


def _official_entry(
    dataset: str,
    unit: str,
    where: str,
    entry: Any,
    days: set[int] | None,
    out: Readings,
    keys: tuple[str, ...],
) -> None:
    try:
        services, reason = official_services(entry, keys)
    except TypeError as exc:
        out.crashes.add(f"pred: {exc}", where)
        return
    if reason:
        out.dropped.add(reason, where)
    for k, svc in enumerate(services):
        at = f"{where}.services[{k}]"
        try:
            ev = official_event(dataset, unit, svc, days)
        except TypeError as exc:
            out.crashes.add(f"pred: {exc}", at)
            continue
        _keep(ev, out.official, out.dropped, at)


def _keep(ev: ServiceEvent | str, into: list[ServiceEvent], tally: Tally, where: str) -> None:
    if isinstance(ev, str):
        tally.add(ev, where)
    else:
        into.append(ev)
