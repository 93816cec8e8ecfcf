"""source=estp from ESTP-Bench's release structure (our own values in tests/benchmarks/fixtures/estp/): one
stream per qa, answers as windowed targets due at the paper's optimal time, every bad qa an error."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from data_builders.build import build_source
from data_builders.record_io import load_streams

FIXTURE = Path(__file__).parents[1] / "benchmarks" / "fixtures" / "estp"


def _videos(tmp_path, mp4):
    videos = tmp_path / "full_scale_2fps_max384"
    for uid, seconds in (("vid-a", 170), ("vid-b", 61), ("vid-c", 121)):
        mp4(videos / f"{uid}.mp4", seconds)
    return videos


def test_cli_builds_the_single_question_release(tmp_path, mp4):
    videos = _videos(tmp_path, mp4)
    out = tmp_path / "built"
    cmd = [
        sys.executable,
        "-m",
        "data_builders",
        "build",
        "source=estp",
        f"annotations={FIXTURE / 'estp_bench_sq.json'}",
        f"videos={videos}",
        f"out={out}",
    ]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    s = {x.id: x for x in load_streams(out / "records.jsonl")}
    assert sorted(s) == ["estp-vid-a-clip-1-0", "estp-vid-a-clip-1-1", "estp-vid-b-clip-7-0"]
    a0, a1, b0 = s["estp-vid-a-clip-1-0"], s["estp-vid-a-clip-1-1"], s["estp-vid-b-clip-7-0"]
    assert (a0.task, a0.source, a0.clip_start, a0.clip_end) == ("estp", "estp", 100.0, 160.0)
    # the single-question release gives the question no time: asked when the clip starts
    assert (a0.instruction, a0.instruction_time) == ("Remind me what the red tin on the counter is.", 100.0)
    # Object Recognition is answered on sight: due at the window's start
    assert [(t.time, t.window, t.content) for t in a0.targets] == [
        (110.0, (110.0, 114.0), "It is a tin of tomatoes."),
        (130.0, (130.0, 132.0), "The tin holds chopped tomatoes."),
    ]
    # Action Recognition (spelled with a trailing space in the file): due at the window's midpoint
    assert [(t.time, t.window) for t in a1.targets] == [(145.0, (140.0, 150.0))]
    assert a1.meta.pop("release")["question"] == "Tell me when I stir the pot."  # the qa as released
    assert a1.meta == {
        "video_id": "vid-a",
        "video_uid": "vid-a",
        "clip_uid": "clip-1",
        "qa_index": 1,
        "benchmark_task": "Action Recognition",
        "questions": [{"time": 100.0, "text": "Tell me when I stir the pot."}],
        "user_turns": [],  # a single question: no later turn
    }
    assert b0.video.endswith("full_scale_2fps_max384/vid-b.mp4") and b0.targets[0].time == 25.0


def test_contextual_release_keeps_every_question(tmp_path, mp4):
    videos = _videos(tmp_path, mp4)
    report = build_source(
        "estp", tmp_path / "out", annotations=FIXTURE / "estp_bench_cq_v3.json", videos=videos, workers=1
    )
    (s,) = report.records
    # clip bounds given as start_time / end_time; the first user turn is the instruction
    assert (s.clip_start, s.clip_end, s.instruction, s.instruction_time) == (
        50.0,
        120.0,
        "Where did I put the keys?",
        55.0,
    )
    assert s.meta["questions"] == [
        {"time": 55.0, "text": "Where did I put the keys?"},
        {"time": 80.0, "text": "And where are they now?"},
    ]
    # the later question is a user turn given at its time (engine.render.TurnRenderer.later_turns)
    assert s.meta["user_turns"] == [{"time": 80.0, "content": "And where are they now?"}]
    assert [(t.time, t.window) for t in s.targets] == [(60.0, (60.0, 62.0)), (90.0, (90.0, 91.0))]


def test_every_bad_qa_is_an_error_of_its_own(tmp_path, mp4):
    videos = _videos(tmp_path, mp4)
    release = json.loads((FIXTURE / "estp_bench_sq.json").read_text())
    qas = release["vid-a"]["clip-1"]
    qas[1]["Task Type"] = "Object Counting"  # not a task of the benchmark
    del qas[0]["conversation"][1]["end_time"]  # an answer without its interval
    release["vid-c"] = {
        "clip-2": [json.loads((FIXTURE / "estp_bench_cq_v3.json").read_text())["vid-c"]["clip-2"][0]]
    }
    del release["vid-c"]["clip-2"][0]["conversation"][2]["time"]  # a question with no time
    ann = tmp_path / "estp_bench_sq.json"
    ann.write_text(json.dumps(release))
    report = build_source(
        "estp", tmp_path / "out", annotations=ann, videos=videos, workers=1, max_error_rate=1.0
    )
    assert [s.id for s in report.records] == ["estp-vid-b-clip-7-0"]
    reasons = {e.record: e.reason for e in report.errors}
    assert sorted(reasons) == ["vid-a/clip-1[0]", "vid-a/clip-1[1]", "vid-c/clip-2[0]"]
    assert "missing field 'end_time'" in reasons["vid-a/clip-1[0]"]
    assert "unknown task type 'Object Counting'" in reasons["vid-a/clip-1[1]"]
    assert "conversation[2]: a question with no time" in reasons["vid-c/clip-2[0]"]
    assert all(e.source_file == str(ann) for e in report.errors)
