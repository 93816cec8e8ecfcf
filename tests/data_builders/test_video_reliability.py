"""Videos and cache entries that used to come back wrong without a word: narrow frames decord
scrambles, clips that run past the end of their video, short or empty frame-cache entries, frames
of an aspect ratio the model's processor refuses, and a full disk under the frames stage.

Every video is written here with PyAV. Frame ``i`` is one flat colour (red = 20 + 40 * (i % 6),
green = 100) with a top-to-bottom blue ramp, so a wrong frame, a scrambled one or a cut stream shows.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import numpy as np
import pytest

from data_builders import frame_cache
from data_builders.build import build_source
from data_builders.config import RenderConfig
from data_builders.frame_cache import FrameCache
from data_builders.frames import cache_frames, stream_frames
from data_builders.record_io import write_jsonl
from data_builders.records import Stream
from data_builders.video import VideoError, read_frames


def _frame(i: int, h: int, w: int) -> np.ndarray:
    a = np.zeros((h, w, 3), np.uint8)
    a[..., 0], a[..., 1] = 20 + 40 * (i % 6), 100
    a[..., 2] = (np.arange(h) * 200 // max(1, h - 1))[:, None]
    return a


def _write(path: Path, w: int, h: int, n: int, fps: int = 1, codec: str = "libx264") -> Path:
    import av

    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w") as container:
        stream = container.add_stream(codec, rate=fps)
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        stream.options = {"threads": "1"}
        for i in range(n):
            for packet in stream.encode(av.VideoFrame.from_ndarray(_frame(i, h, w), format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def _reds(frames: np.ndarray) -> list[int]:
    return [int(round((f[..., 0].mean() - 20) / 40)) for f in frames]


def _stream(video: Path, sid: str, end: float, start: float = 0.0) -> Stream:
    return Stream(
        id=sid,
        source="toy",
        task="event_monitoring",
        video=str(video),
        clip_start=start,
        clip_end=end,
        instruction="Tell me when the red square appears.",
    )


# widths decord returned as (H, W, 4..96) garbage; libx264 needs even sizes, mpeg4 writes width 1
NARROW = [(1, "mpeg4"), (2, "libx264"), (4, "libx264"), (8, "libx264"), (16, "libx264")]
NARROW += [(24, "libx264"), (48, "libx264"), (72, "libx264")]


@pytest.mark.parametrize(("width", "codec"), NARROW)
def test_narrow_videos_come_back_as_rgb_frames_on_the_default_backend(tmp_path, caplog, width, codec):
    path = _write(tmp_path / f"narrow{width}.mp4", width, 32, 6, fps=2, codec=codec)
    times = [0.0, 0.5, 1.0, 2.5]
    with caplog.at_level("WARNING", logger="data_builders"):
        frames = read_frames(path, times)  # the default back end, decord
    assert frames.shape == (4, 32, width, 3)
    assert _reds(frames) == [0, 1, 2, 5]
    ramp = frames[:, :, :, 2].mean(axis=(0, 2))  # the blue ramp runs top to bottom
    assert abs(ramp[0] - 0) < 12 and abs(ramp[-1] - 200) < 12 and np.all(np.diff(ramp) > -8)
    assert np.array_equal(frames, read_frames(path, times, backend="pyav"))
    assert f"{path}: decord returned frames of shape (32, {width}," in caplog.text
    assert "read with PyAV instead" in caplog.text
    # the frame cache (the frames stage's path) stores the same frames
    assert np.array_equal(FrameCache(tmp_path / "cache").frames(path, times), frames)


def test_a_clip_past_the_end_of_a_healthy_video_is_refused(tmp_path, caplog):
    video = _write(tmp_path / "five.mp4", 32, 32, 5)  # 5 s at 1 fps, complete
    for backend in ("decord", "pyav"):
        with pytest.raises(
            VideoError, match=r"five\.mp4: frames asked up to 7\.000 s but the video lasts 5\.000 s"
        ):
            read_frames(video, [0.0, 4.0, 7.0], backend=backend)
        assert _reds(read_frames(video, [0.0, 4.0, 4.9], backend=backend)) == [0, 4, 4]  # inside: fine
    render = RenderConfig(max_pixels=4096)
    with pytest.raises(VideoError) as info:
        stream_frames(_stream(video, "late", 8.0), video, render, cache=FrameCache(tmp_path / "cache"))
    message = str(info.value)
    assert "five.mp4" in message and "(record late, clip 0.000-8.000 s)" in message
    assert "frames asked up to 7.000 s but the video lasts 5.000 s" in message
    assert not list((tmp_path / "cache").rglob("*.npy"))
    # the frames stage: the clip fails the stage, the good one is cached
    write_jsonl(tmp_path / "records.jsonl", [_stream(video, "late", 8.0), _stream(video, "ok", 5.0)])
    with caplog.at_level("ERROR", logger="data_builders"):
        with pytest.raises(RuntimeError, match=r"1 of 2 clips could not be decoded.*record late"):
            cache_frames(tmp_path / "records.jsonl", tmp_path / "frames", render, workers=1, progress=False)
    assert "clip 0.000-8.000 s" in caplog.text and "the video lasts 5.000 s" in caplog.text
    assert len(list((tmp_path / "frames").rglob("*.npy"))) == 1


@pytest.mark.parametrize("damage", ["short", "truncated", "empty"])
def test_a_damaged_cache_entry_is_dropped_and_decoded_again(tmp_path, caplog, damage):
    video = _write(tmp_path / "twenty.mp4", 32, 32, 20)
    stream = _stream(video, "s20", 20.0)
    cache = FrameCache(tmp_path / "cache")
    render = RenderConfig(max_pixels=4096)
    first = np.array(stream_frames(stream, video, render, cache=cache))
    assert first.shape == (20, 32, 32, 3)
    (entry,) = (tmp_path / "cache").rglob("*.npy")
    if damage == "short":  # a well-formed array of 5 frames under the 20-step key
        np.save(entry, first[:5], allow_pickle=False)
    elif damage == "truncated":
        entry.write_bytes(entry.read_bytes()[: entry.stat().st_size // 3])
    else:
        entry.write_bytes(b"")
    with caplog.at_level("WARNING", logger="data_builders"):
        again = stream_frames(stream, video, render, cache=cache)
    assert again.shape == (20, 32, 32, 3) and np.array_equal(again, first)  # all 20 steps served
    assert _reds(again) == [i % 6 for i in range(20)]
    assert f"frame cache entry {entry} " in caplog.text and "dropped, decoding" in caplog.text
    assert (cache.misses, cache.hits) == (2, 0)
    assert np.load(entry).shape == (20, 32, 32, 3)  # the entry was written again, whole
    window = stream_frames(stream, video, render, cache=cache, window=(15, 20))
    assert window.shape[0] == 5 and cache.hits == 1  # now a hit, served whole


@pytest.mark.parametrize(("width", "height"), [(4000, 16), (16, 4000)])
def test_extreme_aspect_ratio_videos_are_refused_naming_file_and_record(tmp_path, width, height):
    videos = tmp_path / "videos"
    _write(videos / "good.mp4", 32, 32, 4)
    odd = _write(videos / "odd.mp4", width, height, 4)
    csv = tmp_path / "train.csv"
    csv.write_text("file_name,time_of_event,time_of_alert\ngood.mp4,,\nodd.mp4,,\n")
    report = build_source(
        "nexar", tmp_path / "out", annotations=csv, videos=videos, max_error_rate=1.0, workers=1
    )
    assert [s.id for s in report.records] == ["nexar-good"]
    (row,) = [json.loads(x) for x in (tmp_path / "out" / "errors.jsonl").read_text().splitlines()]
    assert row["record"] == "odd" and str(odd) in row["reason"]
    assert f"{width} x {height} px" in row["reason"] and "250:1" in row["reason"]
    assert "at most 200:1" in row["reason"]
    # a record that skipped the build's probe: the frames stage names the file and the record
    with pytest.raises(
        VideoError,
        match=rf"odd\.mp4: frames of {width} x {height} px.*\(record odd-clip, clip 0\.000-4\.000 s\)",
    ):
        stream_frames(_stream(odd, "odd-clip", 4.0), odd, RenderConfig(max_pixels=4096))


def test_a_full_disk_in_the_frames_stage_names_the_folder_and_a_rerun_completes(tmp_path, monkeypatch):
    videos = [_write(tmp_path / f"v{k}.mp4", 32, 32, 6) for k in range(4)]
    write_jsonl(tmp_path / "records.jsonl", [_stream(v, f"r{k}", 6.0) for k, v in enumerate(videos)])
    cache = tmp_path / "frames"
    real = frame_cache._write_npy

    def small_disk(tmp, frames, n):  # room for two entries: the third write runs out of space
        if len(list(cache.rglob("*.npy"))) >= 2:
            with tmp.open("wb") as fh:
                fh.write(b"\x93NUMPY partial")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(tmp, frames, n)

    monkeypatch.setattr(frame_cache, "_write_npy", small_disk)
    render = RenderConfig(max_pixels=4096)
    with pytest.raises(RuntimeError) as info:
        cache_frames(tmp_path / "records.jsonl", cache, render, workers=1, progress=False)
    message = str(info.value)
    assert f"no space left on device writing the frame cache in {cache}" in message
    assert "2 of 4 clips are cached" in message
    entries = sorted(cache.rglob("*"))
    assert [p for p in entries if p.is_file() and p.suffix != ".npy"] == []  # no partial file left
    kept = [np.load(p) for p in entries if p.suffix == ".npy"]
    assert [k.shape for k in kept] == [(6, 32, 32, 3)] * 2  # what is left is whole
    monkeypatch.setattr(frame_cache, "_write_npy", real)  # space freed: the rerun completes
    summary = cache_frames(tmp_path / "records.jsonl", cache, render, workers=1, progress=False)
    assert (summary["clips"], summary["frames"], summary["failed"]) == (4, 24, 0)
    assert len(list(cache.rglob("*.npy"))) == 4


def test_a_compressed_entry_with_flipped_bytes_is_dropped_and_decoded_again(tmp_path, caplog):
    """Ten bytes flipped inside one JPEG frame of a compressed entry: the frame fails its crc32, the
    entry is dropped naming the file and rebuilt, and the pixels served are the fresh ones. Bytes
    damaged after an entry was opened fail when that frame is read, and the entry is deleted."""
    from data_builders.frame_cache import FrameCacheError

    video = _write(tmp_path / "twenty.mp4", 32, 32, 20)
    times = [float(t) for t in range(10)]
    cache = FrameCache(tmp_path / "cache")
    first = np.asarray(cache.frames(video, times, max_pixels=4096, frame_format="jpeg90"))
    (entry,) = (tmp_path / "cache").rglob("*.frames")
    data = bytearray(entry.read_bytes())
    end = len(data) - 40  # inside the last stored frame's JPEG data
    data[end - 10 : end] = bytes(b ^ 0xFF for b in data[end - 10 : end])
    entry.write_bytes(bytes(data))
    with caplog.at_level("WARNING", logger="data_builders"):
        again = np.asarray(cache.frames(video, times, max_pixels=4096, frame_format="jpeg90"))
    assert np.array_equal(again, first) and cache.dropped == 1 and (cache.misses, cache.hits) == (2, 0)
    assert f"frame cache entry {entry} holds a damaged frame" in caplog.text and "crc32" in caplog.text
    served = cache.frames(video, times, max_pixels=4096, frame_format="jpeg90")
    assert cache.hits == 1
    data = bytearray(entry.read_bytes())
    data[end - 10 : end] = bytes(10)
    entry.write_bytes(bytes(data))
    with pytest.raises(FrameCacheError, match=rf"frame cache entry {entry}: frame \d+ does not decode"):
        np.asarray(served)
    assert not entry.exists()  # never a hit again
    assert np.array_equal(
        np.asarray(cache.frames(video, times, max_pixels=4096, frame_format="jpeg90")), first
    )
    entry.write_bytes(b"FRMCACHE" + entry.read_bytes()[8:])  # an entry of the first format: no checksums
    with caplog.at_level("WARNING", logger="data_builders"):
        again = np.asarray(cache.frames(video, times, max_pixels=4096, frame_format="jpeg90"))
    assert np.array_equal(again, first)
    assert f"frame cache entry {entry} is of the first entry format (no frame checksums)" in caplog.text
