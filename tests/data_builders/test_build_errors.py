"""Broken records land in errors.jsonl with their reason; max_error_rate fails the build (driver and CLI)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from data_builders.build import BuildFailed, build_source

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def broken(tmp_path, mp4):
    """A nexar CSV with 2 good rows and 5 broken ones, and its videos (one missing, one truncated)."""
    videos = tmp_path / "videos"
    for name in ("good1", "good2", "span", "time"):
        mp4(videos / f"{name}.mp4", 25)
    truncated = mp4(videos / "truncated.mp4", 25)
    truncated.write_bytes(truncated.read_bytes()[: truncated.stat().st_size // 2])
    csv = tmp_path / "train.csv"
    csv.write_text(
        "file_name,time_of_event,time_of_alert\n"
        "good1.mp4,19.5,18.633\n"
        ",19.8,19.233\n"  # missing field
        "span.mp4,5.0,10.0\n"  # event before alert
        "time.mp4,abc,1.0\n"  # unparsable
        "missing.mp4,3.0,2.0\n"  # no such video
        "truncated.mp4,3.0,2.0\n"
        "good2.mp4,,\n"
    )
    return csv, videos


def test_every_broken_record_is_listed_with_its_reason(tmp_path, broken):
    csv, videos = broken
    report = build_source(
        "nexar", tmp_path / "out", annotations=csv, videos=videos, max_error_rate=1.0, workers=2
    )
    assert [s.id for s in report.records] == ["nexar-good1", "nexar-good2"]
    rows = [json.loads(x) for x in (tmp_path / "out/errors.jsonl").read_text().splitlines()]
    reasons = {r["record"]: r["reason"] for r in rows}
    assert all(r["source_file"] == str(csv) for r in rows)
    assert sorted(reasons) == ["missing", "row 3", "span", "time", "truncated"]
    assert "missing field 'file_name', 'video' or 'id'" in reasons["row 3"]
    assert "ends before it starts (10.0 > 5.0)" in reasons["span"]
    assert "cannot parse time 'abc'" in reasons["time"]
    assert (
        reasons["missing"]
        == f"video file missing: {videos / 'missing.mp4'} (no video named 'missing' under {videos})"
    )
    assert reasons["truncated"].startswith("unreadable video: ") and "truncated.mp4" in reasons["truncated"]
    stats = json.loads((tmp_path / "out/stats.json").read_text())
    assert stats["records"] == 2 and stats["negatives"] == 1


def test_missing_videos_are_listed_before_any_probe(tmp_path, broken):
    csv, videos = broken
    probed = []

    def probe(path, check_end):
        probed.append(path.name)
        assert "missing.mp4" not in probed
        from data_builders.video import probe_video

        return probe_video(path, check_end=check_end)

    report = build_source(
        "nexar", tmp_path / "out", annotations=csv, videos=videos, max_error_rate=1.0, probe=probe
    )
    assert "missing.mp4" not in probed and report.n_failed == 5 and report.n_source_records == 7


def test_error_rate_over_the_limit_fails_naming_the_count(tmp_path, broken):
    csv, videos = broken
    with pytest.raises(
        BuildFailed,
        match=r"5 of 7 source records \(71.43%\) could not be converted, above "
        r"max_error_rate=0",
    ):
        build_source("nexar", tmp_path / "out", annotations=csv, videos=videos, max_error_rate=0.0)
    # the failed build's files are kept aside for reading; nothing takes the place of a build in out/
    assert (tmp_path / "out/failed_build/errors.jsonl").read_text().count("\n") == 5
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["failed_build"]


def test_cli_build_fails_with_max_error_rate_zero(tmp_path, broken):
    csv, videos = broken
    cmd = [
        sys.executable,
        "-m",
        "data_builders",
        "build",
        "source=nexar",
        f"annotations={csv}",
        f"videos={videos}",
        f"out={tmp_path / 'cli'}",
        "max_error_rate=0",
    ]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "build failed: 5 of 7 source records (71.43%)" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cli", "train.csv", "videos"]  # nothing in the cwd


def test_duplicate_ids_are_errors(tmp_path, mp4):
    videos = tmp_path / "videos"
    mp4(videos / "a.mp4", 25)
    csv = tmp_path / "train.csv"
    csv.write_text("file_name,time_of_event,time_of_alert\na.mp4,19.5,18.633\na.mp4,,\n")
    report = build_source("nexar", tmp_path / "out", annotations=csv, videos=videos, max_error_rate=1.0)
    assert len(report.records) == 1
    assert [e.reason for e in report.errors] == ["duplicate id 'nexar-a' (first made from record a)"]


def test_target_far_after_the_video_end_is_dropped_not_made_a_negative(tmp_path, mp4):
    videos = tmp_path / "videos"
    mp4(videos / "short.mp4", 10)
    mp4(videos / "fine.mp4", 10)
    csv = tmp_path / "train.csv"
    csv.write_text(
        "file_name,time_of_event,time_of_alert\nshort.mp4,19.5,18.633\nfine.mp4,10.4,9.8\n"  # 8.6 s / 0.4 s late
    )
    report = build_source("nexar", tmp_path / "out", annotations=csv, videos=videos, max_error_rate=1.0)
    assert [(s.id, [(t.time, t.window) for t in s.targets]) for s in report.records] == [
        ("nexar-fine", [(9.8, (9.8, 10.0))])  # 0.4 s past the end: clamped
    ]
    [err] = report.errors  # its only target dropped: the record fails rather than becoming a negative
    assert (err.record, err.scope) == ("short", "record") and "not kept as a negative" in err.reason
    assert "target 0 at 18.633s (window (18.633, 19.5)) lies past the clip end [0.000, 10.000]" in err.reason
    assert report.counts["clamped_targets"] == 1


def test_a_failed_build_of_own_data_says_its_first_reasons_and_how_to_let_it_through(tmp_path):
    """As a user meets it: ``python -m data_builders build source=jsonl ...`` in a fresh process. One
    wrong key in a one-line file: the reason is on the line, and there was no previous build. One bad
    line of six: the rate that lets the build through is named, and that rate builds the five."""
    from tests.data_builders.test_jsonl_source import cli, example_lines, write_example

    write_example(tmp_path)
    (tmp_path / "one.jsonl").write_text('{"video": "desk.mp4", "instruction": "x", "respones": []}\n')
    args = ["build", "source=jsonl", "videos=videos", "out=data/built/mine"]
    proc = cli(*args, "annotations=one.jsonl", cwd=tmp_path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    line = proc.stderr.strip().splitlines()[-1]  # after the build's own INFO line
    assert line.startswith("build failed: no record was built (1 of 1 source records (100.00%) failed): ")
    assert "one.jsonl line 1: unknown field(s) ['respones']" in line
    assert line.endswith(f"(no previous build in {Path('data/built/mine')})")

    six = example_lines().splitlines() + ['{"video": "gone.mp4", "instruction": "x"}']
    (tmp_path / "six.jsonl").write_text("\n".join(six) + "\n")
    proc = cli(*args, "annotations=six.jsonl", cwd=tmp_path)
    line = proc.stderr.strip().splitlines()[-1]
    assert "1 of 6 source records (16.67%) could not be converted, above max_error_rate=0.01" in line
    assert (
        "(max_error_rate=0.17 lets this build through)" in line
        and "six.jsonl line 6: video file missing" in line
    )
    proc = cli(*args, "annotations=six.jsonl", "max_error_rate=0.17", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.splitlines()[-1])["records"] == 5


def test_a_failed_build_shows_three_reasons_and_counts_the_rest(tmp_path, mp4):
    csv, videos = tmp_path / "train.csv", tmp_path / "videos"
    mp4(videos / "a.mp4", 25)
    csv.write_text("id,time_of_event,time_of_alert,target\n" + "".join(f"{i},x,1.0,1\n" for i in range(5)))
    with pytest.raises(BuildFailed) as failed:
        build_source("nexar", tmp_path / "out", annotations=csv, videos=videos)
    message = str(failed.value)
    assert message.count("cannot parse time 'x'") == 3 and "(and 2 more)" in message
    assert "no previous build in" in message
