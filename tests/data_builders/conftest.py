"""Fixtures for the data-builder tests: tiny real mp4s and helpers to run a build."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from data_builders.build import build_source
from data_builders.synthetic.toy import write_mp4


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
