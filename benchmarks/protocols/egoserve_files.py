"""EgoServe release files for ``eval.score``: the ground truth, read with the prediction files
(``benchmarks.protocols.egoserve_preds``) into the official and the strict view of one dataset.

Ground truth (``--gt``), detected from the path:

- EgoLife: a person folder holding ``instant.json`` / ``short_term.json`` / ``long_term.json`` /
  ``episodic.json`` (lists of events with ``sub_type``, ``current_time_window`` and a
  ``proactive_dialogue`` or ``dialogue``), or a folder of person folders. Unit = the person;
  times are absolute (``day * 86400 + seconds``).
- HoloAssist: one JSON object ``{video: {instant: {safety, tool_use}, short_term: {error_recovery,
  next_step_guidance, resource_reminder}}}`` of lists of ``{time_window, dialogue}``. Unit = video.
- CaptainCook4D: a JSON list of ``{recording_id, dialogue: {items: [{start_time, end_time,
  service_type: {main, sub}, dialogue}]}}``. Unit = recording.
- the release root (holding ``EgoLife/``, ``HoloAssist/``, ``CaptainCook4D/``), paired with a
  prediction root holding EgoMemo's ``egolife_results/``, ``holoassist_rebuttal/`` and
  ``captioncook4d_rebuttal/``: all three datasets (:func:`release_pairs`).

The official view keeps what the official evaluator keeps (docs/egoserve.md): the GT of units
that have a prediction file (EgoLife: the person-days among A1_JAKE, A4_LUCIA, A5_KATRINA and
DAY1-DAY5), events whose window parses and whose first assistant utterance is not empty, EgoLife
events with one of the ten ``sub_type`` keys, HoloAssist events in the five slots above; the
strict view counts every event it can read. The GT message is the first assistant utterance.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.protocols.egoserve_preds import (
    EGOLIFE_DAYS,
    EGOLIFE_PERSONS,
    RESPONSE_KEYS,
    RESPONSE_NAME,
    PredSource,
    Readings,
    Tally,
    extract,
    file_sources,
    folder_sources,
    load_json,
)
from data_builders.records import RecordError
from infra.registry import Registry
from metrics.egoserve import MAIN_TYPE, SECONDS_PER_DAY, ServiceEvent
from metrics.egoserve_rules import (
    official_main_type,
    official_subtype,
    parse_day_window,
    parse_time_window,
    parse_video_window,
    strict_subtype,
)

EGOLIFE_FILES = ("instant.json", "short_term.json", "long_term.json", "episodic.json")
#: The (horizon, subtype) slots of the HoloAssist file the official evaluator reads.
HOLOASSIST_SLOTS = (
    ("instant", "safety"),
    ("instant", "tool_use"),
    ("short_term", "error_recovery"),
    ("short_term", "next_step_guidance"),
    ("short_term", "resource_reminder"),
)
RELEASE_LAYOUT = {
    "egolife": ("EgoLife", "egolife_results"),
    "holoassist": ("HoloAssist/holoassist_service_annotations.json", "holoassist_rebuttal"),
    "captaincook4d": ("CaptainCook4D/captaincook4d_service_annotations.json", "captioncook4d_rebuttal"),
}


@dataclass
class EventGroup:
    """One dataset's events in the official and the strict view, and what reading them counted."""

    dataset: str
    gt: list[ServiceEvent]
    pred: list[ServiceEvent]
    strict_gt: list[ServiceEvent] | None = None
    """None: the same as ``gt``."""
    strict_pred: list[ServiceEvent] | None = None
    dropped: Tally = field(default_factory=Tally)
    errors: Tally = field(default_factory=Tally)
    crashes: Tally = field(default_factory=Tally)


def official_message(dialogue: Any) -> str:
    """The first assistant utterance, stripped ("" when there is none), read as the official code
    reads it: :class:`TypeError` where that code would stop (a turn that is no object, a null text)."""
    if dialogue is None or isinstance(dialogue, (int, float)):
        raise TypeError(f"a dialogue must be a list, got {type(dialogue).__name__}")
    for turn in dialogue:
        if not isinstance(turn, dict):
            raise TypeError("a dialogue turn must be an object")
        if turn.get("role") == "assistant":
            text = turn.get("utterance", "")
            if not isinstance(text, str):
                raise TypeError(f"an utterance must be a string, got {type(text).__name__}")
            return text.strip()
    return ""


def strict_message(dialogue: Any) -> str:
    """The first assistant utterance that is text (for the judge; detection does not need it)."""
    for turn in dialogue if isinstance(dialogue, list) else []:
        if (
            isinstance(turn, dict)
            and turn.get("role") == "assistant"
            and isinstance(turn.get("utterance"), str)
        ):
            return turn["utterance"].strip()
    return ""


def detect_release(path: Path) -> str | None:
    """The dataset of a release path, ``"release"`` for the release root, None for stream records."""
    if path.is_dir():
        if any((path / gt_rel).exists() for gt_rel, _ in RELEASE_LAYOUT.values()):
            return "release"
        if (
            path.name == "EgoLife"
            or any((path / f).exists() for f in EGOLIFE_FILES)
            or any((d / f).exists() for d in path.iterdir() if d.is_dir() for f in EGOLIFE_FILES)
        ):
            return "egolife"
        return None
    if path.suffix != ".json":
        return None
    data = load_json(path)
    if isinstance(data, dict):
        return "holoassist"
    if isinstance(data, list) and (not data or (isinstance(data[0], dict) and "recording_id" in data[0])):
        return "captaincook4d"
    raise RecordError(
        "not an EgoServe release file (expected a HoloAssist object or CaptainCook4D list)", file=path
    )


def release_pairs(gt_root: Path, pred_root: Path) -> list[tuple[str, Path, Path]]:
    """(dataset, GT path, prediction folder) of a release root and a prediction root, for every
    dataset whose GT is there (its prediction folder may be missing: no predictions)."""
    out = [
        (ds, gt_root / gt_rel, pred_root / pred_rel)
        for ds, (gt_rel, pred_rel) in RELEASE_LAYOUT.items()
        if (gt_root / gt_rel).exists()
    ]
    if not any(p.is_dir() for _, _, p in out):
        raise RecordError(
            f"no dataset folder ({', '.join(v[1] for v in RELEASE_LAYOUT.values())}) in the prediction root",
            file=pred_root,
        )
    return out


# ---------------------------------------------------------------------------------------------
# Ground-truth readers: (path, official prediction units, readings) -> events into both views


def _egolife_gt(path: Path, units: dict[str, set[int] | None], out: Readings) -> None:
    people = (
        [path]
        if any((path / f).exists() for f in EGOLIFE_FILES)
        else sorted(p for p in path.iterdir() if p.is_dir())
    )
    for person_dir in people:
        person = person_dir.name
        days = units.get(person) or set()
        for name in EGOLIFE_FILES:
            file = person_dir / name
            if not file.exists():
                continue
            try:
                data = load_json(file)
            except RecordError:
                data = {}  # the official code skips a file it cannot load
            if not isinstance(data, list):
                if person in EGOLIFE_PERSONS and days and not isinstance(data, (dict, str)):
                    out.crashes.add("gt: an EgoLife file must be a list", str(file))
                out.dropped.add("gt_unreadable_file", str(file))
                out.errors.add("gt_unreadable_file", str(file))
                continue
            for i, ev in enumerate(data):
                where = f"{file}[{i}]"
                _egolife_strict(person, ev, where, out)
                if person not in EGOLIFE_PERSONS:
                    out.dropped.add("gt_person_not_evaluated", where)
                elif not days:
                    out.dropped.add("gt_unit_without_predictions", where)
                else:
                    _guard(out, where, _egolife_official, person, ev, days, where, out)


def _egolife_official(person: str, ev: Any, days: set[int], where: str, out: Readings) -> None:
    if not isinstance(ev, dict):
        return out.dropped.add("gt_not_an_object", where)
    sub = ev.get("sub_type")
    if sub not in MAIN_TYPE:
        return out.dropped.add("gt_unknown_subtype", where)
    parsed = parse_day_window(ev.get("current_time_window", ""))
    if parsed is None:
        return out.dropped.add("gt_unparsable_window", where)
    day, s, e = parsed
    if day not in days:
        reason = "gt_unit_without_predictions" if day in EGOLIFE_DAYS else "gt_day_not_evaluated"
        return out.dropped.add(reason, where)
    text = official_message(ev.get("proactive_dialogue") or ev.get("dialogue") or [])
    if not text:
        return out.dropped.add("gt_empty_message", where)
    base = day * SECONDS_PER_DAY
    out.official.append(ServiceEvent(person, sub, base + s, base + e, text, center=base + (s + e) / 2.0))


def _egolife_strict(person: str, ev: Any, where: str, out: Readings) -> None:
    if not isinstance(ev, dict):
        return out.errors.add("gt_not_an_object", where)
    sub = strict_subtype(ev.get("sub_type"))
    if sub is None:
        return out.errors.add("gt_unknown_subtype", where)
    try:
        start, end, center = parse_time_window(ev.get("current_time_window"), absolute_days=True)
    except ValueError:
        return out.errors.add("gt_unparsable_window", where)
    text = strict_message(ev.get("proactive_dialogue") or ev.get("dialogue"))
    out.strict.append(ServiceEvent(person, sub, start, end, text, center=center))


def _holoassist_gt(path: Path, units: dict[str, set[int] | None], out: Readings) -> None:
    data = load_json(path)
    if not isinstance(data, dict):
        raise RecordError("expected a JSON object {video: {horizon: {subtype: [...]}}}", file=path)
    for video, horizons in data.items():
        if not horizons:
            continue
        if not isinstance(horizons, dict):
            out.errors.add("gt_not_an_object", f"{path}[{video}]")
            if video in units:
                out.crashes.add("gt: a video entry must be an object", f"{path}[{video}]")
            continue
        for horizon, subtypes in horizons.items():
            if not isinstance(subtypes, dict):
                if subtypes:
                    out.errors.add("gt_not_an_object", f"{path}[{video}][{horizon}]")
                    if video in units and horizon in dict(HOLOASSIST_SLOTS):
                        out.crashes.add("gt: a horizon must be an object", f"{path}[{video}][{horizon}]")
                continue
            for sub, items in subtypes.items():
                where = f"{path}[{video}][{horizon}][{sub}]"
                slot = (horizon, sub) in HOLOASSIST_SLOTS
                if not isinstance(items, list):
                    if items:
                        out.errors.add("gt_not_a_list", where)
                        if slot and video in units:
                            out.crashes.add("gt: a subtype slot must be a list", where)
                    continue
                for i, ev in enumerate(items):
                    at = f"{where}[{i}]"
                    _holoassist_strict(video, sub, ev, at, out)
                    if not slot:
                        out.dropped.add("gt_outside_the_five_slots", at)
                    elif video not in units:
                        out.dropped.add("gt_unit_without_predictions", at)
                    else:
                        _guard(out, at, _holoassist_official, video, sub, ev, at, out)


def _holoassist_official(video: str, sub: str, ev: Any, where: str, out: Readings) -> None:
    if not isinstance(ev, dict):
        raise TypeError("an event must be an object")
    span = parse_video_window(ev.get("time_window", ""))
    if span is None:
        return out.dropped.add("gt_unparsable_window", where)
    text = official_message(ev.get("dialogue", []))
    if not text:
        return out.dropped.add("gt_empty_message", where)
    out.official.append(ServiceEvent(video, sub, span[0], span[1], text))


def _holoassist_strict(video: str, sub: Any, ev: Any, where: str, out: Readings) -> None:
    subtype = strict_subtype(sub)
    if not isinstance(ev, dict):
        return out.errors.add("gt_not_an_object", where)
    if subtype is None:
        return out.errors.add("gt_unknown_subtype", where)
    try:
        start, end, center = parse_time_window(ev.get("time_window"))
    except ValueError:
        return out.errors.add("gt_unparsable_window", where)
    out.strict.append(
        ServiceEvent(video, subtype, start, end, strict_message(ev.get("dialogue")), center=center)
    )


def _captaincook4d_gt(path: Path, units: dict[str, set[int] | None], out: Readings) -> None:
    data = load_json(path)
    if not isinstance(data, list):
        raise RecordError("expected a JSON list of recordings", file=path)
    for r, rec in enumerate(data):
        where = f"{path}[{r}]"
        if not isinstance(rec, dict):
            out.errors.add("gt_not_an_object", where)
            out.crashes.add("gt: a recording must be an object", where)
            continue
        unit = rec.get("recording_id", "")
        dialogue = rec.get("dialogue", {})
        items = dialogue.get("items", []) if isinstance(dialogue, dict) else None
        if not isinstance(items, list):
            out.errors.add("gt_not_a_list", f"{where}.dialogue.items")
            if isinstance(unit, str) and unit in units and items not in ({}, ""):
                out.crashes.add("gt: dialogue.items must be a list", where)
            continue
        for i, item in enumerate(items):
            at = f"{path}[{unit}].items[{i}]"
            _captaincook4d_strict(str(unit), item, at, out)
            if not (isinstance(unit, str) and unit in units):
                out.dropped.add("gt_unit_without_predictions", at)
            else:
                _guard(out, at, _captaincook4d_official, unit, item, at, out)


def _number(value: Any) -> float:
    if isinstance(value, (int, float)):  # bool is an int, as in the official comparison
        return value
    raise TypeError(f"a time must be a number, got {type(value).__name__}")


def _captaincook4d_official(unit: str, item: Any, where: str, out: Readings) -> None:
    if not isinstance(item, dict):
        raise TypeError("an item must be an object")
    start, end = _number(item.get("start_time", -1.0)), _number(item.get("end_time", -1.0))
    if start < 0 or end < 0:
        return out.dropped.add("gt_negative_time", where)
    kind = item.get("service_type", {})
    if not isinstance(kind, dict):
        raise TypeError("service_type must be an object")
    main = official_main_type("captaincook4d", kind.get("main", ""))
    sub = official_subtype("captaincook4d", kind.get("sub", ""), prediction=False)
    text = official_message(item.get("dialogue", []))
    if not text:
        return out.dropped.add("gt_empty_message", where)
    out.official.append(ServiceEvent(unit, sub, start, end, text, main_type=main))


def _captaincook4d_strict(unit: str, item: Any, where: str, out: Readings) -> None:
    if not isinstance(item, dict):
        return out.errors.add("gt_not_an_object", where)
    start, end = item.get("start_time"), item.get("end_time")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 for v in (start, end)):
        return out.errors.add("gt_no_time", where)
    if end < start:
        return out.errors.add("gt_unparsable_window", where)
    kind = item.get("service_type")
    sub = strict_subtype(kind.get("sub") if isinstance(kind, dict) else None)
    if sub is None:
        return out.errors.add("gt_unknown_subtype", where)
    out.strict.append(ServiceEvent(unit, sub, float(start), float(end), strict_message(item.get("dialogue"))))


def _guard(out: Readings, where: str, read: Callable[..., None], *args: Any) -> None:
    """Run one official GT read; where the official code would stop, count it and go on."""
    try:
        read(*args)
    except TypeError as exc:
        out.crashes.add(f"gt: {exc}", where)


#: How each dataset of the release reads its ground truth: ``fn(gt_path, units, gts)``.
GT_READERS = Registry(
    "EgoServe ground-truth reader",
    {
        "egolife": "benchmarks.protocols.egoserve_files:_egolife_gt",
        "holoassist": "benchmarks.protocols.egoserve_files:_holoassist_gt",
        "captaincook4d": "benchmarks.protocols.egoserve_files:_captaincook4d_gt",
    },
)


def read_release(
    gt_path: str | Path,
    pred_path: str | Path,
    dataset: str,
    model_suffix: str | None = None,
    response_name: str = RESPONSE_NAME,
    missing_ok: bool = False,
) -> EventGroup:
    """One dataset's ground truth and predictions in both views, with what was dropped and why
    (``missing_ok``: a missing prediction path is a dataset without predictions)."""
    gt_path, pred_path = Path(gt_path), Path(pred_path)
    preds, gts = Readings(), Readings()
    folder = pred_path.is_dir()
    if not pred_path.exists():
        if not missing_ok:
            raise RecordError("prediction file or folder does not exist", file=pred_path)
        preds.dropped.add("dataset_without_prediction_folder", str(pred_path))
        sources = {}
    elif folder:
        sources = folder_sources(pred_path, dataset, model_suffix, response_name, preds)
    else:
        sources = file_sources(pred_path, dataset, preds)
    units = _official_units(dataset, sources)
    GT_READERS[dataset](gt_path, units, gts)
    if dataset == "holoassist":  # only videos with at least one valid GT event are evaluated
        with_gt = {e.unit for e in gts.official}
        units = {u: d for u, d in units.items() if u in with_gt}
    extract(dataset, sources, units, preds, keys=("gemini_response",) if folder else RESPONSE_KEYS)
    group = EventGroup(dataset, gts.official, preds.official, gts.strict, preds.strict)
    for reading in (gts, preds):
        group.dropped.update(reading.dropped)
        group.errors.update(reading.errors)
        group.crashes.update(reading.crashes)
    return group


def _official_units(dataset: str, sources: dict[str, PredSource]) -> dict[str, set[int] | None]:
    """Units the official evaluator reads: EgoLife default persons with their days among DAY1-5
    (None: every day), every unit with a prediction file elsewhere."""
    if dataset != "egolife":
        return {u: None for u in sources}
    units = {}
    for unit, src in sources.items():
        days = set(EGOLIFE_DAYS) if src.days is None else src.days & EGOLIFE_DAYS
        if unit in EGOLIFE_PERSONS and days:
            units[unit] = days
    return units
