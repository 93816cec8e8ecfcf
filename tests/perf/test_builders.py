"""The frame cache stage (library and CLI) and the bench's figures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from data_builders.build import build_source
from data_builders.config import RenderConfig
from data_builders.frames import cache_frames, clip_jobs
from data_builders.record_io import load_streams, write_jsonl
from perf.builders import frame_cache_speedup


def test_frames_stage_decodes_each_clip_once(tmp_path):
    build_source("toy", tmp_path / "toy", options={"n": 3, "seed": 0}, workers=2)
    toy = RenderConfig(max_pixels=64 * 64)  # conf/render/toy.yaml, which the CLI run below names
    summary = cache_frames(tmp_path / "toy", tmp_path / "frames", render=toy, workers=2, progress=False)
    want = {"clips": 3, "clips_total": 3, "frames": 60, "failed": 0, "cache": str(tmp_path / "frames")}
    assert summary == want | {"shard": "0/1"}
    cached = sorted((tmp_path / "frames").rglob("*.npy"))
    assert len(cached) == 3 and np.load(cached[0]).shape[0] == 20
    mtimes = [p.stat().st_mtime_ns for p in cached]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "data_builders",
            "frames",
            f"records={tmp_path / 'toy'}",
            "render=toy",
            f"paths.frame_cache_dir={tmp_path / 'frames'}",
            "workers=2",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    last = json.loads(proc.stdout.strip().splitlines()[-1])
    assert last == want | {"shard": "0/1"}
    assert [p.stat().st_mtime_ns for p in sorted((tmp_path / "frames").rglob("*.npy"))] == mtimes


def test_frames_stage_lists_unreadable_videos(tmp_path):
    build_source("toy", tmp_path / "toy", options={"n": 2, "seed": 0}, workers=2)
    streams = load_streams(tmp_path / "toy/records.jsonl")
    (tmp_path / "toy" / streams[1].video).write_bytes(b"")
    write_jsonl(tmp_path / "toy/records.jsonl", streams)
    assert len(clip_jobs(tmp_path / "toy")) == 2
    with pytest.raises(
        RuntimeError, match="1 of 2 clips could not be decoded .*toy_00001.mp4: file is empty"
    ):
        cache_frames(tmp_path / "toy", tmp_path / "frames", workers=1, progress=False)


def test_frame_cache_bench_reads_from_the_cache_the_second_time():
    """The bench's figure is a speed (the bench command prints it); here only what it measures: a
    first pass that decodes and a second one served from the cache."""
    out = frame_cache_speedup(4)
    assert out["first_pass_misses"] == 4 and out["second_pass_hits"] == 4
    assert out["frame_cache_speedup"] == pytest.approx(
        out["frame_cache_first_s"] / out["frame_cache_second_s"]
    )


def test_build_outputs_load_with_datasets(tmp_path):
    from datasets import load_dataset

    build_source("toy", tmp_path / "toy", options={"n": 3, "seed": 1}, workers=2)
    ds = load_dataset(
        "parquet",
        data_files=str(tmp_path / "toy" / "records-*.parquet"),
        split="train",
        cache_dir=str(tmp_path / "hf"),
    )
    rows = {r["id"]: r for r in ds}
    jsonl = {s.id: s for s in load_streams(tmp_path / "toy/records.jsonl")}
    assert sorted(rows) == sorted(jsonl) == ["toy-1-00000", "toy-1-00001", "toy-1-00002"]
    for rid, s in jsonl.items():
        assert [t["time"] for t in rows[rid]["targets"]] == [t.time for t in s.targets]


def test_cache_format_figures_are_measured_on_textured_448_frames(tmp_path):
    """What ``cache_*`` measure: each format's entry on disk, a PNG entry serving the decoded video's
    very pixels, lossy ones close to them, on frames with texture and noise (not flat colour)."""
    from data_builders.synthetic.toy import write_mp4
    from perf.frame_cache import BENCH_FORMATS, format_figures, textured_frames

    frames = textured_frames(4)
    assert frames[0].shape == (448, 448, 3) and float(frames[0].std()) > 20  # not flat colour
    assert float(np.abs(np.diff(frames[0].astype(int), axis=1)).mean()) > 5  # edges and noise
    write_mp4(tmp_path / "v.mp4", frames, fps=2)
    out = format_figures(tmp_path / "v.mp4", [0.0, 0.5, 1.0, 1.5], tmp_path / "cache")
    assert set(out["cache_bytes_per_frame"]) == set(BENCH_FORMATS) and "raw" in BENCH_FORMATS
    assert out["cache_bytes_per_frame"]["raw"] == pytest.approx(448 * 448 * 3, abs=40)  # + the .npy header
    assert out["cache_bytes_per_frame"]["png"] < out["cache_bytes_per_frame"]["raw"]
    sizes = [out["cache_bytes_per_frame"][f] for f in ("jpeg95", "jpeg90", "jpeg80")]
    assert sizes == sorted(sizes, reverse=True)  # lower quality, fewer bytes
    assert out["cache_psnr_db"]["raw"] == out["cache_psnr_db"]["png"] == float("inf")
    assert 30 < out["cache_psnr_db"]["jpeg90"] < out["cache_psnr_db"]["jpeg95"] < 60
    assert all(v > 0 for v in out["cache_decode_ms_per_frame"].values())


def _children(pid: int) -> list[int]:
    """The live (not zombie) processes whose parent is ``pid``, from /proc."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            out.append(int(stat.parent.name))
    return out


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_workers_of_a_killed_frames_stage_end_with_it(tmp_path):
    """``python -m data_builders frames`` killed with SIGKILL: its decoding workers end within a few
    seconds (before: they waited on their pipe for ever, ~72 MB each, adopted by pid 1)."""
    import signal
    import time

    build_source("toy", tmp_path / "toy", options={"n": 12, "seed": 0}, workers=2)
    cmd = [sys.executable, "-m", "data_builders", "frames", f"records={tmp_path / 'toy'}", "render=toy"]
    proc = subprocess.Popen(
        [*cmd, f"paths.frame_cache_dir={tmp_path / 'frames'}", "workers=2"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},  # this checkout's code
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        end = time.monotonic() + 120
        while len(workers := _children(proc.pid)) < 2:  # the pool forks its two workers at once
            assert proc.poll() is None and time.monotonic() < end, (
                "the stage ended before its workers were seen"
            )
            time.sleep(0.005)
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
        end = time.monotonic() + 5
        while any(_alive(w) for w in workers) and time.monotonic() < end:
            time.sleep(0.05)
        left = [w for w in workers if _alive(w)]
    finally:
        proc.kill()
    for w in left:  # the test's own clean-up of what the stage left
        os.kill(w, signal.SIGKILL)
    assert left == [], f"workers {left} of the killed stage still run"
