"""source=proactivevideoqa: the release's ``<TASK>/anno.json`` files (our own values in the release's
structure, fixtures/proactivevideoqa/) -> one stream per question, through
``python -m data_builders build`` itself; bad items are the record's error, never a silent drop."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from data_builders.build import BuildFailed, build_source
from data_builders.record_io import load_streams

RELEASE = Path(__file__).parent / "fixtures" / "proactivevideoqa"
ROOT = Path(__file__).resolve().parents[2]


def release_copy(tmp_path: Path) -> Path:
    """The fixture release with (empty) video files in ``<TASK>/videos/``."""
    root = tmp_path / "ProactiveVideoQA"
    shutil.copytree(RELEASE, root)
    for task in ("EGO", "TV"):
        for rec in json.loads((root / task / "anno.json").read_text()):
            (root / task / "videos").mkdir(exist_ok=True)
            (root / task / "videos" / rec["video"]).touch()
    return root


def test_build_command_makes_one_stream_per_question(tmp_path):
    root = release_copy(tmp_path)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "data_builders",
            "build",
            "source=proactivevideoqa",
            f"annotations={root}",
            f"videos={root}",
            f"out={tmp_path / 'out'}",
            "check_videos=false",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1])["records"] == 3
    streams = {s.id: s for s in load_streams(tmp_path / "out" / "records.jsonl")}
    assert sorted(streams) == [
        "proactivevideoqa-EGO-ego_0001_q0",
        "proactivevideoqa-EGO-ego_0002_q0",
        "proactivevideoqa-TV-7",
    ]
    tea = streams["proactivevideoqa-EGO-ego_0001_q0"]
    assert (tea.source, tea.task, tea.clip_start, tea.clip_end) == (
        "proactivevideoqa",
        "proactivevideoqa",
        0.0,
        30.0,
    )
    assert (tea.instruction, tea.instruction_time) == ("Tell me each step I take while making tea.", 0.0)
    assert [(t.time, t.window, t.content) for t in tea.targets] == [
        (2.0, (2.0, 10.0), "You fill the kettle with water."),
        (12.0, (12.0, 20.0), "You put a tea bag in the cup."),
    ]
    assert tea.video == "../ProactiveVideoQA/EGO/videos/ego_kitchen_0001.mp4"  # relative to out
    tv = streams["proactivevideoqa-TV-7"]
    assert tv.meta["benchmark_task"] == "TV" and tv.meta["question_id"] == 7  # the release's id, type kept
    assert tv.meta["user_turns"] == [
        {"time": 0.0, "content": "Who enters the room?"},
        {"time": 5.5, "content": "Subtitle: Hello, is anyone home?"},
    ]
    assert tv.meta["answers"] == [{"reply_timespan": [10.0, 20.0], "related_timespan": [10.0, 12.0]}]


def test_bad_items_are_their_records_errors(tmp_path):
    root = release_copy(tmp_path)
    ego = json.loads((root / "EGO" / "anno.json").read_text())
    no_time = json.loads(json.dumps(ego[0]))
    no_time["question_id"] = "ego_x1"
    del no_time["conversation"][0]["time"]
    bad_span = json.loads(json.dumps(ego[0]))
    bad_span["question_id"] = "ego_x2"
    bad_span["answer"][1]["reply_timespan"] = ["12.0", "twenty"]
    no_answer = {**ego[1], "question_id": "ego_x3", "answer": []}
    (root / "EGO" / "anno.json").write_text(json.dumps([*ego, no_time, bad_span, no_answer]))
    report = build_source(
        "proactivevideoqa",
        tmp_path / "out",
        annotations=root / "EGO" / "anno.json",
        videos=root,
        check_videos=False,
        max_error_rate=1.0,
    )
    assert [s.id for s in report.records] == [
        "proactivevideoqa-EGO-ego_0001_q0",
        "proactivevideoqa-EGO-ego_0002_q0",
    ]
    assert [(e.record, e.reason) for e in report.errors] == [
        ("question_id ego_x1", "field 'conversation[0].time': missing"),
        ("question_id ego_x2", "field 'answer[1].reply_timespan': cannot parse time 'twenty'"),
        ("question_id ego_x3", "field 'answer': expected a non-empty list of answers"),
    ]
    (root / "Misc").mkdir()
    (root / "Misc" / "anno.json").write_text("[]")
    with pytest.raises(BuildFailed, match=r"folder\(s\) \['Misc'\] hold an anno.json but are not tasks"):
        build_source("proactivevideoqa", tmp_path / "out2", annotations=root, videos=root, check_videos=False)
