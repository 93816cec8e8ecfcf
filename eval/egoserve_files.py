"""EgoServe inputs for ``eval.score``: the official release files and prediction format, and stream records.

Ground truth (``--gt``), detected from the path:

- EgoLife: a person folder holding ``instant.json`` / ``short_term.json`` / ``long_term.json`` /
  ``episodic.json`` (lists of events with ``sub_type``, ``current_time_window`` and a
  ``proactive_dialogue`` or ``dialogue``), or a folder of person folders. Unit = the person folder.
  Times are absolute (``day * 86400 + seconds``).
- HoloAssist: a JSON object ``{video: {horizon: {subtype: [{time_window, dialogue}]}}}``. Unit = video.
- CaptainCook4D: a JSON list of ``{recording_id, dialogue: {items: [{start_time, end_time,
  service_type: {main, sub}, dialogue}]}}``. Unit = recording. Items with a negative time are skipped.
- Stream records (``.jsonl``) of task ``egoserve``: unit = record id, subtype = target category.

Predictions (``--pred``): our ``{"id", "replies"}`` lines (subtype = the reply's ``category`` or its
leading ``[tag]``; time = the reply time), or the official format: a JSON list (or JSON Lines) of
entries naming their unit (first of :data:`UNIT_KEYS`) whose response (first of
:data:`RESPONSE_KEYS`) is a list of services or ``{"decision", "finalized_services": {"services"}}``
(``decision: suppressed`` = no services), or a JSON object ``{unit: services or entry}``. A service has
``service_sub_type`` and ``trigger_time_window``; its time is the window's center. Outside EgoLife a
``DAYd`` prefix is a video-relative clock and is dropped.

The message compared by the judge: the first assistant utterance (GT) or ``user_prompt`` (prediction).
Anything unreadable raises :class:`RecordError` naming the file, the record and the reason.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from data_builders.records import RecordError, iter_jsonl
from rewards.egoserve import ABSOLUTE_DAY_DATASETS, ServiceEvent, known_subtype, parse_time_window
from rewards.turns import normalize_category, split_category

EGOLIFE_FILES = ("instant.json", "short_term.json", "long_term.json", "episodic.json")
UNIT_KEYS = ("unit", "id", "video_name", "recording_id", "person", "video_id")
RESPONSE_KEYS = ("gemini_response", "response", "services")


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise RecordError(f"cannot read JSON: {exc}", file=path) from None


def service_subtype(raw: Any, path: str | Path, record: str) -> str:
    """The normalized EgoServe subtype of ``raw`` (e.g. ``Tool Use`` -> ``tool_use``); unknown ones raise."""
    if not isinstance(raw, str) or not known_subtype(normalize_category(raw)):
        raise RecordError(f"unknown service subtype {raw!r}", file=path, record=record)
    return normalize_category(raw)


def _window(raw: Any, dataset: str, path: Path, record: str) -> tuple[float, float]:
    try:
        return parse_time_window(raw, absolute_days=dataset in ABSOLUTE_DAY_DATASETS)
    except ValueError as exc:
        raise RecordError(str(exc), file=path, record=record) from None


def _assistant_message(dialogue: Any) -> str:
    for turn in dialogue or []:
        if isinstance(turn, dict) and turn.get("role") == "assistant":
            return str(turn.get("utterance", ""))
    return ""


def detect_release(path: Path) -> str | None:
    """The dataset of an official release path, or None for stream records (``.jsonl``/parquet)."""
    if path.is_dir():
        if any((path / f).exists() for f in EGOLIFE_FILES) or any(
            (d / f).exists() for d in path.iterdir() if d.is_dir() for f in EGOLIFE_FILES
        ):
            return "egolife"
        return None
    if path.suffix != ".json":
        return None
    data = _json(path)
    if isinstance(data, dict):
        return "holoassist"
    if isinstance(data, list) and (not data or (isinstance(data[0], dict) and "recording_id" in data[0])):
        return "captaincook4d"
    raise RecordError(
        "not an EgoServe release file (expected a HoloAssist object or CaptainCook4D list)", file=path
    )


def _egolife(path: Path) -> list[ServiceEvent]:
    people = (
        [path]
        if any((path / f).exists() for f in EGOLIFE_FILES)
        else sorted(d for d in path.iterdir() if d.is_dir())
    )
    events = []
    for person in people:
        for name in EGOLIFE_FILES:
            file = person / name
            if not file.exists():
                continue
            data = _json(file)
            if not isinstance(data, list):
                raise RecordError("expected a list of events", file=file)
            for i, ev in enumerate(data):
                rec = f"{person.name}[{i}]"
                if not isinstance(ev, dict):
                    raise RecordError("expected an object", file=file, record=rec)
                start, end = _window(ev.get("current_time_window"), "egolife", file, rec)
                text = _assistant_message(ev.get("proactive_dialogue") or ev.get("dialogue"))
                events.append(
                    ServiceEvent(
                        person.name, service_subtype(ev.get("sub_type"), file, rec), start, end, text
                    )
                )
    return events


def _holoassist(path: Path) -> list[ServiceEvent]:
    events = []
    for video, horizons in _json(path).items():
        if not isinstance(horizons, dict):
            raise RecordError("expected {horizon: {subtype: [...]}}", file=path, record=video)
        for horizon, subtypes in horizons.items():
            for sub, items in (subtypes or {}).items():
                subtype = service_subtype(sub, path, f"{video}/{horizon}")
                for i, item in enumerate(items or []):
                    rec = f"{video}/{horizon}/{sub}[{i}]"
                    start, end = _window(item.get("time_window"), "holoassist", path, rec)
                    events.append(
                        ServiceEvent(video, subtype, start, end, _assistant_message(item.get("dialogue")))
                    )
    return events


def _captaincook4d(path: Path) -> list[ServiceEvent]:
    events = []
    for r, rec in enumerate(_json(path)):
        unit = str(rec.get("recording_id", f"#{r}"))
        for i, item in enumerate(((rec.get("dialogue") or {}).get("items")) or []):
            where = f"{unit}/items[{i}]"
            start, end = item.get("start_time"), item.get("end_time")
            if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (start, end)):
                raise RecordError(
                    f"start_time/end_time must be seconds, got {start!r}, {end!r}", file=path, record=where
                )
            if start < 0 or end < 0:
                continue
            if end < start:
                raise RecordError("end_time before start_time", file=path, record=where)
            subtype = service_subtype((item.get("service_type") or {}).get("sub"), path, where)
            events.append(
                ServiceEvent(
                    unit, subtype, float(start), float(end), _assistant_message(item.get("dialogue"))
                )
            )
    return events


RELEASE_READERS = {"egolife": _egolife, "holoassist": _holoassist, "captaincook4d": _captaincook4d}


def load_release_gt(path: str | Path, dataset: str) -> list[ServiceEvent]:
    """Ground-truth services of one dataset's release file or folder."""
    return RELEASE_READERS[dataset](Path(path))


def events_from_replies(unit: str, replies: list, path: Path) -> list[ServiceEvent]:
    """Service events of one ``{"id", "replies"}`` prediction (point windows at the reply times)."""
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
        events.append(
            ServiceEvent(unit, service_subtype(raw, path, f"{unit}/replies[{i}]"), r.time, r.time, text)
        )
    return events


def _services(entry: Any, path: Path, record: str) -> list:
    if isinstance(entry, list):
        return entry
    if not isinstance(entry, dict):
        raise RecordError("expected a list of services or an entry object", file=path, record=record)
    if "service_sub_type" in entry:
        return [entry]
    response = next((entry[k] for k in RESPONSE_KEYS if k in entry), entry)
    if isinstance(response, list):
        return response
    if isinstance(response, dict):
        if response.get("decision") == "suppressed":
            return []
        if "finalized_services" in response:
            return (response["finalized_services"] or {}).get("services") or []
        if "services" in response:
            return response["services"] or []
    raise RecordError(
        f"no services found (expected one of {', '.join(RESPONSE_KEYS)})", file=path, record=record
    )


def load_official_predictions(path: str | Path, dataset: str) -> list[ServiceEvent]:
    """Predicted services from the official prediction format (see the module docstring)."""
    path = Path(path)
    if path.suffix == ".jsonl":
        data: Any = [row for _, row in iter_jsonl(path)]
    else:
        data = _json(path)
    if isinstance(data, dict):
        entries = [(str(unit), entry) for unit, entry in data.items()]
    elif isinstance(data, list):
        entries = []
        for i, entry in enumerate(data):
            key = next((k for k in UNIT_KEYS if isinstance(entry, dict) and k in entry), None)
            if key is None:
                raise RecordError(
                    f"entry names no unit (expected one of {', '.join(UNIT_KEYS)})",
                    file=path,
                    record=f"entry {i}",
                )
            entries.append((str(entry[key]), entry))
    else:
        raise RecordError("expected a JSON list or object of prediction entries", file=path)
    events = []
    for unit, entry in entries:
        for j, svc in enumerate(_services(entry, path, unit)):
            rec = f"{unit}/services[{j}]"
            if not isinstance(svc, dict):
                raise RecordError("expected a service object", file=path, record=rec)
            start, end = _window(svc.get("trigger_time_window"), dataset, path, rec)
            subtype = service_subtype(svc.get("service_sub_type"), path, rec)
            events.append(ServiceEvent(unit, subtype, start, end, str(svc.get("user_prompt", ""))))
    return events


def is_official_prediction_file(path: str | Path) -> bool:
    """Whether ``--pred`` is in the official format (not ``{"id", "replies"}`` lines)."""
    path = Path(path)
    if path.suffix != ".jsonl":
        return True
    for _, row in iter_jsonl(path):
        return not (isinstance(row, dict) and "replies" in row)
    return False
