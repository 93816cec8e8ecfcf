"""The peers' definitions scored on the peers' own files: Em-Garde's online OVO-Bench F1 and
StreamingBench recall (``--mode online_emgarde``), GUI-Ego's reading of ESTP-F1 (``--mode guiego``)
and ProactiveVideoQA prediction files in Em-Garde's shape (no ``role``, the frame's clock).

Every expected number is worked out by hand in the comments beside it, from the rules of the files
followed (``air-embodied-brain/Em-Garde`` ``Em-Garde/eval/ovo_bench/ovo_bench_eval_online.py`` and
``Em-Garde/eval/streamingbench/streamingbench_eval_online.py``; ``CopeeeTang/GUI-Ego``
``proactive-project/experiments/estp_phase3/hypothesis_runner.py``), not by the code under test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from eval.score import main

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests/data_builders/fixtures"
OVO_GT = FIXTURES / "ovo/ovo_bench_new.json"
SB_GT = FIXTURES / "streamingbench_proactive/data/questions_proactive.json"


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def score(capsys, *args: str) -> tuple[int, dict | None, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, (json.loads(out.strip().splitlines()[-1]) if code == 0 else None), err


def cli(*args: str) -> subprocess.CompletedProcess:
    """``python -m eval.score`` run from the command line, in the repository root."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "eval.score", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


# ---------------------------------------------------------------------------------------------
# OVO-Bench, Em-Garde's online F1
#
# The fixture's forward items, in release order (Em-Garde's ids 0, 1, 2):
#   0 CRR 1470: ask_time 8, clue_time 14, last probe 22   -> window [9, 22], truth [14]
#   1 SSR 1520: start_time [2, 8], last probe 13          -> window [1, 13], truth [4, 10]
#   2 REC 1560: start_times [2, 9], last probe 16.5       -> window [1, 16.5], truth [4, 11]

OVO_LINES = [
    # CRR: 13 is the first detection within 2 s of 14 -> recall 1/1; precision 1/3
    {"id": 0, "task": "CRR", "detections": [9.0, 13.0, 15.0], "checked_detections": [], "gt_timestamp": [14]},
    # SSR: 4 takes 4.5, 10 finds none (5.0 is 5 s off); 30 lies past the window (left out, counted)
    #   -> recall 1/2, precision 1/2
    {
        "id": 1,
        "task": "SSR",
        "detections": [4.5, 5.0, 30.0],
        "checked_detections": [],
        "gt_timestamp": [4, 10],
    },
    # REC: 4 takes 2.0 (|2 - 4| = 2, the edge counts); 11 takes 12.5; 13.0 is left -> recall 2/2,
    #   precision 2/3. One to one: 2.0 cannot serve 11 as well.
    {
        "id": 2,
        "task": "REC",
        "detections": [2.0, 12.5, 13.0],
        "checked_detections": [],
        "gt_timestamp": [4, 11],
    },
]
# F1 per task from the two means (one question each): CRR 2*1*(1/3)/(4/3) = 0.5; SSR 0.5;
# REC 2*1*(2/3)/(5/3) = 0.8; Average F1@2s = (0.5 + 0.5 + 0.8) / 3 = 0.6.


def test_ovo_online_emgarde_worked_by_hand(tmp_path, capsys):
    code, m, err = score(
        capsys,
        "--protocol",
        "ovo",
        "--mode",
        "online_emgarde",
        "--gt",
        str(OVO_GT),
        "--pred",
        str(_jsonl(tmp_path / "ovo.jsonl", OVO_LINES)),
    )
    assert code == 0, err
    assert m["definition"] == "air-embodied-brain/Em-Garde/eval/ovo_bench/ovo_bench_eval_online.py"
    assert m["CRR"]["Recall@2s"] == 1.0 and m["CRR"]["Precision@2s"] == pytest.approx(1 / 3)
    assert m["CRR"]["F1@2s"] == pytest.approx(0.5)
    assert m["SSR"]["F1@2s"] == pytest.approx(0.5)
    assert m["REC"]["Precision@2s"] == pytest.approx(2 / 3) and m["REC"]["F1@2s"] == pytest.approx(0.8)
    assert m["Average F1@2s"] == pytest.approx(0.6)
    assert (m["questions"], m["scored"], m["failed"], m["missing"], m["outside_window"]) == (3, 3, 0, 0, 1)
    assert "outside_window = 1" in err


def test_ovo_online_emgarde_failed_and_missing_questions_leave_the_means(tmp_path, capsys):
    # Em-Garde skips a line with "error"; the REC question has no line at all. Only CRR is scored:
    # CRR F1 0.5, SSR and REC have no question (F1 0): Average F1@2s = 0.5 / 3.
    lines = [OVO_LINES[0], {"id": 1, "error": "CUDA out of memory"}]
    code, m, err = score(
        capsys,
        "--protocol",
        "ovo",
        "--mode",
        "online_emgarde",
        "--gt",
        str(OVO_GT),
        "--pred",
        str(_jsonl(tmp_path / "ovo.jsonl", lines)),
    )
    assert code == 0, err
    assert (m["failed"], m["missing"], m["SSR"]["n"], m["REC"]["n"]) == (1, 1, 0, 0)
    assert m["Average F1@2s"] == pytest.approx(0.5 / 3)
    assert "failed = 1 (e.g. id 1 (release id 1520, SSR))" in err and "missing = 1" in err


def test_ovo_online_emgarde_scores_checked_detections_of_a_should_respond_run(tmp_path, capsys):
    # The CRR line's triggers 9, 13, 15, of which only 15 got a reply: auto scores checked_detections
    # (some line holds one) -> 15 is within 2 s of 14: recall 1, precision 1/1; F1 1 -> average 1/3.
    line = {**OVO_LINES[0], "checked_detections": [{"time": 15.0, "response": "His sister."}]}
    pred = str(_jsonl(tmp_path / "ovo.jsonl", [line]))
    args = ["--protocol", "ovo", "--mode", "online_emgarde", "--gt", str(OVO_GT), "--pred", pred]
    code, m, _ = score(capsys, *args)
    assert m["detections_scored"] == "checked_detections" and m["CRR"]["Precision@2s"] == 1.0
    assert m["Average F1@2s"] == pytest.approx(1 / 3)
    code, m, _ = score(capsys, *args, "--detections", "detections")  # every trigger: precision 1/3
    assert m["CRR"]["Precision@2s"] == pytest.approx(1 / 3)


@pytest.mark.parametrize(
    "line, message",
    [
        ({"id": 7, "detections": []}, "expected a question's place in the release, 0 to 2, got 7"),
        ({"id": 0, "detections": ["soon"]}, "cannot parse time 'soon'"),
        ({"id": 0, "detections": [], "gt_timestamp": [15]}, "[15] here but [14.0] from the release"),
        ({"id": 0, "task": "REC", "detections": []}, "'REC' here but 'CRR' in the release"),
    ],
)
def test_ovo_online_emgarde_bad_lines_are_named(tmp_path, capsys, line, message):
    pred = _jsonl(tmp_path / "ovo.jsonl", [line])
    code, _, err = score(
        capsys, "--protocol", "ovo", "--mode", "online_emgarde", "--gt", str(OVO_GT), "--pred", str(pred)
    )
    assert code == 2 and message in err and "line 1" in err and str(pred) in err


def test_an_unknown_mode_is_named_with_the_protocol_modes(tmp_path, capsys):
    pred = _jsonl(tmp_path / "ovo.jsonl", OVO_LINES)
    code, _, err = score(
        capsys, "--protocol", "ovo", "--mode", "online", "--gt", str(OVO_GT), "--pred", str(pred)
    )
    assert code == 2 and "no scoring mode 'online' (its modes: official, online_emgarde)" in err


# ---------------------------------------------------------------------------------------------
# StreamingBench Proactive Output, Em-Garde's Recall / Accuracy at 2 s and 1 s
#
# The fixture's five questions (Em-Garde's ids 0-4): ground truths 14, 40, 50, 9, 26 s.

SB_LINES = [
    # gt 14: 12.5 (1.5 s) first -> Recall@2 yes, Accuracy@2 yes; 14.0 -> Recall@1 yes; Accuracy@1 no
    {"id": 0, "detections": [12.5, 14.0], "checked_detections": [], "gt_timestamp": 14},
    # gt 40: 37 (3 s) first -> Accuracy@2 no; 39.5 -> Recall@2 and Recall@1 yes
    {"id": 1, "detections": [37.0, 39.5], "checked_detections": [], "gt_timestamp": 40},
    {"id": 2, "error": "decord could not read the video"},  # failed: counts in the denominator
    {"id": 3, "detections": [], "checked_detections": [], "gt_timestamp": 9},  # silent: nothing
    # id 4 has no line: missing, counts in the denominator as well
]
# Over all 5 questions: Recall@2s 2/5, Accuracy@2s 1/5, Recall@1s 2/5, Accuracy@1s 0/5.


def test_streamingbench_online_emgarde_worked_by_hand(tmp_path, capsys):
    code, m, err = score(
        capsys,
        "--protocol",
        "streamingbench_proactive",
        "--mode",
        "online_emgarde",
        "--gt",
        str(SB_GT),
        "--pred",
        str(_jsonl(tmp_path / "sb.jsonl", SB_LINES)),
    )
    assert code == 0, err
    assert m["definition"] == "air-embodied-brain/Em-Garde/eval/streamingbench/streamingbench_eval_online.py"
    figures = [m[k] for k in ("Recall@2s", "Accuracy@2s", "Recall@1s", "Accuracy@1s")]
    assert figures == pytest.approx([0.4, 0.2, 0.4, 0.0])
    assert (m["questions"], m["scored"], m["failed"], m["missing"]) == (5, 3, 1, 1)


def test_streamingbench_online_emgarde_leaves_out_what_its_harness_cannot_see(tmp_path, capsys):
    # question 0 is asked at 5 s, gt 14: Em-Garde watches [6, 18]. 5.0 is before it, 19.0 after it:
    # both left out and counted, so nothing is detected: all four figures 0.
    line = {"id": 0, "detections": [5.0, 19.0], "checked_detections": []}
    code, m, err = score(
        capsys,
        "--protocol",
        "streamingbench_proactive",
        "--mode",
        "online_emgarde",
        "--gt",
        str(SB_GT),
        "--pred",
        str(_jsonl(tmp_path / "sb.jsonl", [line])),
    )
    assert m["outside_window"] == 2 and m["Recall@2s"] == 0.0 and m["missing"] == 4


# ---------------------------------------------------------------------------------------------
# From the command line, on a peer-shaped file, for each new mode


def test_each_new_mode_runs_from_the_command_line(tmp_path):
    ovo = cli(
        "--protocol",
        "ovo",
        "--mode",
        "online_emgarde",
        "--gt",
        str(OVO_GT),
        "--pred",
        str(_jsonl(tmp_path / "ovo.jsonl", OVO_LINES)),
    )
    assert ovo.returncode == 0, ovo.stderr
    assert json.loads(ovo.stdout.strip().splitlines()[-1])["Average F1@2s"] == pytest.approx(0.6)
    sb = cli(
        "--protocol",
        "streamingbench_proactive",
        "--mode",
        "online_emgarde",
        "--gt",
        str(SB_GT),
        "--pred",
        str(_jsonl(tmp_path / "sb.jsonl", SB_LINES)),
    )
    assert sb.returncode == 0, sb.stderr
    assert json.loads(sb.stdout.strip().splitlines()[-1])["Recall@2s"] == pytest.approx(0.4)
    bad = cli(
        "--protocol",
        "ovo",
        "--mode",
        "online_emgarde",
        "--gt",
        str(OVO_GT),
        "--pred",
        str(_jsonl(tmp_path / "bad.jsonl", [{"id": 0, "detections": "soon"}])),
    )
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "expected a list" in bad.stderr


# ---------------------------------------------------------------------------------------------
# ESTP-Bench: the project's ESTP-F1 (default) and GUI-Ego's reading (--mode guiego)

ESTP_QA = {
    "clip_start_time": 0.0,
    "clip_end_time": 60.0,
    "Task Type": "Object Recognition",  # OR: the optimal time is the answer's start
    "question": "Tell me when you see the red mug.",
    "conversation": [
        {
            "role": "assistant",
            "content": "The red mug is on the table.",
            "start_time": 10.2,
            "end_time": 14.0,
        },
        {"role": "assistant", "content": "The red mug is in the sink.", "start_time": 30.0, "end_time": 31.0},
    ],
}
ESTP_REPLIES = [9.4, 12.0, 40.0]
# GUI-Ego: the spans rounded up to the 0.5 s grid, (10.5, 14.0) and (30.0, 31.0); windows [9.5, 16]
#   and [29, 33]. 9.4 misses (before 9.5), 12.0 hits the first, 40.0 hits nothing: hits 1, FP 2 ->
#   P 1/3, R 1/2, F1 2 (1/6) / (5/6) = 0.4 -> ESTP-F1 40.0 (one task, one question).
# The project's (timing only, --content any: every answer rated 5): window [9.2, 16] holds 9.4 and
#   12.0; scale = 3.8 + 1 + 2 = 6.8; S(9.4) = (5 + 5 (1 - 0.8 / 6.8)) / 10 = 0.9411765,
#   S(12.0) = (5 + 5 (1 - 1.8 / 6.8)) / 10 = 0.8676471, S(g1) = their mean 0.9044118, S(g2) = 0;
#   FP 1 (40.0): P = 0.9044118 / (1 + 1), R = 0.9044118 / 2, F1 = 0.4522059 -> 45.22.


def _estp_files(tmp_path: Path) -> tuple[Path, Path]:
    gt = tmp_path / "estp_bench_sq.json"
    gt.write_text(json.dumps({"vid": {"clip": [ESTP_QA]}}))
    turns = [{"role": "assistant", "content": "A red mug.", "time": t} for t in ESTP_REPLIES]
    pred = tmp_path / "MyModel.json"
    pred.write_text(json.dumps({"vid": {"clip": [{**ESTP_QA, "MyModel": {"dialog_history": turns}}]}}))
    return gt, pred


def test_estp_both_readings_worked_by_hand(tmp_path, capsys):
    gt, pred = _estp_files(tmp_path)
    base = ["--protocol", "estp", "--gt", str(gt), "--pred", str(pred), "--content", "any"]
    code, ours, err = score(capsys, *base)
    assert code == 0, err
    assert ours["ESTP-F1"] == pytest.approx(100 * 0.4522059, abs=1e-4)
    assert ours["definition"].startswith("proactive-vlm metrics/estp.py")
    code, theirs, err = score(capsys, *base, "--mode", "guiego")
    assert code == 0, err
    assert theirs["mode"] == "guiego" and theirs["definition"].startswith(
        "CopeeeTang/GUI-Ego/proactive-project/"
    )
    assert theirs["ESTP-F1"] == pytest.approx(40.0) and theirs["mean_over_questions"] == pytest.approx(40.0)
    assert theirs["tasks"] == {"OR": pytest.approx(40.0)}


def test_estp_guiego_runs_from_the_command_line(tmp_path):
    gt, pred = _estp_files(tmp_path)
    done = cli("--protocol", "estp", "--mode", "guiego", "--gt", str(gt), "--pred", str(pred))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["ESTP-F1"] == pytest.approx(40.0)


# ---------------------------------------------------------------------------------------------
# ProactiveVideoQA: Em-Garde's prediction file (no role; times on the frame's clock)
#
# The fixture's TV question 7: one answer, reply span [10, 20], related span ending at 12 s.
# Em-Garde writes a reply at the time of the newest frame its detector saw (its step ``curr_time``);
# MMDuet2's inference, one frame interval later (the seconds of video seen).

PVQA_RELEASE = FIXTURES / "proactivevideoqa"
EMGARDE_TV = [
    {
        "question_id": 7,
        "model_response_list": [
            {"time": 10.5, "content": "Penny walks in."},
            {"time": 14.5, "content": "Sheldon sits."},
        ],
    }
]
PVQA_JUDGE = {"Penny walks in.": "Score: 3", "Penny walks in. Sheldon sits.": "Score: 1"}
# As written (frame clock): 3 at 10.5 s; the 1 at 14.5 s comes after the related span and is worse:
#   dropped. omega 0: 0.5 x 0.5 s + 2 x 9.5 s = 19.25 of 20 -> 96.25.
# Moved to MMDuet2's clock (--score-clock frames_seen --frame-interval 0.5): 3 at 11 s ->
#   0.5 x 1 + 2 x 9 = 18.5 of 20 -> 92.5, the figure of MMDuet2's file with the same replies at 11 s.


def _pvqa(server, tmp_path, pred: Path, *extra: str) -> list[str]:
    return [
        "--protocol",
        "proactivevideoqa",
        "--gt",
        str(PVQA_RELEASE / "TV" / "anno.json"),
        "--pred",
        str(pred),
        "--judge-url",
        server.url,
        "--judge-model",
        "tiny-judge",
        "--judge-cache",
        str(tmp_path / "j.sqlite"),
        *extra,
    ]


def _judge(prompt: str) -> str:
    return PVQA_JUDGE[prompt.split("Predicted answer: ", 1)[1].split("\n", 1)[0]]


def test_pvqa_emgarde_file_scored_on_its_stated_clock(tmp_path, capsys, chat_server):
    pred = _jsonl(tmp_path / "pred.jsonl", EMGARDE_TV)
    with chat_server(_judge) as server:
        code, m, err = score(capsys, *_pvqa(server, tmp_path, pred))
        assert code == 0, err
        assert m["omega=0"] == 96.25
        assert m["reply_clock"] == {
            "shape": "emgarde",
            "file_clock": "frame",
            "file_clock_from": "the file's shape (emgarde)",
            "scored_on": "frame",
            "shift_s": 0.0,
        }
        code, m, err = score(
            capsys, *_pvqa(server, tmp_path, pred, "--score-clock", "frames_seen", "--frame-interval", "0.5")
        )
        assert code == 0, err
        assert m["omega=0"] == 92.5 and m["reply_clock"]["shift_s"] == 0.5
        assert m["reply_clock"]["scored_on"] == "frames_seen"
        # the move needs the interval, and says so
        code, _, err = score(capsys, *_pvqa(server, tmp_path, pred, "--score-clock", "frames_seen"))
        assert code == 2 and "needs the file's frame interval: --frame-interval SECONDS" in err
        # the same file stated to be on MMDuet2's clock is moved the other way
        code, m, _ = score(
            capsys,
            *_pvqa(
                server,
                tmp_path,
                pred,
                "--pred-clock",
                "frames_seen",
                "--score-clock",
                "frame",
                "--frame-interval",
                "0.5",
            ),
        )
        assert m["reply_clock"]["shift_s"] == -0.5 and m["reply_clock"]["file_clock_from"] == "--pred-clock"


def test_pvqa_emgarde_failed_run_is_scored_as_no_reply_and_counted(tmp_path, capsys, chat_server):
    pred = _jsonl(tmp_path / "pred.jsonl", [{"id": 7, "error": "CUDA out of memory"}])
    with chat_server(_judge) as server:
        code, m, err = score(capsys, *_pvqa(server, tmp_path, pred))
    assert code == 0, err
    # no reply: the paper's 0.25 for the turn -> 25.0 at every omega
    assert (m["omega=0"], m["failed_predictions"], m["missing_predictions"]) == (25.0, 1, 0)
    assert "1 question(s) whose run failed" in err


def test_pvqa_a_file_mixing_shapes_is_refused(tmp_path, capsys, chat_server):
    line = {
        "question_id": 7,
        "model_response_list": [
            {"role": "assistant", "time": 11.0, "content": "Penny walks in."},
            {"time": 14.5, "content": "Sheldon sits."},
        ],
    }
    pred = _jsonl(tmp_path / "pred.jsonl", [line])
    with chat_server(_judge) as server:
        code, _, err = score(capsys, *_pvqa(server, tmp_path, pred))
    assert (
        code == 2 and "with a role (MMDuet2's shape) and without one (Em-Garde's)" in err and str(pred) in err
    )


def test_pvqa_emgarde_file_scores_from_the_command_line(tmp_path, chat_server):
    pred = _jsonl(tmp_path / "pred.jsonl", EMGARDE_TV)
    with chat_server(_judge) as server:
        done = cli(*_pvqa(server, tmp_path, pred))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["omega=0"] == 96.25
