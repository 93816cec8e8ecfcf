"""Ego4D narrations -> ``event_monitoring`` streams: "tell me when <event>", targets at its narrations.

``python -m data_builders build source=ego4d_events annotations=/data/ego4d/v2/annotations/narration.json videos=/data/ego4d/v2/full_scale out=/data/built/ego4d_events``

Format, as Ego4D's own code reads it (``facebookresearch/Ego4d``:
``ego4d/research/clep/preprocess/ego4d_data.py`` ``get_narrations``,
``viz/narrations/recipes/3_prepare_input.sh``; download layout in ``ego4d/cli/README.md``):
``narration.json`` is a dict keyed by video uid; each video has ``status`` and
``narration_pass_1`` and/or ``narration_pass_2`` with ``narrations`` = ``[{"timestamp_sec",
"timestamp_frame", "narration_text", "annotation_uid"}]`` (point times in seconds on the
canonical video, not sorted) and ``summaries``. Videos are ``<out>/v2/full_scale/<video_uid>.mp4``.
One annotator pass is used per video, never merged: the first pass in ``pass_preference`` that has
narrations. A video with no narration and ``status`` ``redacted`` is skipped and counted
(``skipped_records``), not an error.

Durations: ``ego4d.json`` (the CLI's metadata file, ``videos[].duration_sec``; found next to the
annotations folder or given as ``metadata``) states each video's length, so no video needs a
probe; without it the videos are probed.

Each video is cut into clips of ``clip_length`` seconds ``[w*L, (w+1)*L)``; a last piece shorter
than ``min_clip`` is not used. Narration text is normalized (``#C C`` -> "the camera wearer", also
mid-sentence; other ``#`` tags dropped, lower case, no final period); ``#unsure`` narrations are
neither asked for nor matched. Per clip (choices seeded by ``seed``, video and clip index):

- **single-event** queries (up to ``queries_per_clip``): "Tell me when <event>." with a target at
  every narration of that exact event inside the clip;
- **category** queries (up to ``category_queries_per_clip``): for a camera-wearer verb with at least
  two different events in the clip, "Tell me each time the camera wearer <verb> something." with a
  target at every narration of that verb (a semantic category of several atomic events);
- **negatives** (up to ``negatives_per_clip``): an event narrated elsewhere in the file that never
  occurs in this video (in any pass), with no target.
"""

from __future__ import annotations

import random
import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from data_builders.records import RecordError, Stream, Target
from data_builders.toolkit import (
    RECORD_EXCEPTIONS,
    BuildInputs,
    ConversionError,
    Pending,
    SourceSpec,
    Tally,
    check_options,
    clip_end_from,
    each_record,
    load_json,
    record_reason,
    require,
    seconds,
)
from data_builders.video import VideoInfo

CAMERA_WEARER = "the camera wearer"


@dataclass
class Ego4dEventsSourceConfig:
    """Keys of ``source=ego4d_events``."""

    pass_preference: list[int] = field(default_factory=lambda: [1, 2])
    """Annotator passes to use, in order of preference (the first with narrations wins)."""
    clip_length: float = 60.0
    """Clip length in seconds."""
    min_clip: float = 10.0
    """Shortest last clip kept, in seconds."""
    queries_per_clip: int = 3
    """Single-event queries per clip (at most)."""
    category_queries_per_clip: int = 1
    """Category (multi-event) queries per clip (at most)."""
    negatives_per_clip: int = 1
    """Negative queries per clip (at most)."""
    seed: int = 0
    """Seed of the query choices."""
    video_pattern: str = "{video_uid}.mp4"
    """Video path under ``videos``."""
    metadata: str | None = None
    """``ego4d.json`` with each video's ``duration_sec`` (null: found next to the annotations
    folder if present, else videos are probed)."""

    def __post_init__(self) -> None:
        check_options(
            self,
            positive=["clip_length"],
            non_negative=["min_clip", "queries_per_clip", "category_queries_per_clip", "negatives_per_clip"],
        )
        if not self.pass_preference or any(p not in (1, 2) for p in self.pass_preference):
            raise ValueError(
                f"option pass_preference must list passes 1 and/or 2, got {self.pass_preference!r}"
            )


def normalize(text: str) -> str | None:
    """The event phrase of a narration, or None for ``#unsure`` ones.

    >>> normalize("#C C picks up a cup."), normalize("#O man X opens the door"), normalize("#unsure")
    ('the camera wearer picks up a cup', 'man x opens the door', None)
    >>> normalize("#O man X hands #C C a cup")
    'man x hands the camera wearer a cup'

    """
    if "#unsure" in text.lower():
        return None
    text = re.sub(r"(?<![\w#])#c\s+c\b", CAMERA_WEARER, text.strip().lower())
    text = re.sub(r"#\w+\s*", "", text)
    text = re.sub(r"\s+", " ", text).strip().rstrip(".").strip()
    return text or None


def _narrations(video: dict, name: str) -> list[tuple[float, str | None]]:
    out = []
    for i, n in enumerate((video.get(name) or {}).get("narrations") or []):
        t = seconds(require(n, "timestamp_sec"), f"{name}.narrations[{i}].timestamp_sec")
        out.append((t, normalize(str(require(n, "narration_text")))))
    return sorted(out, key=lambda x: x[0])


def _choose(rng: random.Random, items: list, k: int) -> list:
    return sorted(rng.sample(items, k)) if len(items) > k else list(items)


def build_ego4d_events(
    inputs: BuildInputs, options: Ego4dEventsSourceConfig
) -> Iterator[Pending | ConversionError]:
    """Event-monitoring streams per clip (see the module docstring)."""
    path = inputs.annotations
    data = load_json(path)
    if not isinstance(data, dict):
        raise RecordError("expected a dict keyed by video uid", file=path)
    durations = read_metadata(path, options.metadata)
    chosen: dict[str, tuple[str, list]] = {}
    every_event: dict[str, set[str]] = {}
    errors = []
    for uid in sorted(data):
        try:
            video = data[uid]
            if not isinstance(video, dict):
                raise RecordError("expected an object with narration passes")
            passes = {f"narration_pass_{p}": _narrations(video, f"narration_pass_{p}") for p in (1, 2)}
            every_event[uid] = {e for ns in passes.values() for _, e in ns if e}
            name = next(
                (f"narration_pass_{p}" for p in options.pass_preference if passes.get(f"narration_pass_{p}")),
                None,
            )
            if name is None and str(video.get("status", "")).lower() == "redacted":
                errors.append(
                    ConversionError(str(path), uid, "redacted video without narrations", scope="skipped")
                )
                continue
            if name is None:
                raise RecordError(f"no narrations in passes {options.pass_preference}")
            chosen[uid] = (name, passes[name])
        except RECORD_EXCEPTIONS as exc:
            errors.append(ConversionError(str(path), uid, record_reason(exc)))
    yield from errors
    pool = sorted({e for uid, (_, ns) in chosen.items() for _, e in ns if e})

    def parse(uid: str, item: tuple[str, list]) -> Iterator[Pending]:
        pass_name, narrations = item
        video = options.video_pattern.format(video_uid=uid)
        stated = durations.get(uid)

        def make(info: VideoInfo | None) -> list[Stream]:
            duration, length = clip_end_from(info, stated, uid), options.clip_length
            out = []
            w = 0
            while w * length < duration:
                start, end = w * length, min((w + 1) * length, duration)
                if end - start >= options.min_clip:
                    out += _clip_streams(
                        uid, w, start, end, video, pass_name, narrations, every_event[uid], pool, options
                    )
                w += 1
            return out

        yield Pending(str(path), uid, video, make, needs_info=stated is None, lookup=(uid,), tally=Tally())

    yield from each_record(chosen.items(), path, parse)


def read_metadata(annotations: Path, option: str | None) -> dict[str, float]:
    """``video_uid -> duration_sec`` from ``ego4d.json`` (``option``, else found beside the annotations
    folder); empty when there is none."""
    if option:
        path = Path(option)
    else:
        near = [
            annotations.resolve().parent.parent / "ego4d.json",
            annotations.resolve().parent / "ego4d.json",
        ]
        path = next((p for p in near if p.is_file()), None)
        if path is None:
            return {}
    data = load_json(path)
    videos = data.get("videos") if isinstance(data, dict) else None
    if not isinstance(videos, list):
        raise RecordError("expected {'videos': [{'video_uid', 'duration_sec'}, ...]}", file=path)
    out = {}
    for k, v in enumerate(videos):
        if not isinstance(v, dict) or "video_uid" not in v:
            continue
        value = v.get("duration_sec", (v.get("video_metadata") or {}).get("video_duration_sec"))
        if value is None:
            continue
        try:
            out[str(v["video_uid"])] = seconds(value, "duration_sec")
        except RecordError as exc:
            raise exc.located(file=path, record=f"videos[{k}]") from None
    return out


def _clip_events(
    narrations: list, start: float, end: float
) -> tuple[dict[str, list[float]], dict[str, list[tuple[float, str]]]]:
    """The narrated events of the clip ``[start, end)``: the times of each event, and the (time,
    event) of each verb the camera wearer does."""
    by_event: dict[str, list[float]] = defaultdict(list)
    by_verb: dict[str, list[tuple[float, str]]] = defaultdict(list)
    for t, e in narrations:
        if not (start <= t < end and e):
            continue
        by_event[e].append(t)
        if e.startswith(CAMERA_WEARER + " "):
            verb = e[len(CAMERA_WEARER) + 1 :].split(" ", 1)[0]
            by_verb[verb].append((t, e))
    return by_event, by_verb


def _clip_streams(
    uid: str,
    w: int,
    start: float,
    end: float,
    video: str,
    pass_name: str,
    narrations: list,
    video_events: set[str],
    pool: list[str],
    options: Ego4dEventsSourceConfig,
) -> list[Stream]:
    """The single-event, category and negative streams of one clip ``[start, end)``."""
    rng = random.Random(f"{options.seed}:{uid}:{w}")
    by_event, by_verb = _clip_events(narrations, start, end)
    meta = {"video_id": f"ego4d/{uid}", "pass": pass_name, "clip_index": w}

    def stream(kind: str, k: int, instruction: str, targets: list[Target], extra: dict) -> Stream:
        return Stream(
            id=f"ego4d-{uid}-w{w:03d}-{kind}{k}",
            source="ego4d_events",
            task="event_monitoring",
            video=video,
            clip_start=start,
            clip_end=end,
            instruction=instruction,
            instruction_time=start,
            targets=targets,
            meta={**meta, **extra},
        )

    out = []
    for k, event in enumerate(_choose(rng, sorted(by_event), options.queries_per_clip)):
        out.append(
            stream(
                "e",
                k,
                f"Tell me when {event}.",
                [Target(time=t, content=f"Now: {event}.") for t in by_event[event]],
                {"query": "event", "event": event},
            )
        )
    verbs = sorted(v for v, hits in by_verb.items() if len({e for _, e in hits}) >= 2)
    for k, verb in enumerate(_choose(rng, verbs, options.category_queries_per_clip)):
        out.append(
            stream(
                "c",
                k,
                f"Tell me each time {CAMERA_WEARER} {verb} something.",
                [Target(time=t, content=f"Now: {e}.") for t, e in by_verb[verb]],
                {"query": "category", "verb": verb},
            )
        )
    absent = [e for e in pool if e not in video_events]
    for k, event in enumerate(_choose(rng, absent, options.negatives_per_clip)):
        out.append(stream("n", k, f"Tell me when {event}.", [], {"query": "negative", "event": event}))
    return out


SPEC = SourceSpec("ego4d_events", build=build_ego4d_events, config=Ego4dEventsSourceConfig)
