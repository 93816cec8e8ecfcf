"""Video reading: both back ends agree, frames are the ones on screen, broken files fail clearly.

Every fixture is written here with PyAV (no ffmpeg binary): MPEG-TS with a 1.48 s start, an mp4
whose timestamps start at 1.48 s, a phone-style mp4 with a 90-degree display matrix, a truncated
mkv, 25 and 29.97 fps files. Each frame carries its index (red = 10 * (i % 25), green =
10 * (i // 25) in its lower half) and a blue marker in its top-left corner, so a wrong frame or a
wrong orientation shows.
"""

from __future__ import annotations

import math
import os
import re
import struct
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from data_builders.frame_cache import FrameCache
from data_builders.synthetic.toy import write_mp4
from data_builders.video import VideoError, probe_video, read_frames

BACKENDS = ["decord", "pyav"]


def _frame(i: int, h: int = 48, w: int = 64) -> np.ndarray:
    a = np.zeros((h, w, 3), np.uint8)
    a[..., 0], a[..., 1] = 10 * (i % 25), 10 * (i // 25)
    a[: h // 4, : w // 4] = (0, 0, 255)  # orientation marker: top-left of the stored picture
    return a


def _index(frame: np.ndarray) -> int:
    low = frame[frame.shape[0] // 2 :]
    return int(round(low[..., 0].mean() / 10)) + 25 * int(round(low[..., 1].mean() / 10))


def _indices(frames: np.ndarray) -> list[int]:
    return [_index(f) for f in frames]


def _write(path: Path, n: int, fps: Fraction, fmt: str | None = None, start: int = 0, gop: int = 30) -> Path:
    """``n`` frames at ``fps`` (H.264 with B-frames), the first at pts ``start`` frames."""
    import av

    with av.open(str(path), "w", format=fmt) as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.height, stream.width, stream.pix_fmt = 48, 64, "yuv420p"
        stream.codec_context.time_base = 1 / fps
        stream.options = {"threads": "1", "preset": "veryfast", "g": str(gop), "bf": "2"}
        for i in range(n):
            frame = av.VideoFrame.from_ndarray(_frame(i), format="rgb24")
            frame.pts, frame.time_base = start + i, stream.codec_context.time_base
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def _on_screen(t: float, fps: Fraction) -> int:
    """Index of the frame on screen at ``t`` s from the first frame."""
    return math.floor(t * fps + 1e-6)


@pytest.fixture(scope="module")
def counter_video(tmp_path_factory):
    """4 fps, 5 s, frame i identifiable."""
    path = tmp_path_factory.mktemp("vid") / "counter.mp4"
    write_mp4(path, [_frame(i) for i in range(20)], fps=4)
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("real")
    return {
        "ts": _write(root / "start148.ts", 250, Fraction(25), fmt="mpegts", start=37),  # 37 / 25 = 1.48 s
        "mp4_148": _write(root / "start148.mp4", 250, Fraction(25), start=37),
        "fps25": _write(root / "fps25.mp4", 250, Fraction(25)),
        "fps2997": _write(root / "fps2997.mp4", 300, Fraction(30000, 1001)),
        "mkv": _write(root / "full.mkv", 250, Fraction(25), gop=25),
    }


@pytest.mark.parametrize("backend", BACKENDS)
def test_frame_on_screen_at_each_time(counter_video, backend):
    frames = read_frames(counter_video, [0.0, 0.2, 0.25, 1.0, 2.6, 4.9], backend=backend)
    assert frames.shape == (6, 48, 64, 3)
    assert _indices(frames) == [0, 0, 1, 4, 10, 19]


def test_backends_agree_and_fps_sampling(counter_video):
    a = read_frames(counter_video, fps=1.0, backend="decord")
    b = read_frames(counter_video, fps=1.0, backend="pyav")
    assert np.array_equal(a, b)
    assert _indices(a) == [0, 4, 8, 12, 16]
    assert _indices(read_frames(counter_video, fps=2.0, start=1.0, end=3.0)) == [4, 6, 8, 10]


@pytest.mark.parametrize("name", ["ts", "mp4_148", "fps25", "fps2997"])
def test_frames_by_presentation_time_on_both_backends(files, name):
    """MPEG-TS starting at 1.48 s (decord alone returns frames a second late there), an mp4 with the
    same start, 25 and 29.97 fps: t counts from the first frame, both back ends give the same frames."""
    path = files[name]
    info = probe_video(path)
    fps = Fraction(30000, 1001) if name == "fps2997" else Fraction(25)
    assert info.fps == pytest.approx(float(fps))
    assert info.start_time == pytest.approx(1.48 if "148" in path.name else 0.0, abs=0.1)
    times = [0.0, 0.5, *[float(t) for t in range(1, int(info.duration))], info.duration - 0.01]
    want = [_on_screen(t, fps) for t in times]
    got = {b: read_frames(path, times, backend=b) for b in BACKENDS}
    assert _indices(got["decord"]) == want
    assert np.array_equal(got["decord"], got["pyav"])


def _rotate_display(path: Path, out: Path) -> Path:
    """A copy of an mp4 whose track header carries a phone's display matrix: show the stored
    picture turned 90 degrees clockwise (what ffprobe reports as 'rotation -90')."""
    data = bytearray(path.read_bytes())
    i = data.index(b"tkhd")
    matrix = i + 4 + (40 if data[i + 4] == 0 else 52)  # after version/flags, times, ids, volume
    assert struct.unpack(">9i", data[matrix : matrix + 36]) == (1 << 16, 0, 0, 0, 1 << 16, 0, 0, 0, 1 << 30)
    data[matrix : matrix + 36] = struct.pack(">9i", 0, 1 << 16, 0, -(1 << 16), 0, 0, 0, 0, 1 << 30)
    out.write_bytes(bytes(data))
    return out


def test_display_rotation_is_applied_upright_on_both_backends(counter_video, tmp_path):
    path = _rotate_display(counter_video, tmp_path / "phone.mp4")
    info = probe_video(path)
    assert (info.rotation, info.width, info.height) == (-90, 48, 64)  # displayed size: portrait
    stored = read_frames(counter_video, [1.0])[0]
    for backend in BACKENDS:
        frames = read_frames(path, [0.0, 1.0, 4.9], backend=backend)
        assert frames.shape == (3, 64, 48, 3)
        assert _indices(np.rot90(frames, 1, axes=(1, 2))) == [0, 4, 19]
        assert np.array_equal(frames[1], np.rot90(stored, -1))  # turned clockwise, as players show it
        assert frames[1][:8, -8:, 2].min() > 200 and frames[1][:8, :8, 2].max() < 50  # marker top-right
    # the pixel budget applies to the displayed frame, aspect kept: portrait stays portrait
    assert read_frames(path, [0.0], max_pixels=24 * 32).shape == (1, 32, 24, 3)


def test_truncated_mkv_fails_naming_the_last_good_time(files, tmp_path):
    data = files["mkv"].read_bytes()
    cut = tmp_path / "cut.mkv"
    cut.write_bytes(data[: len(data) * 6 // 10])
    with pytest.raises(VideoError, match=r"cut\.mkv: .*truncated.*last good frame at") as probed:
        probe_video(cut)
    last = float(re.search(r"last good frame at ([\d.]+) s", str(probed.value)).group(1))
    assert 3.0 < last < 9.0
    for backend in BACKENDS:
        with pytest.raises(
            VideoError, match=rf"cut\.mkv: .*stated duration 10\.000 s.*last good frame at {last:.3f} s"
        ):
            read_frames(cut, fps=1.0, backend=backend)
        # what is there reads fine, and matches the complete file
        times = [0.0, 1.0, 2.5, last]
        assert np.array_equal(read_frames(cut, times, backend=backend), read_frames(files["mkv"], times))


def test_frame_cache_stores_nothing_of_a_failed_read(files, tmp_path):
    data = files["mkv"].read_bytes()
    video = tmp_path / "clip.mkv"
    video.write_bytes(data[: len(data) * 6 // 10])
    cache = FrameCache(tmp_path / "cache")
    times = [float(t) for t in range(10)]
    for _ in range(2):  # a failed read is a miss every time, never a cached answer
        with pytest.raises(VideoError, match=r"clip\.mkv: .*truncated"):
            cache.frames(video, times)
    assert [p for p in (tmp_path / "cache").rglob("*") if p.is_file()] == []
    assert (cache.misses, cache.hits) == (2, 0)
    video.write_bytes(data)  # the file repaired: read, cached, then served memory-mapped
    first = cache.frames(video, times)
    assert _indices(first) == [25 * t for t in range(10)]
    second = cache.frames(video, times)
    assert isinstance(second, np.memmap) and np.array_equal(first, second)
    assert np.array_equal(first, read_frames(video, times))
    assert len([p for p in (tmp_path / "cache").rglob("*") if p.is_file()]) == 1


def test_pixel_budget_keeps_aspect(counter_video):
    frames = read_frames(counter_video, [0.0], max_pixels=24 * 32)
    assert frames.shape[1:3] == (24, 32)


def test_frame_cache_miss_equals_read_frames_in_any_time_order(counter_video, tmp_path):
    times = [3.0, 0.0, 4.5, 1.25, 1.25]  # unsorted, repeated: each goes to its own slot
    cached = FrameCache(tmp_path / "c").frames(counter_video, times, max_pixels=24 * 32)
    assert _indices(cached) == [12, 0, 18, 5, 5]
    assert np.array_equal(cached, read_frames(counter_video, times, max_pixels=24 * 32))


def test_probe(counter_video):
    info = probe_video(counter_video)
    assert (info.fps, info.n_frames, info.width, info.height, info.rotation) == (4.0, 20, 64, 48, 0)
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
