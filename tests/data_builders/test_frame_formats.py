"""Compressed frame-cache entries (``render.frame_format``): the format is part of the key, PNG
serves the raw pixels, a lossy format the same pixels with or without the cache, only the frames
asked are decoded, old raw entries are still read, a damaged entry is decoded again, a bad format
is refused, and a checkpoint saved before the option existed evaluates on raw entries."""

from __future__ import annotations

import json

import numpy as np
import pytest

from data_builders.config import RenderConfig
from data_builders.frame_cache import EncodedFrames, FrameCache, load_frames
from data_builders.frames import cache_frames, stream_frames
from data_builders.record_io import load_streams
from data_builders.synthetic.toy import write_mp4
from engine.checkpoints import CheckpointError, saved_render
from perf.frame_cache import textured_frames

TIMES = [0.0, 0.5, 1.0, 1.5, 2.0, 2.5]


@pytest.fixture(scope="module")
def video(tmp_path_factory):
    path = tmp_path_factory.mktemp("fmt") / "textured.mp4"
    frames = [f[::4, ::4] for f in textured_frames(6)]  # 112 x 112: textured, quick
    write_mp4(path, frames, fps=2)
    return path


def test_each_format_has_its_own_entry_and_png_serves_the_raw_pixels(tmp_path, video):
    cache = FrameCache(tmp_path / "cache")
    raw = cache.frames(video, TIMES)
    png = cache.frames(video, TIMES, frame_format="png")
    jpeg = cache.frames(video, TIMES, frame_format="jpeg90")
    assert isinstance(raw, np.ndarray) and isinstance(png, EncodedFrames) and isinstance(jpeg, EncodedFrames)
    entries = sorted(p.name for p in (tmp_path / "cache").rglob("*.*"))
    assert len(entries) == 3 and sum(n.endswith(".frames") for n in entries) == 2
    assert png.shape == jpeg.shape == raw.shape == (6, 112, 112, 3) and len(png) == 6
    assert np.array_equal(np.asarray(png), raw)  # lossless
    lossy = np.asarray(jpeg).astype(int)
    assert 0 < np.abs(lossy - raw).mean() < 8  # close, not equal
    assert cache.misses == 3
    again = cache.frames(video, TIMES, frame_format="jpeg90")
    assert cache.hits == 1 and np.array_equal(np.asarray(again), np.asarray(jpeg))
    assert np.array_equal(jpeg[2], np.asarray(jpeg)[2]) and np.array_equal(jpeg[-1], np.asarray(jpeg)[5])
    assert np.array_equal(jpeg[[4, 1]], np.asarray(jpeg)[[4, 1]])
    assert np.array_equal(jpeg[1:3, :, :10], np.asarray(jpeg)[1:3, :, :10])
    with pytest.raises(IndexError):
        jpeg[6]
    # without a cache a lossy format serves the same pixels: a run reads what the cache would give
    assert np.array_equal(load_frames(video, TIMES, frame_format="jpeg90"), np.asarray(jpeg))
    assert np.array_equal(load_frames(video, TIMES, frame_format="png"), raw)


def test_a_window_decodes_only_its_own_frames(tmp_path, video, monkeypatch):
    import data_builders.frame_cache as v

    cache = FrameCache(tmp_path / "cache")
    frames = cache.frames(video, TIMES, frame_format="jpeg90")
    decoded = []
    real = v.decode_frame
    monkeypatch.setattr(v, "decode_frame", lambda blob: decoded.append(blob) or real(blob))
    window = frames[2:4]
    assert window.shape == (2, 112, 112, 3) and len(decoded) == 2


def test_old_raw_entries_are_still_read(tmp_path, video):
    """An entry written before formats existed: the key of raw entries did not change."""
    import hashlib

    p = video.resolve()
    st = p.stat()
    old_key = hashlib.sha1(
        "|".join(
            [str(p), str(st.st_size), str(st.st_mtime_ns), str(64 * 64), ",".join(f"{t:.6f}" for t in TIMES)]
        ).encode()
    ).hexdigest()
    marker = np.full((6, 8, 8, 3), 7, dtype=np.uint8)  # not what the video decodes to: proves the read
    (tmp_path / "cache" / old_key[:2]).mkdir(parents=True)
    np.save(tmp_path / "cache" / old_key[:2] / f"{old_key}.npy", marker)
    cache = FrameCache(tmp_path / "cache")
    assert np.array_equal(cache.frames(video, TIMES, max_pixels=64 * 64), marker) and cache.hits == 1


@pytest.mark.parametrize("damage", ["truncate", "magic", "empty"])
def test_a_damaged_compressed_entry_is_dropped_and_decoded_again(tmp_path, video, caplog, damage):
    cache = FrameCache(tmp_path / "cache")
    want = np.asarray(cache.frames(video, TIMES, frame_format="webp90"))
    (entry,) = (tmp_path / "cache").rglob("*.frames")
    data = entry.read_bytes()
    entry.write_bytes({"truncate": data[: len(data) // 2], "magic": b"X" + data[1:], "empty": b""}[damage])
    again = FrameCache(tmp_path / "cache")
    assert np.array_equal(np.asarray(again.frames(video, TIMES, frame_format="webp90")), want)
    assert again.dropped == 1 and again.misses == 1
    assert f"frame cache entry {entry}" in caplog.text and "dropped, decoding" in caplog.text


@pytest.mark.parametrize("bad", ["jpeg", "jpeg0", "jpeg101", "gif", "PNG", "webp-90"])
def test_a_bad_format_is_refused_naming_the_option(tmp_path, video, bad):
    with pytest.raises(ValueError, match=rf"render.frame_format={bad}: expected raw, png, jpeg<quality>"):
        FrameCache(tmp_path / "cache").frames(video, TIMES, frame_format=bad)
    assert not (tmp_path / "cache").exists()


def test_the_frames_stage_writes_the_training_runs_format(tmp_path):
    from data_builders.build import build_source

    out = tmp_path / "toy"
    build_source("toy", out, options={"n": 2, "seed": 0}, workers=1)
    render = RenderConfig(max_pixels=64 * 64, frame_format="jpeg90")
    summary = cache_frames(out, tmp_path / "frames", render=render, workers=1, progress=False)
    assert summary["clips"] == 2 and len(list((tmp_path / "frames").rglob("*.frames"))) == 2
    stream = load_streams(out / "records.jsonl")[0]
    cache = FrameCache(tmp_path / "frames")
    window = stream_frames(stream, out / stream.video, render, 1.0, cache, window=(3, 7))
    assert cache.hits == 1 and cache.misses == 0 and window.shape == (4, 64, 64, 3)


def test_a_checkpoint_saved_before_formats_evaluates_on_raw_entries(tmp_path):
    old = {"max_pixels": 200704, "video_backend": "decord", "history_budget_tokens": 2048}
    (tmp_path / "render.json").write_text(json.dumps(old))
    assert saved_render(tmp_path) == old | {"frame_format": "raw"}
    (tmp_path / "render.json").write_text(json.dumps(old | {"frame_format": "jpeg90"}))
    assert saved_render(tmp_path)["frame_format"] == "jpeg90"
    (tmp_path / "render.json").write_text(json.dumps(old | {"frame_format": "jpg"}))
    with pytest.raises(CheckpointError, match="render.frame_format=jpg: expected raw, png"):
        saved_render(tmp_path)
