"""streamingbench_proactive from the release's questions file: one stream per question, clipped as the
benchmark's harness cuts the video, and every malformed question named with its reason."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from data_builders.build import build_source
from data_builders.record_io import load_streams

ROOT = Path(__file__).resolve().parents[2]
SOURCE = "streamingbench_proactive"


def _rows(records):
    return {
        s.id: (
            s.clip_start,
            s.clip_end,
            s.instruction_time,
            [(t.time, t.content, t.label) for t in s.targets],
        )
        for s in records
    }


def test_release_fixture_one_stream_per_question(tmp_path, release):
    ann, videos = release(SOURCE)
    report = build_source(SOURCE, tmp_path / "out", annotations=ann, videos=videos, workers=2)
    assert report.errors == [] and report.n_failed == 0
    # clip = [time_stamp, ground_truth_time_stamp + 4] (the harness's last poll), cut to the video's end
    assert _rows(report.records) == {
        f"{SOURCE}-0-0": (5.0, 18.0, 5.0, [(14.0, "noon", "noon")]),
        f"{SOURCE}-1-0": (31.0, 44.0, 31.0, [(40.0, "Blue car", "Blue car")]),  # "0:00:31" (H:MM:SS)
        f"{SOURCE}-1-1": (50.0, 54.0, 50.0, [(50.0, "lid open", "lid open")]),  # due when asked
        f"{SOURCE}-2-0": (2.0, 13.0, 2.0, [(9.0, "7 points", "7 points")]),  # outside its segment's "time"
        f"{SOURCE}-3-0": (20.0, 28.0, 20.0, [(26.0, "Goal", "Goal")]),  # 26 + 4 s > the 28 s video
    }
    s = {r.id: r for r in report.records}[f"{SOURCE}-1-1"]
    assert s.task == SOURCE and s.instruction == 'When the pot lid is lifted, output "lid open" '
    assert s.video == "../release/videos/videos/sample_3_proactive.mp4"  # found at the pattern path
    release_file = json.loads(ann.read_text())
    assert s.meta == {
        "video_id": "./videos/sample_3_proactive.mp4",
        "benchmark_task": "Proactive Output",
        "entry": 1,
        "question_index": 1,
        "release_entry": {k: v for k, v in release_file[1].items() if k != "questions"},
        "release_question": release_file[1]["questions"][1],
    }


def test_malformed_questions_are_named_and_cost_only_themselves(tmp_path, release):
    ann, videos = release(SOURCE, real=False)
    data = json.loads(ann.read_text())
    good = data[0]["questions"][0]
    data[1]["questions"][0]["task_type"] = "Proactive Reminder"
    del data[1]["questions"][1]["time_stamp"]
    data[2]["questions"][0]["ground_truth_time_stamp"] = "00:00:9"
    data[3]["questions"][0]["time_stamp"] = "00:00:30"  # after its answer (00:00:26)
    data += [
        {"time": "[0:00:00 - 0:00:30]", "video_path": "./videos/sample_8_proactive.mp4", "questions": "none"},
        {**data[0], "questions": [{**good, "time_stamp": "00:61:00"}, {**good, "ground_truth_output": " "}]},
    ]
    ann.write_text(json.dumps(data))
    report = build_source(
        SOURCE, tmp_path / "out", annotations=ann, videos=videos, check_videos=False, max_error_rate=1.0
    )
    assert [s.id for s in report.records] == [f"{SOURCE}-0-0"]
    assert [(e.record, e.reason) for e in report.errors] == [
        (
            "[1].questions[0]",
            "field 'task_type': unknown task type 'Proactive Reminder' (known: Proactive Output)",
        ),
        ("[1].questions[1]", "field 'time_stamp': missing field"),
        (
            "[2].questions[0]",
            "field 'ground_truth_time_stamp': expected a time H:MM:SS (whole seconds, minutes and seconds "
            "00-59), got '00:00:9'",
        ),
        (
            "[3].questions[0]",
            "ground_truth_time_stamp 00:00:26 is before the question's time_stamp 00:00:30: the answer "
            "would be due before it is asked",
        ),
        ("[4]", "field 'questions': missing or not a list"),
        (
            "[5].questions[0]",
            "field 'time_stamp': expected a time H:MM:SS (whole seconds, minutes and seconds 00-59), "
            "got '00:61:00'",
        ),
        ("[5].questions[1]", "field 'ground_truth_output': expected a non-empty string, got ' '"),
    ]
    assert {e.source_file for e in report.errors} == {str(ann)}


def test_build_command_on_the_release_fixture(tmp_path, release):
    ann, videos = release(SOURCE)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "data_builders", "build", f"source={SOURCE}"]
    cmd += [f"annotations={ann}", f"videos={videos}", f"out={tmp_path / 'out'}", "workers=1"]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    records = load_streams(tmp_path / "out/records.jsonl")
    assert [(s.id, s.clip_end, s.targets[0].time) for s in records] == [
        (f"{SOURCE}-0-0", 18.0, 14.0),
        (f"{SOURCE}-1-0", 44.0, 40.0),
        (f"{SOURCE}-1-1", 54.0, 50.0),
        (f"{SOURCE}-2-0", 13.0, 9.0),
        (f"{SOURCE}-3-0", 28.0, 26.0),
    ]
    assert (tmp_path / "out/errors.jsonl").read_text() == ""
