"""ProactiveVideoQA's official format: ``eval.score --protocol proactivevideoqa`` on release-structured
annotation files (our own values, tests/data_builders/fixtures/proactivevideoqa/) and MMDuet2-format
``pred.jsonl`` files, the judge a local OpenAI-compatible endpoint on 127.0.0.1 (the real judge
client, its cache and its counters); the PAUC arithmetic by hand; bad input; the round trip
records + predictions -> official files -> the official reader."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from benchmarks.protocols.proactivevideoqa import read_release, write_predictions
from data_builders.records import Stream
from data_builders.sources.proactivevideoqa import parse_question, stream_of
from engine.replies import Prediction, Reply
from eval import score
from metrics.proactivevideoqa import NO_REPLY_PAUC, drop_late_regressions, turn_area, turn_pauc

RELEASE = Path(__file__).resolve().parents[1] / "data_builders" / "fixtures" / "proactivevideoqa"


def assistant(time, content):
    return {"role": "assistant", "content": content, "time": time}


#: MMDuet2's pred.jsonl lines (user turns kept for reading, as its inference writes them).
EGO_PRED = [
    {
        "question_id": "ego_0001_q0",
        "model_response_list": [
            {"role": "user", "content": "Tell me each step I take while making tea.", "time": 0.0},
            assistant(1.0, "You turn on the light."),  # before the first span: never judged
            assistant(4.0, "You fill the kettle."),
            assistant(6.0, "You fill the kettle."),  # a repeat: not judged again
            assistant(7.0, "NO REPLY"),  # MMDuet2's silence
            assistant(8.0, "The kettle has water in it."),
            assistant(14.0, "You add a tea bag."),
            assistant(16.0, "It steeps."),  # the judge's answer to this one does not parse
            assistant(22.0, "You drink."),  # after every span
        ],
    },
    # ego_0002_q0 has no line: a missing prediction
]
TV_PRED = [
    {
        "question_id": 7,
        "model_response_list": [
            assistant(11.0, "Penny walks in."),
            assistant(15.0, "Sheldon sits."),  # after the related span and worse: dropped
        ],
    }
]

#: The judge's answer per predicted answer (everything said in the span so far, joined).
ANSWERS = {
    "You fill the kettle.": "Score: 2",
    "You fill the kettle. The kettle has water in it.": "Score: 3",
    "You add a tea bag.": "3",
    "You add a tea bag. It steeps.": "It covers most of it.",
    "Penny walks in.": "score: 3",
    "Penny walks in. Sheldon sits.": "Score: 1",
}


def judge_answer(prompt: str) -> str:
    prediction = prompt.split("Predicted answer: ", 1)[1].split("\n", 1)[0]
    return ANSWERS[prediction]


def write_lines(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def run_score(capsys, gt, pred, server, tmp_path, *extra):
    code = score.main(
        [
            "--protocol",
            "proactivevideoqa",
            "--gt",
            str(gt),
            "--pred",
            str(pred),
            "--judge-url",
            server.url,
            "--judge-model",
            "tiny-judge",
            "--judge-cache",
            str(tmp_path / "judge.sqlite"),
            *extra,
        ]
    )
    out, err = capsys.readouterr()
    return code, (json.loads(out.strip().splitlines()[-1]) if code == 0 else None), err


def test_pauc_arithmetic_by_hand():
    # span [2, 10] (8 s): 0.5 until 4 s, then score 2 -> 1, from 8 s score 3 -> 2
    # omega 0: 0.5*2 + 1*4 + 2*2 = 9 of 16; omega 0.5 (times halved): 0.5*1 + 1*2 + 2*5 = 12.5 of 16
    assert turn_area({4.0: 2, 8.0: 3}, (2.0, 10.0), 0.0) == 9 / 16
    assert turn_area({4.0: 2, 8.0: 3}, (2.0, 10.0), 0.5) == 12.5 / 16
    assert turn_area({4.0: 2, 8.0: 3}, (2.0, 10.0), 1.0) == 1.0
    # a wrong first reply is worse than silence (0 against 0.25); a zero-length span with a reply is 0
    assert turn_area({2.0: 1}, (2.0, 10.0), 0.0) == 0.0 and turn_area({}, (2.0, 10.0), 0.0) == NO_REPLY_PAUC
    assert turn_area({3.0: 3}, (3.0, 3.0), 0.0) == 0.0
    # a late reply (after the related span) worse than the last related score is dropped
    assert drop_late_regressions({11.0: 3, 15.0: 1}, 12.0) == {11.0: 3}
    assert turn_pauc({11.0: 3, 15.0: 1}, (10.0, 20.0), 12.0)[0.0] == 18.5 / 20
    with pytest.raises(ValueError, match="judge score at 4.0s must be 1..3, got 0"):
        turn_area({4.0: 0}, (2.0, 10.0), 0.0)


def test_eval_score_on_the_release_and_mmduet2_predictions(tmp_path, capsys, chat_server):
    preds = tmp_path / "preds"
    write_lines(preds / "ego" / "pred.jsonl", EGO_PRED)
    write_lines(preds / "tv" / "pred.jsonl", TV_PRED)
    with chat_server(judge_answer) as server:
        code, res, err = run_score(capsys, RELEASE, preds, server, tmp_path)
        assert code == 0, err
        # judged points, cumulative in their span: (4 s) (8 s) | (14 s) (16 s) | (11 s) (15 s)
        assert len(server.prompts) == 6
        first = server.prompts[0]
        assert "Question: Tell me each step I take while making tea." in first
        assert "Reference answer: You fill the kettle with water." in first
        assert "Predicted answer: You fill the kettle.\n" in first
        # Worked by hand (PAUC of a turn at omega 0 / 0.5 / 1):
        #  EGO q1 turn 0, span [2, 10]: scores 2 at 4 s, 3 at 8 s -> 9/16, 12.5/16, 16/16
        #  EGO q1 turn 1, span [12, 20]: 3 at 14 s (16 s unrated, left out): 0.5*2 + 2*6 = 13/16;
        #    omega 0.5: 0.5*1 + 2*7 = 14.5/16; omega 1: 16/16
        #  EGO q2 (no prediction): 0.25 at every omega
        #  TV 7, span [10, 20], related ends 12: 3 at 11 s; 1 at 15 s dropped (worse, late):
        #    0.5*1 + 2*9 = 18.5/20; 0.5*0.5 + 2*9.5 = 19.25/20; 20/20
        #  all four turns, omega 0: (0.5625 + 0.8125 + 0.25 + 0.925) / 4 = 0.6375 -> 63.75
        #  omega 0.5: (0.78125 + 0.90625 + 0.25 + 0.9625) / 4 = 0.725 -> 72.5; omega 1: 3.25 / 4 -> 81.25
        #  EGO (3 turns): 1.625/3 -> 54.17, 1.9375/3 -> 64.58, 2.25/3 -> 75.0; TV: 92.5, 96.25, 100.0
        assert (res["omega=0"], res["omega=0.5"], res["omega=1"]) == (63.75, 72.5, 81.25)
        assert (res["num_videos"], res["num_turns"]) == (3, 4)
        assert res["per_task"] == {
            "EGO": {"omega=0": 54.17, "omega=0.5": 64.58, "omega=1": 75.0, "num_videos": 2, "num_turns": 3},
            "TV": {"omega=0": 92.5, "omega=0.5": 96.25, "omega=1": 100.0, "num_videos": 1, "num_turns": 1},
        }
        assert (res["missing_predictions"], res["missing_examples"]) == (1, ["EGO/ego_0002_q0"])
        assert (res["judged"], res["unrated"]) == (6, 1)
        assert res["judge"]["unparsable"] == 1 and res["judge"]["requests"] == 6
        assert "1 question(s) have no prediction, scored as no reply (e.g. EGO/ego_0002_q0)" in err
        assert "1 of 6 judged point(s) could not be rated" in err

        # one task's file and that task's pred.jsonl: the same figures as the task's, from the cache
        code, one, err = run_score(
            capsys, RELEASE / "TV" / "anno.json", preds / "tv" / "pred.jsonl", server, tmp_path
        )
        assert code == 0, err
        assert (one["omega=0"], one["omega=0.5"], one["omega=1"]) == (92.5, 96.25, 100.0)
        assert "per_task" not in one and one["judge"] == {
            "requests": 0,
            "cache_hits": 2,
            "unparsable": 0,
            "request_errors": 0,
            "endpoint_down": None,
        }
        assert len(server.prompts) == 6


def test_bad_input_names_the_file_the_item_and_the_reason(tmp_path, capsys, chat_server):
    root = tmp_path / "release"
    shutil.copytree(RELEASE, root)
    preds = tmp_path / "preds"
    with chat_server(judge_answer) as server:

        def fails(gt, rows, *extra) -> str:
            write_lines(preds / "pred.jsonl", rows)
            code, _, err = run_score(capsys, gt, preds / "pred.jsonl", server, tmp_path, *extra)
            assert code == 2
            return err

        tv = root / "TV" / "anno.json"
        err = fails(tv, [{"question_id": 8, "model_response_list": []}])
        assert f"file {preds / 'pred.jsonl'}" in err and "no question '8' in the ground truth" in err
        err = fails(tv, [{"question_id": 7, "model_response_list": [assistant("12s", "Penny.")]}])
        assert "record line 1 (question_id 7)" in err and "cannot parse time '12s'" in err
        err = fails(
            tv, [{"question_id": 7, "model_response_list": [{"role": "assistant", "content": "Penny."}]}]
        )
        assert "field 'model_response_list[0].time': a reply has no time" in err
        err = fails(tv, [{"question_id": 7, "model_response_list": [assistant(12, "b"), assistant(11, "a")]}])
        assert "replies must be in time order" in err
        err = fails(tv, [TV_PRED[0], TV_PRED[0]])
        assert (
            "record line 2 (question_id 7)" in err
            and "a second line for this question (first on line 1)" in err
        )
        # the replies twice on one line, the second empty: a JSON reader kept [] (the question silent)
        line = json.dumps(TV_PRED[0])[:-1] + ', "model_response_list": []}\n'
        (preds / "pred.jsonl").write_text(line)
        code, _, err = run_score(capsys, tv, preds / "pred.jsonl", server, tmp_path)
        assert code == 2 and f"file {preds / 'pred.jsonl'}, record line 1: key 'model_response_list'" in err

        # ground truth: a probe with no time, a folder that is no task, a file outside the layout
        bad = json.loads(tv.read_text())
        del bad[0]["conversation"][1]["time"]
        tv.write_text(json.dumps(bad))
        err = fails(tv, TV_PRED)
        assert f"file {tv}, record question_id 7: field 'conversation[1].time': missing" in err
        (root / "XYZ").mkdir()
        (root / "XYZ" / "anno.json").write_text("[]")
        err = fails(root, TV_PRED)
        assert "folder(s) ['XYZ'] hold an anno.json but are not tasks of the benchmark" in err
        loose = tmp_path / "anno.json"
        loose.write_text("[]")
        assert "cannot tell the task of this file" in fails(loose, TV_PRED)
        # the judge is named before anything is read
        code = score.main(["--protocol", "proactivevideoqa", "--gt", str(root), "--pred", str(preds)])
        assert code == 2 and "the judge needs a model: set --judge-model" in capsys.readouterr().err


def test_records_and_predictions_round_trip_to_the_official_reader(tmp_path, capsys, chat_server):
    streams = [
        stream_of(parse_question(rec, task), f"{task}/videos/{rec['video']}")
        for task in ("EGO", "TV")
        for rec in json.loads((RELEASE / task / "anno.json").read_text())
    ]
    assert [s.id for s in streams] == [
        "proactivevideoqa-EGO-ego_0001_q0",
        "proactivevideoqa-EGO-ego_0002_q0",
        "proactivevideoqa-TV-7",
    ]
    streams = [Stream.from_dict(s.to_dict()) for s in streams]  # as read back from records.jsonl
    ours = [
        Prediction(
            "proactivevideoqa-EGO-ego_0001_q0",
            [
                Reply(r["time"], r["content"])
                for r in EGO_PRED[0]["model_response_list"]
                if r["role"] == "assistant"
            ],
        ),
        Prediction("proactivevideoqa-TV-7", [Reply(11.0, "Penny walks in."), Reply(15.0, "Sheldon sits.")]),
    ]
    paths = write_predictions(streams, ours, tmp_path / "official", reply_clock="frame")
    assert paths == [
        tmp_path / "official" / "ego" / "pred.jsonl",
        tmp_path / "official" / "tv" / "pred.jsonl",
    ]
    tv = [json.loads(line) for line in paths[1].read_text().splitlines()]
    assert tv == [
        {
            "question_id": 7,  # the release's own id, type kept
            "model_response_list": [
                {"role": "user", "content": "Who enters the room?", "time": 0.0},
                {"role": "user", "content": "Subtitle: Hello, is anyone home?", "time": 5.5},
                assistant(11.0, "Penny walks in."),
                assistant(15.0, "Sheldon sits."),
            ],
        }
    ]
    with chat_server(judge_answer) as server:
        code, res, err = run_score(capsys, RELEASE, tmp_path / "official", server, tmp_path)
    assert code == 0, err
    assert (res["omega=0"], res["omega=0.5"], res["omega=1"]) == (63.75, 72.5, 81.25)
    assert res["missing_predictions"] == 1
    # the benchmark's released inference writes a reply at the seconds of video seen: one frame
    # interval after the frame it follows (1 s at 1 frame/s, 0.5 s at 2)
    for sps, later in ((1.0, 1.0), (2.0, 0.5)):
        [_, tv_path] = write_predictions(
            streams, ours, tmp_path / f"seen{sps}", reply_clock="frames_seen", steps_per_second=sps
        )
        [line] = [json.loads(x) for x in tv_path.read_text().splitlines()]
        said = [(t["time"], t["content"]) for t in line["model_response_list"] if t["role"] == "assistant"]
        assert said == [(11.0 + later, "Penny walks in."), (15.0 + later, "Sheldon sits.")]
    with pytest.raises(ValueError, match="reply_clock must be one of frame, frames_seen, got 'seen'"):
        write_predictions(streams, ours, tmp_path / "x", reply_clock="seen")
    with pytest.raises(Exception, match="a prediction for a stream not among the records"):
        write_predictions(
            streams, [Prediction("proactivevideoqa-WEB-1", [])], tmp_path / "x", reply_clock="frame"
        )
    assert [q.key for q in read_release(RELEASE)] == ["ego_0001_q0", "ego_0002_q0", "7"]
