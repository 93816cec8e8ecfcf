"""``source=ovo``: OVO-Bench's release file (fixtures/ovo, our own items in its structure) -> streams.

The fixture holds one item of each of the twelve tasks: integer and float ``realtime`` values, a
question at 0.03 s, one past its 10 s video's end, an SSR item whose two steps' probes interleave in
time, a REC item with two probes at one time (11 and 11.0, as the release has) and a CRR item with
its ``ask_time``. Videos are 1 fps mp4s of the lengths in ``fixtures/ovo/videos.txt``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from data_builders.build import build_source
from data_builders.record_io import load_streams

ROOT = Path(__file__).resolve().parents[2]

# The official prompt for item 7, written out: the options lettered "A. x; B. y;" after the question,
# the template's own blank lines and the trailing space after "(e.g., A, B, C)." kept.
EPM_PROMPT = (
    "\nQuestion: Where did I put the red mug?\nOptions:\n"
    "A. in the sink; B. on the table; C. on the shelf; D. in the drawer;\n\n"
    "Respond only with the letter corresponding to your chosen option (e.g., A, B, C). \n"
    "Do not include any additional text or explanation in your response.\n"
)


def _build_cli(ann: Path, videos: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "data_builders", "build", "source=ovo", f"annotations={ann}"]
    cmd += [f"videos={videos}", f"out={out}", "workers=2", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)


def test_the_build_command_makes_one_stream_per_question_forward_item_and_ssr_step(tmp_path, release):
    ann, videos = release("ovo")
    run = _build_cli(ann, videos, tmp_path / "out")
    assert run.returncode == 0, run.stderr
    streams = {s.id: s for s in load_streams(tmp_path / "out/records.jsonl")}
    # 9 multiple-choice items, REC and CRR one stream each, SSR one per step
    assert sorted(streams) == sorted(
        [f"ovo-{i}" for i in (7, 305, 480, 650, 811, 902, 1010, 1101, 1230, 1470, 1560)]
        + ["ovo-1520-step0", "ovo-1520-step1"]
    )
    assert {s.task for s in streams.values()} == {"ovo"}
    epm = streams["ovo-7"]
    # the official cut is [0, ceil(12)]; the question and its target at 12 s, the letter of gt=2
    assert (epm.clip_start, epm.clip_end, epm.instruction_time) == (0.0, 12.0, 12.0)
    assert epm.instruction == EPM_PROMPT
    assert [(t.time, t.content, t.label) for t in epm.targets] == [(12.0, "C", "C")]
    release = {item["id"]: item for item in json.loads(ann.read_text())}
    assert epm.meta.pop("release") == release[7]  # the item as released, for eval.run's ground truth
    assert epm.meta == {
        "benchmark_task": "EPM",
        "part": "backward",
        "ovo_id": 7,
        "video_id": "Ego4D/clips/1b2e8c4d-7a90-4f3e-b6d1-2c9f0a7e5d34.mp4",
        "question": "Where did I put the red mug?",
        "realtime": 12.0,
    }
    assert (tmp_path / "out" / epm.video).resolve() == (
        videos / "Ego4D/clips/1b2e8c4d-7a90-4f3e-b6d1-2c9f0a7e5d34.mp4"
    ).resolve()
    # ASI at 9.5 s: the cut ends at ceil(9.5) = 10; OJR at 0.03 s: a 1 s clip
    assert (streams["ovo-305"].clip_end, streams["ovo-305"].targets[0].time) == (10.0, 9.5)
    assert (streams["ovo-811"].clip_end, streams["ovo-811"].targets[0].label) == (1.0, "A")
    # HLD at 11.5 s on a 10 s video: cut at the video's end, as the official cut is; counted
    hld = streams["ovo-480"]
    assert (hld.clip_end, hld.instruction_time, hld.targets[0].time) == (10.0, 10.0, 10.0)
    assert hld.meta["realtime"] == 11.5
    stats = json.loads((tmp_path / "out/stats.json").read_text())
    assert stats["conversion"]["past_video_end"] == 1
    # REC: one target per probe, the two at 11 s kept, the count as content and label; the clip to
    # ceil(16.5); the instruction at 0 (the count runs from the start)
    rec = streams["ovo-1560"]
    assert [(t.time, t.label) for t in rec.targets] == [(4.0, "1"), (11.0, "2"), (11.0, "2"), (16.5, "2")]
    assert (rec.clip_end, rec.instruction_time) == (17.0, 0.0)
    assert "Now, answer the following question: How many times did they clapping hands?\n" in rec.instruction
    assert [p["index"] for p in rec.meta["probes"]] == [0, 1, 2, 3] and rec.meta["n_probes"] == 4
    # SSR: the step of each stream in its prompt; its probes' places in test_info kept
    s0, s1 = streams["ovo-1520-step0"], streams["ovo-1520-step1"]
    assert "procedures: \nremove the old chain\nYour task" in s0.instruction
    assert [(t.time, t.label) for t in s0.targets] == [(3.0, "Yes"), (6.0, "Yes")]
    assert [(t.time, t.label) for t in s1.targets] == [(5.0, "No"), (9.0, "Yes"), (13.0, "Yes")]
    assert [p["index"] for p in s1.meta["probes"]] == [2, 3, 4] and s1.meta["step"] == "fit the new chain"
    assert s0.clip_end == s1.clip_end == 13.0 and s0.meta["n_probes"] == 5
    # CRR: the question given at ask_time (8 s), Yes/No per probe
    crr = streams["ovo-1470"]
    assert crr.instruction_time == 8.0 and crr.clip_end == 22.0
    assert [t.label for t in crr.targets] == ["No", "No", "Yes", "Yes"]


def test_unconvertible_items_are_listed_and_the_rest_built(tmp_path, release):
    ann, videos = release("ovo", real=False)
    items = json.loads(ann.read_text())
    bad = [
        {**items[0], "id": 9001, "task": "XYZ"},
        {**items[9], "id": 9002, "test_info": [{"realtime": 8, "type": 0}, {"type": 1}]},
        {**items[1], "id": 9003, "realtime": "0:09.5x"},
        {**items[2], "id": 9004, "gt": 4},
        {**items[11], "id": 9005, "test_info": []},
        {**items[10], "id": 9006, "test_info": [{"realtime": 3, "step": "remove the old chain", "type": 2}]},
    ]
    ann.write_text(json.dumps(items + bad))
    report = build_source(
        "ovo", tmp_path / "out", annotations=ann, videos=videos, check_videos=False, max_error_rate=1.0
    )
    assert len(report.records) == 13
    reasons = {e.record: e.reason for e in report.errors}
    assert reasons == {
        "id 9001": "field 'task': unknown task 'XYZ' (OVO-Bench's are EPM, ASI, HLD, STU, OJR, ATR, ACR, "
        "OCR, FPD, REC, SSR, CRR)",
        "id 9002": "field 'test_info[1].realtime': a probe needs its time",
        "id 9003": "field 'realtime': cannot parse time '0:09.5x'",
        "id 9004": "field 'gt': expected an option index 0..3, got 4",
        "id 9005": "field 'test_info': expected a non-empty list of probes",
        "id 9006": "field 'test_info[0].type': expected 0 (no) or 1 (yes), got 2",
    }
    # without probing, a clip ends at ceil(realtime) even past the video (nothing says otherwise)
    assert {s.id: s.clip_end for s in report.records}["ovo-480"] == 12.0
