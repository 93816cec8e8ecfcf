"""Builds never lose the previous build nor overwrite their input; bad input files and bad options get
errors naming the file, the line and the reason (or the option), never a bare exception."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

import data_builders.outputs as outputs
from data_builders.build import BuildFailed, build_source
from data_builders.record_io import load_streams
from data_builders.records import RecordError
from tests.conftest import full_disk_run, read_only_run, run_module

ROOT = Path(__file__).resolve().parents[2]


def _nexar(tmp_path, mp4, rows="822,19.5,18.633,1\n1924,,,0\n"):
    videos = tmp_path / "videos"
    for name in ("00822", "01924", "00031"):
        mp4(videos / f"{name}.mp4", 25)
    csv = tmp_path / "train.csv"
    csv.write_text("id,time_of_event,time_of_alert,target\n" + rows)
    return csv, videos


def _snapshot(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.is_file()}


def test_a_rebuild_that_fails_midway_leaves_the_previous_build(tmp_path, mp4, monkeypatch):
    csv, videos = _nexar(tmp_path, mp4)
    build_source("nexar", tmp_path / "out", annotations=csv, videos=videos, shard_size=1)
    before = _snapshot(tmp_path / "out")
    assert sorted(before) == [
        "errors.jsonl",
        "records-00000-of-00002.parquet",
        "records-00001-of-00002.parquet",
        "records.jsonl",
        "stats.json",
    ]
    csv.write_text(csv.read_text() + "31,12.0,11.0,1\n")

    def full_disk(out_dir, streams, shard_size=10_000, prefix="records"):
        (Path(out_dir) / "records-00000-of-00001.parquet").write_bytes(b"PAR1 cut")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(outputs, "write_parquet", full_disk)
    with pytest.raises(OSError, match="No space left"):
        build_source("nexar", tmp_path / "out", annotations=csv, videos=videos)
    assert _snapshot(tmp_path / "out") == before  # no shard removed, no file cut, no stale stats
    assert [p.name for p in (tmp_path / "out").iterdir() if p.name.startswith(".")] == []  # staging removed
    monkeypatch.undo()
    report = build_source("nexar", tmp_path / "out", annotations=csv, videos=videos)
    assert sorted(_snapshot(tmp_path / "out")) == [
        "errors.jsonl",
        "records-00000-of-00001.parquet",
        "records.jsonl",
        "stats.json",
    ]  # the two old shards are gone, replaced by one
    assert len(load_streams(tmp_path / "out")) == len(report.records) == 3


def test_a_failed_build_goes_aside_and_a_later_good_one_clears_it(tmp_path, mp4):
    csv, videos = _nexar(tmp_path, mp4)
    build_source("nexar", tmp_path / "out", annotations=csv, videos=videos)
    before = _snapshot(tmp_path / "out")
    bad = tmp_path / "bad.csv"
    bad.write_text("id,time_of_event,time_of_alert,target\n822,19.5,18.633,1\n9,x,1.0,1\n")
    with pytest.raises(BuildFailed, match=r"1 of 2 source records \(50.00%\).*previous build in .* is kept"):
        build_source("nexar", tmp_path / "out", annotations=bad, videos=videos)
    assert _snapshot(tmp_path / "out") == before
    assert "cannot parse time 'x'" in (tmp_path / "out/failed_build/errors.jsonl").read_text()
    build_source("nexar", tmp_path / "out", annotations=csv, videos=videos)
    assert not (tmp_path / "out/failed_build").exists()


def test_out_that_is_or_holds_the_annotations_is_refused(tmp_path, mp4):
    csv, videos = _nexar(tmp_path, mp4)
    text = csv.read_text()
    for out in (tmp_path, csv):
        with pytest.raises(BuildFailed, match="is or contains the annotations .* choose another out"):
            build_source("nexar", out, annotations=csv, videos=videos)
    release = tmp_path / "EgoServe_release"
    release.mkdir()
    with pytest.raises(BuildFailed, match="is or contains the annotations"):
        build_source("egoserve", release, annotations=release, videos=videos)
    assert csv.read_text() == text and sorted(p.name for p in tmp_path.iterdir()) == [
        "EgoServe_release",
        "train.csv",
        "videos",
    ]


def test_toy_rebuild_replaces_its_videos_folder(tmp_path):
    build_source("toy", tmp_path / "toy", options={"n": 3, "seed": 0}, check_videos=False)
    build_source("toy", tmp_path / "toy", options={"n": 2, "seed": 1}, check_videos=False)
    streams = load_streams(tmp_path / "toy")
    assert [s.id for s in streams] == ["toy-1-00000", "toy-1-00001"]
    assert sorted(p.name for p in (tmp_path / "toy/videos").iterdir()) == ["toy_00000.mp4", "toy_00001.mp4"]


def test_one_line_json_lines_file_is_read_as_json_lines(tmp_path, mp4):
    mp4(tmp_path / "videos/desk.mp4", 4)
    tracks = tmp_path / "tracks.jsonl"
    tracks.write_text(
        json.dumps(
            {
                "id": "mug",
                "video": "desk.mp4",
                "object": "the mug",
                "fps": 2,
                "visible": [True, True, False, True],
            }
        )
        + "\n"
    )
    [s] = build_source(
        "object_tracks", tmp_path / "out", annotations=tracks, videos=tmp_path / "videos"
    ).records
    assert (s.id, [t.time for t in s.targets]) == ("object_tracks-mug", [1.0])


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("empty.json", b"", r"empty.json: annotation file is empty"),
        ("blank.jsonl", b"\n  \n", r"blank.jsonl: annotation file is empty"),
        ("none.json", b"[]", r"no records in .*none.json"),
        (
            "latin1.jsonl",
            b'{"id": "a"}\n{"id": "caf\xe9"}\n',
            r"latin1.jsonl, record line 2: not UTF-8 text: byte 0xe9",
        ),
        (
            "torn.jsonl",
            b'{"id": "a", "video": "v.mp4"}\n{"id": "b", "vid\n{"id": "c"}\n',
            r"torn.jsonl, record line 2: invalid JSON at line 2",
        ),
        ("torn.json", b'[\n {"id": "a"},\n {"id": \n]\n', r"torn.json: invalid JSON at line 4, column 1"),
        (
            "huge.json",
            b'[{"id": "a", "fps": ' + b"9" * 5000 + b"}]",
            r"huge.json: invalid JSON: Exceeds the limit",
        ),
        ("deep.json", b"[" * 100_000 + b"]" * 100_000, r"deep.json: invalid JSON: nested too deeply"),
    ],
)
def test_bad_annotation_files_name_the_file_line_and_reason(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(BuildFailed, match=message):
        build_source("object_tracks", tmp_path / "out", annotations=path, videos=tmp_path)
    assert not (tmp_path / "out").exists()  # nothing written


def test_bad_csv_and_text_annotations(tmp_path):
    csv = tmp_path / "train.csv"
    csv.write_bytes(b"id,time_of_event,time_of_alert\n1,2.0,1.0\n2,\xff,1\n")
    with pytest.raises(BuildFailed, match=r"train.csv, record line 3: not UTF-8 text: byte 0xff"):
        build_source("nexar", tmp_path / "o", annotations=csv, videos=tmp_path)
    ucf = tmp_path / "ucf.txt"
    ucf.write_text(
        "Arson011_x264.mp4  Arson  " + "9" * 400 + "  500  -1  -1\nNormal_1.mp4  Normal  -1  -1  -1  -1\n"
    )
    report = build_source(
        "ucf_crime",
        tmp_path / "u",
        annotations=ucf,
        videos=tmp_path,
        check_videos=False,
        max_error_rate=1.0,
        exists=lambda p: True,
        probe=lambda p, check_end: _info(),
    )
    assert [(e.record, e.reason) for e in report.errors] == [
        ("Arson011_x264.mp4", "field 'col3': frame number " + "9" * 40 + " out of range")
    ]


def test_huge_times_in_json_records_are_record_errors(tmp_path, mp4):
    mp4(tmp_path / "videos/a.mp4", 4)
    tracks = tmp_path / "tracks.json"
    tracks.write_text(
        '[{"id": "big", "video": "a.mp4", "object": "x", "fps": 1' + "0" * 400 + ', "visible": [true]},'
        ' {"id": "ok", "video": "a.mp4", "object": "x", "fps": 1, "visible": [true, false]}]'
    )
    report = build_source(
        "object_tracks", tmp_path / "out", annotations=tracks, videos=tmp_path / "videos", max_error_rate=1.0
    )
    assert [s.id for s in report.records] == ["object_tracks-ok"]
    assert [(e.record, e.reason) for e in report.errors] == [
        ("big", "field 'fps': time out of range (401-digit number)")
    ]


def test_record_files_with_bad_meta_or_lines_name_file_and_line(tmp_path):
    good = {
        "id": "a",
        "source": "toy",
        "task": "event_monitoring",
        "video": "a.mp4",
        "clip_start": 0.0,
        "clip_end": 5.0,
        "instruction": "",
        "meta": "{not json",
    }
    path = tmp_path / "records.jsonl"
    path.write_text(json.dumps(good) + "\n")
    with pytest.raises(RecordError, match=r"records.jsonl, record a, field 'meta': not a JSON object string"):
        load_streams(path)
    path.write_bytes(b'{"id": 1' + b"0" * 5000 + b"}\n")
    with pytest.raises(RecordError, match=r"records.jsonl, record line 1: invalid JSON: Exceeds the limit"):
        load_streams(path)
    path.write_bytes(json.dumps({**good, "meta": {}}).encode() + b"\n" + b"[" * 100_000 + b"\n")
    with pytest.raises(RecordError, match=r"record line 2: invalid JSON"):
        load_streams(path)
    path.write_bytes(b'{"id": "\xff"}\n')
    with pytest.raises(RecordError, match=r"record line 1: not UTF-8 text"):
        load_streams(path)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"shard_size": 0}, "shard_size must be a whole number of records >= 1, got 0"),
        ({"workers": 0}, "workers must be a whole number >= 1, got 0"),
        ({"max_error_rate": -0.5}, "max_error_rate must be a share between 0 and 1, got -0.5"),
        ({"options": {"frame_rate": 0}}, "source 'ucf_crime': option frame_rate must be > 0, got 0"),
        ({"options": {"segments": "last"}}, r"option segments must be one of \['all', 'first'\], got 'last'"),
    ],
)
def test_bad_settings_name_the_option(tmp_path, kwargs, message):
    ann = tmp_path / "ucf.txt"
    ann.write_text("Normal_1.mp4  Normal  -1  -1  -1  -1\n")
    with pytest.raises(BuildFailed, match=message):
        build_source("ucf_crime", tmp_path / "out", annotations=ann, videos=tmp_path, **kwargs)


def test_cli_names_the_bad_option_and_exits_nonzero(tmp_path):
    ann = tmp_path / "ucf.txt"
    ann.write_text("Normal_1.mp4  Normal  -1  -1  -1  -1\n")
    base = [
        sys.executable,
        "-m",
        "data_builders",
        "build",
        "source=ucf_crime",
        f"annotations={ann}",
        f"videos={tmp_path}",
        f"out={tmp_path / 'out'}",
    ]
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    shard = subprocess.run([*base, "shard_size=0"], capture_output=True, text=True, timeout=120, env=env)
    assert (
        shard.returncode == 1
        and "build failed: shard_size must be a whole number of records >= 1, got 0" in shard.stderr
    )
    rate = subprocess.run([*base, "frame_rate=0"], capture_output=True, text=True, timeout=120, env=env)
    assert rate.returncode == 2 and "option frame_rate must be > 0, got 0.0" in rate.stderr
    assert "Traceback" not in shard.stderr + rate.stderr
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    cmd = [*base[:5], f"annotations={empty}", *base[6:]]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 1 and "empty.txt: annotation file is empty" in proc.stderr


def _info():
    from data_builders.video import VideoInfo

    return VideoInfo(duration=30.0, fps=30.0, n_frames=900, width=16, height=16)


# A writer of a build folder (``build``) or of the frame cache (``frames``) stopped in the middle of
# its write: ``die`` is killed there by SIGKILL (nothing of it runs after), ``hold`` says "writing" and
# waits there until its stdin is closed, then finishes.
WRITER = """
import os, signal, sys
import data_builders.build as build, data_builders.frame_cache as frame_cache
from data_builders.config import RenderConfig
from data_builders.frames import clip_jobs, stream_frames
from data_builders.frame_cache import FrameCache
mode, what, out, cache = sys.argv[1:]
def stop():
    if mode == "die":
        os.kill(os.getpid(), signal.SIGKILL)
    print("writing", flush=True)
    sys.stdin.read()
if what == "build":
    real_files = build.write_files
    def write_files(*args, **kwargs):
        files = real_files(*args, **kwargs)
        stop()
        return files
    build.write_files = write_files
    build.build_source("toy", out, options={"n": 2, "seed": 0}, workers=1)
else:
    real_npy = frame_cache._write_npy
    def write_npy(tmp, frames, n):
        tmp.write_bytes(b"cut")
        stop()
        real_npy(tmp, frames, n)
    frame_cache._write_npy = write_npy
    _, path, stream = clip_jobs(out)[0]
    render = RenderConfig(max_pixels=4096 if mode == "hold" else 1024)
    stream_frames(stream, path, render, 1.0, FrameCache(cache))
"""


def test_a_dead_writers_debris_goes_once_its_lock_is_free_a_live_ones_stays(tmp_path, caplog):
    from data_builders.frames import cache_frames

    out, cache = tmp_path / "toy", tmp_path / "frames"
    build_source("toy", out, options={"n": 2, "seed": 0}, workers=1)

    def writer(mode, what):
        cmd = [sys.executable, "-c", WRITER, mode, what, str(out), str(cache)]
        return subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    live = [writer("hold", "build"), writer("hold", "frames")]
    try:
        assert [proc.stdout.readline() for proc in live] == ["writing\n", "writing\n"]
        held = {*out.glob(".staging-*"), *cache.rglob("*.tmp")}
        assert len(held) == 2  # a staging folder and a cache entry being written
        for proc in [writer("die", "build"), writer("die", "frames")]:
            assert proc.wait(timeout=120) == -9
        dead = {*out.glob(".staging-*"), *cache.rglob("*.tmp")} - held
        assert sorted(p.suffix for p in dead) == ["", ".tmp"]  # their staging folder and cut cache entry
        with caplog.at_level(logging.INFO, logger="data_builders"):
            build_source("toy", out, options={"n": 2, "seed": 0}, workers=1)
            summary = cache_frames(out, cache, workers=1, progress=False)
        assert summary["failed"] == 0 and summary["clips"] == 2
        assert {*out.glob(".staging-*"), *cache.rglob("*.tmp")} == held  # the dead writers' files are gone
        removed = [r.getMessage() for r in caplog.records if "left by a writer that died" in r.getMessage()]
        assert sorted(removed) == sorted(f"removed {p}, left by a writer that died" for p in dead)
    finally:
        for proc in live:
            proc.stdin.close()
    assert [proc.wait(timeout=120) for proc in live] == [0, 0]  # the live writers finished their files
    assert not [*out.glob(".staging-*"), *cache.rglob("*.tmp")]
    assert len(list(cache.rglob("*.npy"))) == 3  # two clips at the stage's budget, one at the held writer's
    assert len(load_streams(out)) == 2


def test_a_clip_that_starts_before_zero_is_refused_by_the_build(tmp_path, mp4):
    mp4(tmp_path / "videos/pm.mp4", 30)
    rows = [
        {"id": "ok", "video": "pm.mp4", "clip_start": 0.0, "clip_end": 20.0, "trigger": None},
        {"id": "early", "video": "pm.mp4", "clip_start": -2.0, "clip_end": 20.0, "trigger": None},
    ]
    ann = tmp_path / "clips.json"
    ann.write_text(json.dumps(rows))
    report = build_source(
        "propermem", tmp_path / "out", annotations=ann, videos=tmp_path / "videos", max_error_rate=1.0
    )
    assert [s.id for s in report.records] == ["propermem-ok"]
    [error] = [e for e in report.errors if e.scope == "record"]
    assert (error.source_file, error.record) == (str(ann), "early")
    assert "field 'clip_start': a clip starts at 0 s or later on its record's clock, got -2.0" in error.reason
    # a records file holding such a clip (written by hand, or by an older build) is refused on reading
    bad = json.loads((tmp_path / "out/records.jsonl").read_text()) | {"clip_start": -2.0}
    (tmp_path / "bad.jsonl").write_text(json.dumps(bad) + "\n")
    with pytest.raises(
        RecordError, match=r"bad.jsonl, record propermem-ok, field 'clip_start': a clip starts"
    ):
        load_streams(tmp_path / "bad.jsonl")


def _toy_build(out: Path, seed: int) -> list[str]:
    return ["build", "source=toy", f"out={out}", "n=8", f"seed={seed}", "check_videos=false"]


def _tree(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` but its lock, by relative path."""
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


def _one_line(done) -> str:
    lines = [line for line in done.stderr.splitlines() if line.strip() and not line.startswith("INFO ")]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    return lines[0]


def test_a_build_into_a_read_only_folder_is_one_line_and_keeps_the_previous_build(tmp_path):
    """Was ``OSError: [Errno 30]`` and a traceback: now exit 2, one line naming the folder and the
    reason; the previous build is untouched and, the folder writable again, the same command builds."""
    out = tmp_path / "out"
    assert run_module("data_builders", *_toy_build(out, 0)).returncode == 0
    before = _tree(out)
    done = read_only_run("data_builders", _toy_build(out, 1), out)
    assert done.returncode == 2 and done.stdout == ""
    assert _one_line(done) == (
        f"build failed: cannot write in {out} ({out / '.lock'}): read-only file system: the previous "
        f"build in {out} is kept as it was; make it writable (or give another folder) and rerun the same "
        "command to go on"
    )
    assert _tree(out) == before
    again = run_module("data_builders", *_toy_build(out, 1))
    assert again.returncode == 0 and json.loads(again.stdout.splitlines()[-1])["records"] == 8


@pytest.mark.parametrize("budget", [150, 2000])  # the staged records.jsonl, then stats.json
def test_a_full_disk_during_a_build_is_one_line_naming_the_folder_and_the_space_left(tmp_path, budget):
    """Was a traceback naming no folder (the previous build was kept): now exit 2, one line naming
    the folder and the space left; the previous build stays byte for byte, nothing staged is left,
    and the same command with room again builds."""
    out = tmp_path / "out"
    assert run_module("data_builders", *_toy_build(out, 0)).returncode == 0
    before = _tree(out)
    done = full_disk_run("data_builders", _toy_build(out, 1), out, budget)
    assert done.returncode == 2 and done.stdout == ""
    line = _one_line(done)
    assert line.startswith(f"build failed: no space left writing in {out}; ") and f"free in {out}: " in line
    assert line.endswith(
        f"the previous build in {out} is kept as it was; free some space and rerun the same command to go on"
    )
    assert _tree(out) == before and [p.name for p in out.iterdir() if p.name.startswith(".")] == [".lock"]
    again = run_module("data_builders", *_toy_build(out, 1))
    assert again.returncode == 0 and _tree(out) != before
