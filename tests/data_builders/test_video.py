"""Video reading: both back ends agree, frames are the ones on screen, broken files fail clearly."""

from __future__ import annotations

import os

import numpy as np
import pytest

from data_builders.synthetic.toy import write_mp4
from data_builders.video import FrameCache, VideoError, probe_video, read_frames


@pytest.fixture(scope="module")
def counter_video(tmp_path_factory):
    """4 fps, 5 s: frame f has its red channel = 10 * f, so each frame is identifiable."""
    path = tmp_path_factory.mktemp("vid") / "counter.mp4"
    frames = [np.full((48, 64, 3), (10 * f, 100, 50), dtype=np.uint8) for f in range(20)]
    write_mp4(path, frames, fps=4)
    return path


def _frame_index(frames: np.ndarray) -> list[int]:
    return [int(round(f[..., 0].mean() / 10)) for f in frames]


@pytest.mark.parametrize("backend", ["decord", "pyav"])
def test_frame_on_screen_at_each_time(counter_video, backend):
    frames = read_frames(counter_video, [0.0, 0.2, 0.25, 1.0, 2.6, 4.9], backend=backend)
    assert frames.shape == (6, 48, 64, 3)
    assert _frame_index(frames) == [0, 0, 1, 4, 10, 19]


def test_backends_agree_and_fps_sampling(counter_video):
    a = read_frames(counter_video, fps=1.0, backend="decord")
    b = read_frames(counter_video, fps=1.0, backend="pyav")
    assert np.array_equal(a, b)
    assert _frame_index(a) == [0, 4, 8, 12, 16]
    assert _frame_index(read_frames(counter_video, fps=2.0, start=1.0, end=3.0)) == [4, 6, 8, 10]


def test_pixel_budget_keeps_aspect(counter_video):
    frames = read_frames(counter_video, [0.0], max_pixels=24 * 32)
    assert frames.shape[1:3] == (24, 32)


def test_probe(counter_video):
    info = probe_video(counter_video)
    assert (info.fps, info.n_frames, info.width, info.height) == (4.0, 20, 64, 48)
    assert info.duration == pytest.approx(5.0)


def test_missing_empty_and_truncated_files_fail_with_reason(tmp_path, counter_video):
    with pytest.raises(VideoError, match=r"nope\.mp4: file does not exist"):
        read_frames(tmp_path / "nope.mp4", [0.0])
    (tmp_path / "empty.mp4").write_bytes(b"")
    with pytest.raises(VideoError, match=r"empty\.mp4: file is empty \(zero length\)"):
        probe_video(tmp_path / "empty.mp4")
    data = counter_video.read_bytes()
    (tmp_path / "cut.mp4").write_bytes(data[: len(data) // 2])
    for call in (lambda: probe_video(tmp_path / "cut.mp4"), lambda: read_frames(tmp_path / "cut.mp4", [0.0])):
        with pytest.raises(VideoError, match=r"cut\.mp4: .*truncated"):
            call()


def test_frame_cache_decodes_once_and_notices_changes(tmp_path, counter_video):
    cache = FrameCache(tmp_path / "cache")
    times = [0.0, 1.0, 2.0]
    first = cache.frames(counter_video, times, max_pixels=4096)
    second = cache.frames(counter_video, times, max_pixels=4096)
    assert np.array_equal(first, second)
    assert (cache.misses, cache.hits) == (1, 1)
    cache.frames(counter_video, times, max_pixels=1024)  # another resolution: another entry
    assert cache.misses == 2
    st = os.stat(counter_video)
    os.utime(counter_video, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # file changed: miss
    cache.frames(counter_video, times, max_pixels=4096)
    assert cache.misses == 3
