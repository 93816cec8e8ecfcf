"""The frames stage over many nodes: ``shard=i/n`` splits the clips by a hash of each clip, the
shards run as separate processes at once into one cache and leave the cache one run leaves, entry
for entry; a bad shard spec is refused before any work; a shard killed part way is redone by its
rerun and nothing else is lost."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

from data_builders.build import build_source
from data_builders.config import RenderConfig
from data_builders.frame_cache import writer_host
from data_builders.frames import cache_frames, clip_jobs, clip_shard, parse_shard
from data_builders.record_io import load_streams, write_jsonl
from tests.conftest import run_module

ROOT = Path(__file__).resolve().parents[2]


def entries(cache: Path) -> dict[str, bytes]:
    """Every entry of a cache by its path in it, with its bytes; temp files included (there must be none)."""
    return {str(p.relative_to(cache)): p.read_bytes() for p in sorted(cache.rglob("*")) if p.is_file()}


def frames_command(out: Path, cache: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "data_builders", "frames", f"records={out}", "workers=1"] + [
        f"paths.frame_cache_dir={cache}",
        *args,
    ]


def env() -> dict[str, str]:
    return os.environ | {"PYTHONPATH": str(ROOT)}


@pytest.mark.parametrize(
    ("shard", "message"),
    [
        ("3/2", r"shard=3/2: the shard index must be 0 to 1"),
        ("2/2", r"shard=2/2: the shard index must be 0 to 1"),
        ("0/0", r"shard=0/0: the number of shards n must be at least 1"),
        ("a/b", r"shard=a/b: expected i/n, two whole numbers"),
        ("1", r"shard=1: expected i/n"),
        ("-1/2", r"shard=-1/2: expected i/n"),
    ],
)
def test_a_bad_shard_spec_is_refused_before_any_work(tmp_path, shard, message):
    build_source("toy", tmp_path / "toy", options={"n": 1, "seed": 0}, workers=1)
    with pytest.raises(ValueError, match=message):
        cache_frames(tmp_path / "toy", tmp_path / "frames", progress=False, shard=shard)
    assert not (tmp_path / "frames").exists()


def test_the_shards_split_every_clip_once_whatever_the_record_order(tmp_path):
    out = tmp_path / "toy"
    build_source("toy", out, options={"n": 24, "seed": 0}, workers=1)
    jobs = clip_jobs(out)
    by_clip = {(str(v), s.clip_start, s.clip_end): clip_shard(v, s, 3) for _, v, s in jobs}
    assert sorted(set(by_clip.values())) == [0, 1, 2]  # 24 clips over 3 shards: none empty
    write_jsonl(out / "reversed.jsonl", reversed(load_streams(out / "records.jsonl")))
    reordered = clip_jobs(out / "reversed.jsonl")
    again = {(str(v), s.clip_start, s.clip_end): clip_shard(v, s, 3) for _, v, s in reordered}
    assert again == by_clip
    assert parse_shard(" 2 / 3 ") == (2, 3) and parse_shard(None) == (0, 1)


def test_shards_running_at_once_leave_the_cache_one_run_leaves(tmp_path):
    out, ref, shared = tmp_path / "toy", tmp_path / "ref", tmp_path / "shared"
    build_source("toy", out, options={"n": 10, "seed": 0}, workers=1)
    hd = RenderConfig(max_pixels=200704, frame_format="jpeg90")  # conf/render/hd.yaml, model=qwen3_vl_4b's
    one = cache_frames(out, ref, render=hd, workers=1, progress=False)
    # two shards and a whole run at once: every key is written by two processes at the same time
    procs = [
        subprocess.Popen(
            frames_command(out, shared, "model=qwen3_vl_4b", *a), env=env(), stdout=subprocess.PIPE, text=True
        )
        for a in (["shard=0/2"], ["shard=1/2"], [])
    ]
    results = [json.loads(p.communicate(timeout=300)[0].strip().splitlines()[-1]) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0]
    assert [r["shard"] for r in results] == ["0/2", "1/2", "0/1"]
    assert results[0]["clips"] + results[1]["clips"] == results[2]["clips"] == one["clips"] == 10
    assert min(results[0]["clips"], results[1]["clips"]) > 0
    assert results[0]["frames"] + results[1]["frames"] == one["frames"]
    want, got = entries(ref), entries(shared)
    assert len(want) == 10 and all(k.endswith(".frames") for k in want)
    assert sorted(got) == sorted(want)  # same keys, no temp file left
    assert all(got[k] == want[k] for k in want)  # same bytes


# Runs one shard of the frames stage and kills its whole process group by SIGKILL (the node died)
# in the middle of its second entry's write, after part of it is on disk.
KILLED_SHARD = """
import os, signal, sys
import data_builders.frame_cache as frame_cache
from data_builders.frames import cache_frames
real, calls = frame_cache._write_npy, []
def write_npy(tmp, frames, n):
    calls.append(tmp)
    if len(calls) == 2:
        tmp.write_bytes(b"cut short")
        os.killpg(0, signal.SIGKILL)
    real(tmp, frames, n)
frame_cache._write_npy = write_npy
cache_frames(sys.argv[1], sys.argv[2], workers=1, progress=False, shard=sys.argv[3])
"""


def test_a_shard_killed_part_way_is_redone_and_nothing_else_is_lost(tmp_path):
    out, ref, shared = tmp_path / "toy", tmp_path / "ref", tmp_path / "shared"
    build_source("toy", out, options={"n": 10, "seed": 0}, workers=1)
    cache_frames(out, ref, workers=1, progress=False)
    # the shards hash the videos' absolute paths (tmp_path's name too): the killed one is the one with
    # more clips, so that it has the two entries it is killed at, whatever the paths hash to
    per_shard = Counter(clip_shard(path, stream, 2) for _, path, stream in clip_jobs(out))
    killed_shard, other_shard = sorted((0, 1), key=lambda i: -per_shard[i])
    other = cache_frames(out, shared, workers=1, progress=False, shard=f"{other_shard}/2")
    kept = {p: p.stat() for p in shared.rglob("*.npy")}
    assert len(kept) == other["clips"]
    killed = subprocess.Popen(
        [sys.executable, "-c", KILLED_SHARD, str(out), str(shared), f"{killed_shard}/2"],
        env=env(),
        start_new_session=True,
    )
    assert killed.wait(timeout=120) == -signal.SIGKILL
    assert len(list(shared.rglob("*.tmp"))) == 1  # its cut entry, under a temp name
    done = set(shared.rglob("*.npy")) - kept.keys()
    assert len(done) == 1  # one entry of the killed shard was whole before the kill
    (first,) = done
    before = first.stat()
    again = cache_frames(out, shared, workers=1, progress=False, shard=f"{killed_shard}/2")
    assert again["clips"] + other["clips"] == 10 and again["failed"] == 0
    assert entries(shared) == entries(ref)  # the cut entry's temp file is gone, the rest redone
    for p, st in kept.items():  # the other shard's entries were never rewritten
        assert (p.stat().st_ino, p.stat().st_mtime_ns) == (st.st_ino, st.st_mtime_ns)
    assert (first.stat().st_ino, first.stat().st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_the_command_names_the_bad_shard(tmp_path):
    build_source("toy", tmp_path / "toy", options={"n": 1, "seed": 0}, workers=1)
    proc = subprocess.run(
        frames_command(tmp_path / "toy", tmp_path / "frames", "shard=3/2"),
        env=env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1
    assert "frames failed: shard=3/2: the shard index must be 0 to 1 (shards count from 0)" in proc.stderr
    assert not (tmp_path / "frames").exists()


def test_another_hosts_temp_files_go_only_once_stale(tmp_path):
    out, cache = tmp_path / "toy", tmp_path / "frames"
    build_source("toy", out, options={"n": 1, "seed": 0}, workers=1)
    folder = cache / "ab"
    folder.mkdir(parents=True)
    fresh, stale, mine = (folder / f"ab12.npy.{w}.tmp" for w in ("node-2_77_00ff", "node-3_78_00ee", "x_1_2"))
    legacy = folder / "ab34.npy.4242.tmp"  # a temp file named before hosts were: this host's
    for p in (fresh, stale, mine, legacy):
        p.write_bytes(b"cut")
    os.utime(stale, (1e9, 1e9))  # unchanged since 2001
    mine.rename(mine := folder / mine.name.replace("x_", f"{writer_host()}_"))
    cache_frames(out, cache, workers=1, progress=False)
    assert sorted(p.name for p in cache.rglob("*.tmp")) == [fresh.name]  # its writer may be alive


@pytest.mark.parametrize(
    ("args", "max_pixels"),
    [([], 64 * 64), (["model=qwen3_vl_4b"], 448 * 448), (["model=qwen3_vl_4b", "render=toy"], 64 * 64)],
)
def test_the_frames_stage_caches_at_the_render_of_the_model_the_training_run_uses(args, max_pixels):
    """As every stage, the default model is the tiny one (its toy render: the cache a tiny-model SFT
    reads); a Qwen3-VL model's group gives the hd render; an explicit render= wins."""
    done = run_module("data_builders", "frames", *args, "--cfg", "job", timeout=120)
    assert done.returncode == 0, done.stderr[-1000:]
    assert yaml.safe_load(done.stdout)["render"]["max_pixels"] == max_pixels
