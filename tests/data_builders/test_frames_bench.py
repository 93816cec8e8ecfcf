"""The frame cache stage (library and CLI) and the bench's figures."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from data_builders.bench import frame_cache_speedup
from data_builders.build import build_source
from data_builders.frames import cache_frames, clip_jobs
from data_builders.records import load_streams, write_jsonl


def test_frames_stage_decodes_each_clip_once(tmp_path):
    build_source("toy", tmp_path / "toy", options={"n": 3, "seed": 0}, workers=2)
    summary = cache_frames(tmp_path / "toy", fps=1.0, workers=2, progress=False)
    assert summary == {"clips": 3, "frames": 60, "failed": 0, "cache": str(tmp_path / "toy/frame_cache")}
    cached = sorted((tmp_path / "toy/frame_cache").rglob("*.npy"))
    assert len(cached) == 3 and np.load(cached[0]).shape[0] == 20
    mtimes = [p.stat().st_mtime_ns for p in cached]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "data_builders",
            "frames",
            f"records={tmp_path / 'toy'}",
            "fps=1",
            "workers=2",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"clips": 3, "failed": 0, "frames": 60}
    assert [p.stat().st_mtime_ns for p in sorted((tmp_path / "toy/frame_cache").rglob("*.npy"))] == mtimes


def test_frames_stage_lists_unreadable_videos(tmp_path):
    build_source("toy", tmp_path / "toy", options={"n": 2, "seed": 0}, workers=2)
    streams = load_streams(tmp_path / "toy/records.jsonl")
    (tmp_path / "toy" / streams[1].video).write_bytes(b"")
    write_jsonl(tmp_path / "toy/records.jsonl", streams)
    assert len(clip_jobs(tmp_path / "toy")) == 2
    with pytest.raises(
        RuntimeError, match="1 of 2 clips could not be decoded .*toy_00001.mp4: file is empty"
    ):
        cache_frames(tmp_path / "toy", workers=1, progress=False)


def test_frame_cache_speedup_over_five():
    speedup, first, second = frame_cache_speedup(8)
    assert speedup > 5, (first, second)


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
