"""The EgoServe release -> ``egoserve`` streams whose targets carry the service subtype as category.

``python -m data_builders build source=egoserve annotations=/data/EgoServe_release videos=/data/egoserve_videos out=/data/built/egoserve``

Format, as the benchmark's own release evaluator reads it (``SitongGong/EgoMemo``
``evaluation/combined_proactive_evaluation_release.py``: ``ego_extract_gt_release``,
``holo_extract_gt_release``; windows parsed as in ``evaluation/holoassist_proactive_evaluation_subtype.py``;
CaptainCook4D items as in ``evaluation/captioncook4d_proactive_evaluation_subtype.py``, written by
``dataset_annotation/data_rectified/captaincook4d/consolidate_error_dialogue.py``):

- ``EgoLife/<PERSON>/{instant,short_term,long_term,episodic}.json``: lists of ``{"sub_type"
  (snake case), "current_time_window": "DAY1 11:09:42-11:10:00", "proactive_dialogue" | "dialogue":
  [{"role", "utterance"}], ...}`` (a ``time_window`` key is read when ``current_time_window`` is
  absent, as the generation schema of tool-use events names it);
- ``HoloAssist/holoassist_service_annotations.json``: ``{video_name: {"instant" | "short_term":
  {sub_type: [{"time_window", "dialogue", "observation", ...}]}}}``, windows as ``19.5-21.4``,
  ``00:00:19.5-00:00:21.4`` or ``01:24.1-01:24.7``;
- ``CaptainCook4D/captaincook4d_service_annotations.json``: ``[{"recording_id", "activity_id",
  "step_annotations", "dialogue": {"items": [{"step_id", "description", "start_time", "end_time",
  "error_tag", "service_type": {"main", "sub"}, "dialogue", ...}]}}]``.

Target content = the first assistant turn; an event whose first assistant turn is empty is no
event for the benchmark and is left out (``events_without_reply``). ``category`` = the subtype in
snake case (an unknown subtype is dropped and listed, as the evaluator skips it); ``window`` = the
trigger window (inverted by < 0.5 s: repaired); ``time`` = its center. ``meta`` holds ``dataset``
and ``unit`` (person / video / recording). A bad event drops alone, never its whole video.

EgoLife times are absolute (``day * 86400 + seconds of day``). EgoLife videos come as 30 s chunks
``<PERSON>/DAY<d>/DAY<d>_<PERSON>_<HHMMSSFF>.mp4`` (FF read as hundredths of a second) under
``videos/<egolife_dir>``. Each event goes to the chunk holding its window's center; one stream per
chunk with events: clip = the chunk on the absolute axis (its start + probed duration),
``video_offset`` = the chunk's absolute start (file time = record time - video_offset), and windows
cut to the chunk (the original window is kept in ``meta.windows``). HoloAssist (default path: the
HoloAssist release's ``<video_name>/Export_py/Video_pitchshift.mp4`` under ``HoloAssist/``) and
CaptainCook4D: one stream per video / recording on the file's own clock. CaptainCook4D items with
negative times (absent steps) are not targets, as in the benchmark protocol; their count is kept in
``meta.skipped_absent``. The evaluator's list of ten CaptainCook4D recordings it leaves out is not
applied here (training data keeps them).
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from data_builders.records import RecordError, Stream, Target
from data_builders.toolkit import (
    RECORD_EXCEPTIONS,
    BuildInputs,
    ConversionError,
    Pending,
    SourceSpec,
    Tally,
    clip_end_from,
    clock_seconds,
    each_record,
    event_span,
    load_json,
    record_reason,
    require,
    seconds,
)
from data_builders.video import VideoInfo

SUBTYPES = (
    "safety",
    "tool_use",
    "next_step_guidance",
    "error_recovery",
    "resource_reminder",
    "memory_recall",
    "task_reminder",
    "habit_coaching",
    "memory_link_contextual",
    "routine_optimization",
)
EGOLIFE_WINDOW = re.compile(
    r"DAY(\d+)\s*[-\s]\s*(\d{1,2}:\d{2}:\d{2}(?:\.\d+)?)\s*[-–]\s*(\d{1,2}:\d{2}:\d{2}(?:\.\d+)?)"
)
CHUNK = re.compile(r"^DAY(\d+)_(.+)_(\d{2})(\d{2})(\d{2})(\d{2})\.mp4$")
DAY = 86400.0


@dataclass
class EgoServeSourceConfig:
    """Keys of ``source=egoserve``."""

    egolife_dir: str = "EgoLife"
    """Folder under ``videos`` with ``<PERSON>/DAY<d>/`` chunk files."""
    holoassist_video_pattern: str = "HoloAssist/{video_name}/Export_py/Video_pitchshift.mp4"
    """HoloAssist video path under ``videos`` (the HoloAssist release's layout)."""
    captaincook4d_video_pattern: str = "CaptainCook4D/{recording_id}_360p.mp4"
    """CaptainCook4D video path under ``videos``."""
    instruction: str = (
        "Assist me proactively while I go about my day: speak up only when I need help "
        "(safety, tools, next steps, mistakes, reminders, habits), otherwise stay silent."
    )
    """The user's instruction at the clip start."""


def subtype(name: str) -> str:
    """Snake-case subtype, checked against the ten EgoServe subtypes.

    >>> subtype("Next-Step Guidance"), subtype("Error-Recovery")
    ('next_step_guidance', 'error_recovery')
    """
    key = re.sub(r"[\s\-]+", "_", str(name).strip().lower())
    if key not in SUBTYPES:
        raise RecordError(f"unknown service subtype {name!r}")
    return key


class NoReply(RecordError):
    """An event whose first assistant turn is empty or absent: no event for the benchmark."""


def utterance(item: dict) -> str:
    """The first assistant turn of an item's dialogue (the benchmark's reference reply)."""
    turns = item.get("proactive_dialogue") or item.get("dialogue") or []
    for turn in turns if isinstance(turns, list) else []:
        if isinstance(turn, dict) and turn.get("role") == "assistant":
            text = str(turn.get("utterance") or "").strip()
            if not text:
                raise NoReply("the first assistant turn is empty")
            return text
    raise NoReply("no assistant turn in the dialogue")


def egolife_window(text: str) -> tuple[float, float]:
    """Absolute (start, end) seconds of ``DAYd HH:MM:SS-HH:MM:SS``.

    >>> egolife_window("DAY1 11:09:42-11:10:00")
    (126582.0, 126600.0)
    """
    m = EGOLIFE_WINDOW.search(str(text))
    if not m:
        raise RecordError(f"cannot parse EgoLife time window {text!r}")
    day = int(m.group(1)) * DAY
    return day + clock_seconds(m.group(2), "window"), day + clock_seconds(m.group(3), "window")


def holoassist_window(text: str) -> tuple[float, float]:
    """(start, end) seconds of a HoloAssist window in any of its three forms.

    >>> holoassist_window("19.5-21.4"), holoassist_window("00:00:19.5-00:00:21.4"), holoassist_window("01:24.1-01:24.7")
    ((19.5, 21.4), (19.5, 21.4), (84.1, 84.7))
    """
    parts = re.split(r"\s*[-–]\s*", str(text).strip())
    if len(parts) != 2:
        raise RecordError(f"cannot parse time window {text!r}")
    start, end = (clock_seconds(p, "time_window") if ":" in p else seconds(p, "time_window") for p in parts)
    return start, end


def _event(window: tuple[float, float], item: dict, sub: str, name: str, tally: Tally) -> Target | None:
    """One event's target; ``None`` (counted, or dropped and listed) when it is not one."""
    try:
        category = subtype(sub)
    except RecordError as exc:
        tally.drop(f"{name}: {exc.reason}; event dropped", target=False)
        return None
    try:
        content = utterance(item)
    except NoReply:
        tally.count("events_without_reply")
        return None
    span = event_span(*window, name, tally)
    if span is None:
        return None
    return Target(time=(span[0] + span[1]) / 2, window=span, content=content, category=category)


def _stream(
    sid: str,
    video: str,
    start: float,
    end: float,
    targets: list[Target],
    instruction: str,
    meta: dict,
    offset: float = 0.0,
) -> Stream:
    return Stream(
        id=sid,
        source="egoserve",
        task="egoserve",
        video=video,
        clip_start=start,
        clip_end=end,
        instruction=instruction,
        instruction_time=start,
        targets=sorted(targets, key=lambda t: t.time),
        video_offset=offset,
        meta=meta,
    )


def _chunks(videos: Path, options: EgoServeSourceConfig, person: str) -> list[tuple[float, str]]:
    """(absolute start, root-relative path) of a person's EgoLife chunk files, in time order."""
    chunks = []
    for f in sorted((videos / options.egolife_dir / person).glob("DAY*/*.mp4")):
        m = CHUNK.match(f.name)
        if m and m.group(2) == person:
            d, hh, mm, ss, ff = (int(g) for g in m.group(1, 3, 4, 5, 6))
            chunks.append((d * DAY + hh * 3600 + mm * 60 + ss + ff / 100, f.relative_to(videos).as_posix()))
    return sorted(chunks)


def _egolife(root: Path, videos: Path, options: EgoServeSourceConfig) -> Iterator[Pending | ConversionError]:
    """One stream per EgoLife video chunk with events: per person, the events of every part file
    grouped by the chunk their target falls in."""
    for person_dir in sorted(p for p in (root / "EgoLife").glob("*") if p.is_dir()):
        person = person_dir.name
        chunks = _chunks(videos, options, person)
        groups: dict[int, list[tuple[tuple[float, float], Target]]] = defaultdict(list)
        tallies: dict[int, Tally] = defaultdict(Tally)
        yield from _egolife_events(person_dir, [c[0] for c in chunks], groups, tallies)
        for idx in sorted(groups):
            start, video = chunks[idx]
            make = partial(
                _chunk_stream, start=start, video=video, events=groups[idx], person=person, options=options
            )
            yield Pending(str(person_dir), f"{person}/{Path(video).name}", video, make, tally=tallies[idx])


def _egolife_events(
    person_dir: Path,
    starts: list[float],
    groups: dict[int, list[tuple[tuple[float, float], Target]]],
    tallies: dict[int, Tally],
) -> Iterator[ConversionError]:
    """Read a person's event files into ``groups`` (chunk index -> (window, target)) and their
    counts into ``tallies``; yield an error per event that is not one or fits no chunk."""
    person = person_dir.name
    for part in sorted(person_dir.glob("*.json")):
        items = load_json(part)
        if not isinstance(items, list):
            raise RecordError("expected a list of events", file=part)
        for k, item in enumerate(items):
            rid = f"{person}/{part.stem}[{k}]"
            try:
                text = item.get("current_time_window") if isinstance(item, dict) else None
                text = text or require(item, "time_window")
                window = egolife_window(text)
                tally = Tally()
                target = _event(window, item, require(item, "sub_type"), rid, tally)
                if target is None:
                    reason = "; ".join(tally.dropped) or "the first assistant turn is empty: not an event"
                    yield ConversionError(
                        str(part), rid, reason, scope="event" if tally.dropped else "skipped"
                    )
                    continue
                idx = bisect_right(starts, target.time) - 1
                if idx < 0:
                    raise RecordError(f"no EgoLife video chunk of {person} covers {text}")
                groups[idx].append((window, target))
                tallies[idx].counts.update(tally.counts)
            except RECORD_EXCEPTIONS as exc:
                yield ConversionError(str(part), rid, record_reason(exc))


def _chunk_stream(
    info: VideoInfo | None,
    *,
    start: float,
    video: str,
    events: list[tuple[tuple[float, float], Target]],
    person: str,
    options: EgoServeSourceConfig,
) -> list[Stream]:
    """The stream of one EgoLife chunk (absolute clock: ``video_offset`` = the chunk's start), its
    events' windows cut to the chunk."""
    end = start + info.duration
    targets, windows = [], []
    for (ws, we), target in events:
        lo, hi = target.window
        cut = (max(lo, start), min(hi, end))
        if cut[1] < cut[0]:
            raise RecordError(f"window {ws}-{we} misses the chunk {video}")
        targets.append(replace(target, time=(cut[0] + cut[1]) / 2, window=cut))
        windows.append([ws, we])
    return [
        _stream(
            f"egoserve-egolife-{Path(video).stem}",
            video,
            start,
            end,
            targets,
            options.instruction,
            {
                "dataset": "egolife",
                "unit": person,
                "windows": windows,
                "video_id": f"egolife/{Path(video).stem}",
            },
            offset=start,
        )
    ]


def _holoassist(path: Path, options: EgoServeSourceConfig) -> Iterator[Pending | ConversionError]:
    data = load_json(path)
    if not isinstance(data, dict):
        raise RecordError("expected a dict keyed by video name", file=path)

    def parse(name: str, mains: dict) -> Iterator[Pending]:
        tally, targets = Tally(), []
        if not isinstance(mains, dict):
            raise RecordError(f"expected {{horizon: {{sub_type: [events]}}}}, got {type(mains).__name__}")
        for horizon, subs in sorted(mains.items()):
            for sub, items in sorted((subs or {}).items()):
                for k, item in enumerate(items or []):
                    where = f"{horizon}.{sub}[{k}]"
                    try:
                        window = holoassist_window(require(item, "time_window"))
                    except RecordError as exc:
                        tally.drop(f"{where}: {exc.reason}; event dropped")
                        continue
                    target = _event(window, item, sub, where, tally)
                    if target is not None:
                        targets.append(target)
        video = options.holoassist_video_pattern.format(video_name=name)

        def make(info: VideoInfo | None) -> list[Stream]:
            return [
                _stream(
                    f"egoserve-holoassist-{name}",
                    video,
                    0.0,
                    clip_end_from(info, None, name),
                    targets,
                    options.instruction,
                    {"dataset": "holoassist", "unit": name, "video_id": f"holoassist/{name}"},
                )
            ]

        yield Pending(str(path), name, video, make, lookup=(name,), tally=tally)

    yield from each_record(sorted(data.items()), path, parse)


def _captaincook4d(path: Path, options: EgoServeSourceConfig) -> Iterator[Pending | ConversionError]:
    data = load_json(path)
    if not isinstance(data, list):
        raise RecordError("expected a list of recordings", file=path)

    def parse(rid: str, rec: dict) -> Iterator[Pending]:
        tally, targets, skipped = Tally(), [], 0
        for i, item in enumerate(require(require(rec, "dialogue"), "items")):
            where = f"items[{i}]"
            try:
                start = seconds(require(item, "start_time"), f"{where}.start_time")
                end = seconds(require(item, "end_time"), f"{where}.end_time")
                sub = require(require(item, "service_type"), "sub")
            except RecordError as exc:
                tally.drop(f"{where}: {exc.reason}; event dropped")
                continue
            if start < 0 or end < 0:
                skipped += 1
                continue
            target = _event((start, end), item, sub, where, tally)
            if target is not None:
                targets.append(target)
        video = options.captaincook4d_video_pattern.format(recording_id=rid)

        def make(info: VideoInfo | None) -> list[Stream]:
            return [
                _stream(
                    f"egoserve-captaincook4d-{rid}",
                    video,
                    0.0,
                    clip_end_from(info, None, rid),
                    targets,
                    options.instruction,
                    {
                        "dataset": "captaincook4d",
                        "unit": rid,
                        "skipped_absent": skipped,
                        "video_id": f"captaincook4d/{rid}",
                    },
                )
            ]

        yield Pending(str(path), rid, video, make, lookup=(rid,), tally=tally)

    yield from each_record(
        (
            (str(r.get("recording_id", f"item {k}")) if isinstance(r, dict) else f"item {k}", r)
            for k, r in enumerate(data)
        ),
        path,
        parse,
    )


def build_egoserve(inputs: BuildInputs, options: EgoServeSourceConfig) -> Iterator[Pending | ConversionError]:
    """Streams from whichever of the three release parts exist (see the module docstring)."""
    root = inputs.annotations
    if not root.is_dir():
        raise RecordError("expected the EgoServe release folder", file=root)
    yield from _egolife(root, inputs.videos, options)
    holo = root / "HoloAssist" / "holoassist_service_annotations.json"
    if holo.exists():
        yield from _holoassist(holo, options)
    cook = root / "CaptainCook4D" / "captaincook4d_service_annotations.json"
    if cook.exists():
        yield from _captaincook4d(cook, options)


SPEC = SourceSpec("egoserve", build=build_egoserve, config=EgoServeSourceConfig)
