"""LLaVA-Video-178K caption / open-ended / multiple-choice JSON -> ``clue_then_respond`` streams.

``python -m data_builders build source=llava_video annotations=/data/LLaVA-Video-178K/0_30_s_academic_v0_1 videos=/data/LLaVA-Video-178K/0_30_s_academic_v0_1 out=/data/built/llava_video``

Format, as LLaVA-NeXT's trainer reads it (``LLaVA-VL/LLaVA-NeXT`` ``llava/train/train.py``,
``LazySupervisedDataset``: the video is ``os.path.join(video_folder, sample["video"])``; file list in
``scripts/video/train/exp.yaml``): per subset folder (``0_30_s_academic_v0_1``, ``0_30_s_nextqa``,
...) the files ``<subset>_cap_processed.json``, ``<dur>_<src>_oe[_v0_1]_qa_processed.json`` and
``<dur>_<src>_mc[_v0_1]_qa_processed.json``, each a JSON list of ``{"id", "conversations":
[{"from": "human", "value": "<image>\n..."}, {"from": "gpt", "value"}, ...], "data_source",
"video"}``. ``video`` is relative to the folder where the subset's ``*_videos_*.tar.gz`` were
unpacked (``liwei_youtube_videos/videos/youtube_video_2024/ytb_<id>.mp4``,
``NextQA/NExTVideo/<dir>/<id>.mp4``, ``academic_source/Charades/<id>.mp4``, ...); with every subset
unpacked in its own folder under one root, the driver's index finds ``<root>/<subset>/<video>`` too.

Input: one JSON file, or a directory of them (read in name order). The subset (caption /
open_ended / multi_choice) comes from the file name. Every human/gpt pair becomes a stream: the
question (``<image>``/``<video>`` tags removed) at t=0, and one target with the answer. Record ids
are not unique in the release (several records can share a video), so a stream id holds the file,
the record's position in it and the pair: ``llava_video-<file stem>-<position>-<pair>``; the
release's ``id`` is kept in ``meta``.

Where the target lands, and why: these captions and answers cover the whole clip and carry no
times, so the evidence is complete only once the model has seen the last frame it will be shown.
The target is therefore at the clip's last decision step, ``clip_start + (n - 1) / steps_per_second``
with ``n = floor(duration * steps_per_second)`` (e.g. 29.0 s for a 30.4 s clip at 1 step/s), the
same grid as ``stream_steps.step_times``; answering earlier would teach the model to guess.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from data_builders.records import RecordError, Stream, Target
from data_builders.stream_steps import step_times
from data_builders.toolkit import (
    BuildInputs,
    ConversionError,
    Pending,
    SourceSpec,
    check_options,
    clip_end_from,
    each_record,
    load_json,
    require,
)
from data_builders.video import VideoInfo

MEDIA_TAG = re.compile(r"<(image|video)>\s*")
SUBSETS = (("_mc_", "multi_choice"), ("_oe_", "open_ended"), ("cap", "caption"))


@dataclass
class LlavaVideoSourceConfig:
    """Keys of ``source=llava_video``."""

    video_pattern: str = "{video}"
    """Video path under ``videos``; fields ``video`` and ``data_source``."""
    steps_per_second: float = 1.0
    """Decision rate whose last step receives the answer."""

    def __post_init__(self) -> None:
        check_options(self, positive=["steps_per_second"])


def subset_of(path: Path) -> str:
    """caption / open_ended / multi_choice from a release file name.

    >>> subset_of(Path("0_30_s_nextqa_mc_v0_1_qa_processed.json"))
    'multi_choice'
    """
    name = path.name.replace("-", "_")
    for marker, subset in SUBSETS:
        if marker in name:
            return subset
    return "unknown"


def pairs(conversations: list) -> list[tuple[str, str]]:
    """(question, answer) pairs; a ``RecordError`` when turns do not alternate human/gpt."""
    if not isinstance(conversations, list) or not conversations or len(conversations) % 2:
        raise RecordError("field 'conversations': expected alternating human/gpt turns")
    out = []
    for i in range(0, len(conversations), 2):
        q, a = conversations[i], conversations[i + 1]
        if require(q, "from") != "human" or require(a, "from") != "gpt":
            raise RecordError(f"conversations[{i}]: expected a human turn followed by a gpt turn")
        out.append((MEDIA_TAG.sub("", str(require(q, "value"))).strip(), str(require(a, "value")).strip()))
    return out


def build_llava_video(
    inputs: BuildInputs, options: LlavaVideoSourceConfig
) -> Iterator[Pending | ConversionError]:
    """One stream per question/answer pair (see the module docstring)."""
    root = inputs.annotations
    files = sorted(root.glob("*.json")) if root.is_dir() else [root]
    for path in files:
        data = load_json(path)
        if isinstance(data, dict):
            data = [data]
        if not isinstance(data, list):
            raise RecordError("expected a JSON list of records", file=path)
        subset = subset_of(path)

        def parse(
            rid: str, item: tuple[int, dict], subset: str = subset, path: Path = path
        ) -> Iterator[Pending]:
            position, rec = item
            qa = pairs(require(rec, "conversations"))
            name = str(require(rec, "video"))
            video = options.video_pattern.format(video=name, data_source=rec.get("data_source", ""))

            def make(info: VideoInfo | None) -> list[Stream]:
                base = Stream(
                    id="",
                    source="llava_video",
                    task="clue_then_respond",
                    video=video,
                    clip_start=0.0,
                    clip_end=clip_end_from(info, None, rid),
                    instruction="",
                    instruction_time=0.0,
                    meta={
                        "video_id": f"llava_video/{name}",
                        "subset": subset,
                        "data_source": rec.get("data_source"),
                        "record_id": rec.get("id"),
                    },
                )
                due = step_times(base, options.steps_per_second)[-1]
                return [
                    replace(
                        base,
                        id=f"llava_video-{path.stem}-{position}-{k}",
                        instruction=q,
                        targets=[Target(time=due, content=a)],
                    )
                    for k, (q, a) in enumerate(qa)
                ]

            yield Pending(str(path), rid, video, make, lookup=(Path(name).stem,))

        yield from each_record(
            (
                (f"{r.get('id')} [{k}]" if isinstance(r, dict) and "id" in r else f"item {k}", (k, r))
                for k, r in enumerate(data)
            ),
            path,
            parse,
        )


SPEC = SourceSpec("llava_video", build=build_llava_video, config=LlavaVideoSourceConfig)
