"""Shot2Story multi-shot clips -> ``proactive_narration`` streams (speak when a new shot begins).

``python -m data_builders build source=shot2story annotations=/data/shot2story/annotations/43k_human_train.json videos=/data/shot2story/videos out=/data/built/shot2story``

Format, as defined in ``bytedance/Shot2Story`` (``DATA.md`` "Annotation Format"; read by
``code/lavis/datasets/datasets/video_caption_datasets.py``; shots cut by
``data/scripts/process_videos.py``): a JSON list of clip records ``{"video": "<clip_id>.mp4",
"image_id", "nvid", "id", "whole_caption", "whole_ASR", "video_names": ["<clip_id>_<start>_<end>.mp4",
...], "captions": [...], "audio_captions": [...], "ASR": [...]}`` (the human-annotated files
``43k_human_train.json``, ``20k_val.json``, ``20k_test.json``). The release states no times: the shot
file names carry each shot's start and end frame in the clip, and the cutting script turned them
into seconds with the clip's average fps (``frame / fps``). The clip fps is therefore the record's
own ``fps`` key if present, else the ``fps`` option if set, else the fps probed from the clip file.
Clip files ``<clip_id>.mp4`` sit in one folder (the ``mhan/shot2story-videos`` layout); others
are found by the driver's index.

Two streams per clip (``mode=both``):

- **narration**: "describe each new shot as it begins"; one target per shot at its start frame /
  fps, content = that shot's caption (the first shot's target is at its start, usually 0 s).
- **query** (clips with 2+ shots): "tell me when <the first sentence of shot k's caption>"; one target
  at shot k's start, k >= 1 picked by a hash of (seed, clip id), so a rebuild picks the same k.

The clip ends at the probed duration, or without a probe at (last end frame + 1) / fps. A shot
without a caption (empty string) makes the record an error: narrating it would need a reply the
release does not have.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from data_builders.records import RecordError, Stream, Target
from data_builders.toolkit import (
    BuildInputs,
    ConversionError,
    Pending,
    SourceSpec,
    check_options,
    each_record,
    load_json,
    require,
    seconds,
)
from data_builders.video import VideoInfo

SHOT_NAME = re.compile(r"^(?P<clip>.+)_(?P<start>\d+)_(?P<end>\d+)\.mp4$")
MODES = {"both": ("narration", "query"), "narration": ("narration",), "query": ("query",)}


@dataclass
class Shot2StorySourceConfig:
    """Keys of ``source=shot2story``."""

    fps: float | None = None
    """Clip fps for all records (null: the record's ``fps`` key, else probe the clip)."""
    mode: str = "both"
    """``both``, ``narration`` or ``query``."""
    seed: int = 0
    """Seed of the query shot choice."""
    narration_instruction: str = "Narrate this video: each time a new shot begins, describe it."
    """Instruction of the narration stream (t=0)."""
    query_instruction: str = "Tell me when this happens: {event}"
    """Instruction of the query stream; ``{event}`` is the asked-for shot's first caption sentence."""

    def __post_init__(self) -> None:
        check_options(self, positive=["fps"], choices={"mode": tuple(MODES)})


def first_sentence(text: str) -> str:
    """The caption's first sentence (up to the first '. '), stripped.

    >>> first_sentence("A man talks. Then he leaves.")
    'A man talks.'
    """
    head = re.split(r"(?<=[.!?])\s+", text.strip(), maxsplit=1)[0]
    return head


def parse_shots(clip: str, names: list, fps: float) -> list[tuple[float, int]]:
    """(start seconds, end frame) of each shot from its file name; a ``RecordError`` when a name does
    not match the clip, a shot ends before it starts or the shots are out of order."""
    shots = []
    for i, name in enumerate(names):
        m = SHOT_NAME.match(Path(str(name)).name)
        if not m or m.group("clip") != clip:
            raise RecordError(f"shot {i}: name {name!r} is not {clip}_<start>_<end>.mp4")
        start, end = int(m.group("start")), int(m.group("end"))
        if end < start:
            raise RecordError(f"shot {i}: ends before it starts (frames {start} > {end})")
        if shots and start < shots[-1][1]:
            raise RecordError(f"shot {i}: starts at frame {start}, before the previous shot ends")
        shots.append((start / fps, end))
    return shots


def build_shot2story(
    inputs: BuildInputs, options: Shot2StorySourceConfig
) -> Iterator[Pending | ConversionError]:
    """Narration and query streams per clip (see the module docstring)."""
    path = inputs.annotations
    data = load_json(path)
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        raise RecordError("expected a JSON list of clip records", file=path)

    def parse(rid: str, rec: dict) -> Iterator[Pending]:
        video = str(require(rec, "video"))
        clip = Path(video).stem
        names, captions = _shot_files(rec)
        fixed_fps = rec.get("fps", options.fps)
        if fixed_fps is not None and seconds(fixed_fps, "fps") <= 0:
            raise RecordError(f"field 'fps': must be positive, got {fixed_fps}")
        if fixed_fps is not None:
            parse_shots(clip, names, float(fixed_fps))  # fail early on bad names

        def make(info: VideoInfo | None) -> list[Stream]:
            fps = float(fixed_fps) if fixed_fps is not None else info.fps
            shots = parse_shots(clip, names, fps)
            clip_end = info.duration if info is not None else (shots[-1][1] + 1) / fps
            return _clip_streams(clip, video, clip_end, fps, shots, captions, options)

        yield Pending(str(path), rid, video, make, needs_info=fixed_fps is None, lookup=(clip,))

    def record_id(k: int, rec) -> str:
        return str(rec.get("video") or rec.get("id") or f"item {k}") if isinstance(rec, dict) else f"item {k}"

    yield from each_record(((record_id(k, r), r) for k, r in enumerate(data)), path, parse)


def _shot_files(rec: dict) -> tuple[list, list]:
    """A clip record's shot file names and their captions, one non-empty caption per shot."""
    names, captions = require(rec, "video_names"), require(rec, "captions")
    if not isinstance(names, list) or not names:
        raise RecordError("field 'video_names': expected a non-empty list of shot files")
    if not isinstance(captions, list) or len(captions) != len(names):
        raise RecordError(
            f"{len(names)} shots but {len(captions) if isinstance(captions, list) else 'no'} captions"
        )
    empty = [k for k, c in enumerate(captions) if not str(c or "").strip()]
    if empty:
        raise RecordError(f"shot(s) {empty} have an empty caption")
    return names, captions


def _clip_streams(
    clip: str,
    video: str,
    clip_end: float,
    fps: float,
    shots: list[tuple[float, int]],
    captions: list,
    options: Shot2StorySourceConfig,
) -> list[Stream]:
    """The clip's narration stream and (2+ shots) its query stream, as ``options.mode`` asks."""
    meta = {"video_id": f"shot2story/{clip}", "fps": fps, "n_shots": len(shots)}

    def stream(kind: str, instruction: str, targets: list[Target], meta: dict) -> Stream:
        return Stream.whole_video(
            id=f"shot2story-{clip}-{kind}",
            source="shot2story",
            task="proactive_narration",
            video=video,
            clip_end=clip_end,
            instruction=instruction,
            targets=targets,
            meta=meta,
        )

    out = []
    if "narration" in MODES[options.mode]:
        targets = [Target(time=s, content=str(c)) for (s, _), c in zip(shots, captions, strict=True)]
        out.append(stream("narration", options.narration_instruction, targets, meta))
    if "query" in MODES[options.mode] and len(shots) > 1:
        digest = int(hashlib.sha1(f"{options.seed}:{clip}".encode()).hexdigest(), 16)
        k = 1 + digest % (len(shots) - 1)
        event = first_sentence(str(captions[k]))
        targets = [Target(time=shots[k][0], content=str(captions[k]))]
        out.append(
            stream("query", options.query_instruction.format(event=event), targets, {**meta, "query_shot": k})
        )
    return out


SPEC = SourceSpec("shot2story", build=build_shot2story, config=Shot2StorySourceConfig)
