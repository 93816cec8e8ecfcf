"""Fixtures for the data-builder tests: tiny real mp4s, the release fixtures and helpers to run a build.

``fixtures/<source>/`` holds our own files in each dataset's release structure, field for field
(invented values), and ``videos.txt``: the release's video layout, one ``path<TAB>seconds<TAB>fps``
per line. :func:`materialize` copies a fixture and writes its video tree; :data:`RELEASES` says,
per source, which file is the annotation input and which folder is the video root a user would give.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from data_builders.build import build_source
from data_builders.synthetic.toy import write_mp4

FIXTURES = Path(__file__).parent / "fixtures"

#: source -> (fixture folder, annotation input inside it, video root inside the video tree).
RELEASES = {
    "captaincook4d": (
        "captaincook4d",
        "annotation_json/error_annotations.json",
        "captain_cook_4d/gopro/resolution_360p",
    ),
    "holoassist": ("holoassist", "data-annotation-trainval-v1_1.json", "video_pitch_shifted"),
    "ucf_crime": ("ucf_crime", "Temporal_Anomaly_Annotation_for_Testing_Videos.txt", "."),
    "shot2story": ("shot2story", "43k_human_train.json", "videos"),
    "magqa": ("magqa", "magqa_train-0.25_0.5-earlier.json", "."),
    "llava_video": ("llava_video", "0_30_s_academic_v0_1", "0_30_s_academic_v0_1"),
    "ego4d_events": ("ego4d", "v2/annotations/narration.json", "v2/full_scale"),
    "egoserve": ("egoserve", "EgoServe_release", "."),
    "nexar": ("nexar", "train.csv", "train"),
    "streamingbench_proactive": ("streamingbench_proactive", "data/questions_proactive.json", "."),
    "ovo": ("ovo", "ovo_bench_new.json", "src_videos"),
    "joyai": ("joyai", ".", "."),
}


def materialize(source: str, dest: Path, real: bool = True, cache: Path | None = None) -> tuple[Path, Path]:
    """Copy ``source``'s release fixture to ``dest/ann`` and write its video tree under
    ``dest/videos`` (tiny real mp4s, or empty placeholder files with ``real=False``); returns the
    (annotations, video root) a user would pass."""
    folder, annotations, root = RELEASES[source]
    shutil.copytree(FIXTURES / folder, dest / "ann", dirs_exist_ok=True)
    for line in (FIXTURES / folder / "videos.txt").read_text().splitlines():
        rel, seconds, fps = line.split("\t")
        target = dest / "videos" / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if not real:
            target.touch()
            continue
        cached = (cache or dest) / ".mp4cache" / f"{seconds}_{fps}.mp4"
        if not cached.exists():
            make_mp4(cached, float(seconds), int(fps))
        shutil.copy(cached, target)
    return dest / "ann" / annotations, dest / "videos" / root


@pytest.fixture
def materializer():
    """:func:`materialize` itself."""
    return materialize


@pytest.fixture
def release(tmp_path_factory, tmp_path):
    """``release(source, real=True)`` -> (annotations, video root) of the source's release fixture."""
    cache = tmp_path_factory.mktemp("releasecache")
    return lambda source, real=True: materialize(source, tmp_path / "release", real, cache)


def make_mp4(path: Path, seconds: float, fps: int = 1, size: int = 16) -> Path:
    """A real H.264 mp4 of ``seconds * fps`` frames (duration = seconds exactly)."""
    frames = [np.full((size, size, 3), (17 * i) % 255, np.uint8) for i in range(round(seconds * fps))]
    write_mp4(path, frames, fps)
    return path


@pytest.fixture
def mp4(tmp_path_factory):
    """``mp4(dest, seconds, fps)``: write (or copy a cached) tiny mp4 to ``dest``."""
    cache = tmp_path_factory.mktemp("mp4cache")

    def make(dest: Path, seconds: float, fps: int = 1) -> Path:
        src = cache / f"{seconds}_{fps}.mp4"
        if not src.exists():
            make_mp4(src, seconds, fps)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, dest)
        return dest

    return make


def _build(tmp_path: Path, source: str, annotations: Path, videos: Path, **options):
    """Run the real driver into ``tmp_path/out`` and return its report."""
    kwargs = {k: options.pop(k) for k in ("check_videos", "max_error_rate") if k in options}
    return build_source(
        source, tmp_path / "out", annotations=annotations, videos=videos, options=options, workers=2, **kwargs
    )


@pytest.fixture
def build():
    """``build(tmp_path, source, annotations, videos, **options)`` -> the driver's report."""
    return _build


@pytest.fixture
def by_id():
    """Streams keyed by id."""
    return lambda streams: {s.id: s for s in streams}
