"""The EgoServe release -> ``egoserve`` streams whose targets carry the service subtype as category.

``python -m data_builders build source=egoserve annotations=/data/EgoServe_release videos=/data/egoserve_videos out=/data/built/egoserve``

Input: the release folder (schema reconstructed from the benchmark's reader code):
``EgoLife/<PERSON>/{instant,short_term,episodic,long_term}.json`` (lists of ``{"sub_type",
"current_time_window": "DAY1 11:09:42-11:10:00", "proactive_dialogue" | "dialogue": [...]}``),
``HoloAssist/holoassist_service_annotations.json`` (``{video: {main: {sub_type: [{"time_window",
"dialogue"}]}}}``, windows as ``19.5-21.4``, ``00:00:19.5-00:00:21.4`` or ``01:24.1-01:24.7``) and
``CaptainCook4D/captaincook4d_service_annotations.json`` (``[{"recording_id", "dialogue": {"items":
[{"start_time", "end_time", "service_type": {"sub"}, "dialogue"}]}}]``). Target content = the first
assistant utterance; ``category`` = the subtype in snake case; ``window`` = the trigger window;
``time`` = its center. ``meta`` holds ``dataset`` and ``unit`` (person / video / recording).

EgoLife times are absolute (``day * 86400 + seconds of day``). EgoLife videos come as 30 s chunks
``<PERSON>/DAY<d>/DAY<d>_<PERSON>_<HHMMSSFF>.mp4`` (FF read as hundredths of a second) under
``videos/<egolife_dir>``. Each event goes to the chunk holding its window's center; one stream per
chunk with events: clip = the chunk on the absolute axis (its start + probed duration),
``video_offset`` = the chunk's absolute start (file time = record time - video_offset), and windows
cut to the chunk (the original window is kept in ``meta.windows``). HoloAssist and CaptainCook4D:
one stream per video / recording on the file's own clock. CaptainCook4D items with negative times
(absent steps) are not targets, as in the benchmark protocol; their count is kept in
``meta.skipped_absent``.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from data_builders.records import RecordError, Stream, Target
from data_builders.registry import (
    BuildInputs,
    ConversionError,
    Pending,
    check_span,
    clip_end_from,
    clock_seconds,
    each_record,
    load_json,
    register_source,
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
class EgoServeOptions:
    """Keys of ``source=egoserve``."""

    egolife_dir: str = "EgoLife"
    """Folder under ``videos`` with ``<PERSON>/DAY<d>/`` chunk files."""
    holoassist_video_pattern: str = "HoloAssist/{video_name}.mp4"
    """HoloAssist video path under ``videos``."""
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


def utterance(item: dict) -> str:
    """The first assistant utterance of an item's dialogue."""
    turns = item.get("proactive_dialogue") or item.get("dialogue") or []
    for turn in turns if isinstance(turns, list) else []:
        if isinstance(turn, dict) and turn.get("role") == "assistant" and turn.get("utterance"):
            return str(turn["utterance"])
    raise RecordError("no assistant utterance in the dialogue")


def egolife_window(text: str) -> tuple[float, float]:
    """Absolute (start, end) seconds of ``DAYd HH:MM:SS-HH:MM:SS``.

    >>> egolife_window("DAY1 11:09:42-11:10:00")
    (126582.0, 126600.0)
    """
    m = EGOLIFE_WINDOW.search(str(text))
    if not m:
        raise RecordError(f"cannot parse EgoLife time window {text!r}")
    day = int(m.group(1)) * DAY
    start, end = day + clock_seconds(m.group(2), "window"), day + clock_seconds(m.group(3), "window")
    check_span(start, end, "current_time_window")
    return start, end


def holoassist_window(text: str) -> tuple[float, float]:
    """(start, end) seconds of a HoloAssist window in any of its three forms.

    >>> holoassist_window("19.5-21.4"), holoassist_window("00:00:19.5-00:00:21.4"), holoassist_window("01:24.1-01:24.7")
    ((19.5, 21.4), (19.5, 21.4), (84.1, 84.7))
    """
    parts = re.split(r"\s*[-–]\s*", str(text).strip())
    if len(parts) != 2:
        raise RecordError(f"cannot parse time window {text!r}")
    start, end = (clock_seconds(p, "time_window") if ":" in p else seconds(p, "time_window") for p in parts)
    check_span(start, end, "time_window")
    return start, end


def _target(window: tuple[float, float], item: dict, sub: str) -> Target:
    return Target(
        time=(window[0] + window[1]) / 2, window=window, content=utterance(item), category=subtype(sub)
    )


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


def _egolife(root: Path, videos: Path, options: EgoServeOptions) -> Iterator[Pending | ConversionError]:
    for person_dir in sorted(p for p in (root / "EgoLife").glob("*") if p.is_dir()):
        person = person_dir.name
        chunks = []
        for f in sorted((videos / options.egolife_dir / person).glob("DAY*/*.mp4")):
            m = CHUNK.match(f.name)
            if m and m.group(2) == person:
                d, hh, mm, ss, ff = (int(g) for g in m.group(1, 3, 4, 5, 6))
                chunks.append(
                    (d * DAY + hh * 3600 + mm * 60 + ss + ff / 100, f.relative_to(videos).as_posix())
                )
        starts = [c[0] for c in chunks]
        groups: dict[int, list[tuple[tuple[float, float], dict, str]]] = defaultdict(list)
        for part in sorted(person_dir.glob("*.json")):
            items = load_json(part)
            for k, item in enumerate(items if isinstance(items, list) else []):
                rid = f"{person}/{part.stem}[{k}]"
                try:
                    window = egolife_window(require(item, "current_time_window"))
                    sub = subtype(require(item, "sub_type"))
                    utterance(item)
                    idx = bisect_right(starts, (window[0] + window[1]) / 2) - 1
                    if idx < 0:
                        raise RecordError(
                            f"no EgoLife video chunk of {person} covers {item['current_time_window']}"
                        )
                    groups[idx].append((window, item, sub))
                except ValueError as exc:
                    yield ConversionError(str(part), rid, str(exc))
        for idx in sorted(groups):
            start, video = chunks[idx]

            def make(
                info: VideoInfo | None, start=start, video=video, events=groups[idx], person=person
            ) -> list[Stream]:
                end = start + info.duration
                targets, windows = [], []
                for (ws, we), item, sub in events:
                    cut = (max(ws, start), min(we, end))
                    if cut[1] < cut[0]:
                        raise RecordError(f"window {ws}-{we} misses the chunk {video}")
                    targets.append(_target(cut, item, sub))
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

            yield Pending(str(person_dir), f"{person}/{Path(video).name}", video, make)


def _holoassist(path: Path, options: EgoServeOptions) -> Iterator[Pending | ConversionError]:
    data = load_json(path)

    def parse(name: str, mains: dict) -> Iterator[Pending]:
        targets = []
        for _horizon, subs in sorted(mains.items()):
            for sub, items in sorted((subs or {}).items()):
                for item in items or []:
                    targets.append(_target(holoassist_window(require(item, "time_window")), item, sub))
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

        yield Pending(str(path), name, video, make)

    yield from each_record(sorted(data.items()), path, parse)


def _captaincook4d(path: Path, options: EgoServeOptions) -> Iterator[Pending | ConversionError]:
    data = load_json(path)

    def parse(rid: str, rec: dict) -> Iterator[Pending]:
        targets, skipped = [], 0
        for i, item in enumerate(require(require(rec, "dialogue"), "items")):
            start = seconds(require(item, "start_time"), f"items[{i}].start_time")
            end = seconds(require(item, "end_time"), f"items[{i}].end_time")
            if start < 0 or end < 0:
                skipped += 1
                continue
            check_span(start, end, f"items[{i}]")
            targets.append(_target((start, end), item, require(require(item, "service_type"), "sub")))
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

        yield Pending(str(path), rid, video, make)

    yield from each_record(
        (
            (str(r.get("recording_id", f"item {k}")) if isinstance(r, dict) else f"item {k}", r)
            for k, r in enumerate(data)
        ),
        path,
        parse,
    )


@register_source("egoserve", EgoServeOptions)
def build_egoserve(inputs: BuildInputs, options: EgoServeOptions) -> Iterator[Pending | ConversionError]:
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
