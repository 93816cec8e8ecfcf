"""eval.score --protocol streamingbench_proactive on the release's file structure and the harness's
prediction file: the official figures worked out by hand, the round trip from stream records and
project predictions, and every malformed input named."""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path

import pytest

from benchmarks.protocols.streamingbench_proactive import poll_probes, poll_step, write_official
from data_builders.build import build_source
from data_builders.records import RecordError
from data_builders.sources.streamingbench_proactive import read_question
from engine.replies import Prediction, Reply
from eval.score import main

FIXTURE = Path(__file__).resolve().parents[1] / "data_builders/fixtures/streamingbench_proactive"
GT_FILE = FIXTURE / "data/questions_proactive.json"
SOURCE = "streamingbench_proactive"


def harness_entry(
    time_stamp: int, answer_at: int | None, text: str = "", last_poll: int | None = None
) -> dict:
    """A model entry as the harness writes it: a yes/no pair per poll from time_stamp + 1, and the
    question and its answer at the poll the model says yes (none: "no" up to ``last_poll``)."""
    history = []
    for at in range(time_stamp + 1, (answer_at if answer_at is not None else last_poll) + 1):
        said = at == answer_at
        history.append({"role": "user", "content": "Is it the right time?", "time": at, "cost": 0.4})
        history.append({"role": "assistant", "content": "Yes." if said else "No.", "time": at, "cost": 0.4})
    if answer_at is not None:
        history.append({"role": "user", "content": "the question", "time": answer_at, "cost": 0.5})
        history.append({"role": "assistant", "content": text, "time": answer_at, "cost": 0.5})
    return {"answered": answer_at if answer_at is not None else False, "dialog_history": history}


def predictions(model: str = "MyModel") -> list:
    data = json.loads(GT_FILE.read_text())
    q = [e["questions"] for e in data]
    # ground truths 14, 40, 50, 9, 26 s
    q[0][0][model] = harness_entry(5, 16, "It is noon now")  # +2 s: on time, "noon" in the text
    q[1][0][model] = harness_entry(31, 37, "Blue car")  # -3 s: too early, the text does not count
    q[1][1][model] = harness_entry(50, 52, "the lid is open")  # +2 s, but "lid open" is not in the text
    q[2][0][model] = harness_entry(2, None, last_poll=13)  # never said yes: last turn "No." at 9 + 4
    # q[3][0] has no entry of the model: missing, skipped as the official scorer skips it
    return data


def _write(path: Path, data) -> Path:
    path.write_text(json.dumps(data, indent=4))
    return path


def score(capsys, *args: str) -> tuple[int, dict | None, str]:
    code = main(["--protocol", SOURCE, *args])
    out, err = capsys.readouterr()
    return code, (json.loads(out.strip().splitlines()[-1]) if code == 0 else None), err


def test_figures_by_hand(tmp_path, capsys):
    pred = _write(tmp_path / "proactive_output_MyModel.json", predictions())
    code, res, err = score(
        capsys, "--gt", str(GT_FILE), "--pred", str(pred), "--per-sample", str(tmp_path / "rows.jsonl")
    )
    assert code == 0, err
    # scored: 4 (one missing); time correct: q0 (+2), q1-1 (+2) = 2; answer correct: q0 = 1
    per_type = {
        "total": 4,
        "time_correct": 2,
        "time_accuracy": 0.5,
        "answer_correct": 1,
        "answer_accuracy": 0.25,
    }
    assert res == {
        "protocol": SOURCE,
        "model": "MyModel",  # the one key the questions add to the release's fields
        **per_type,
        "task_types": {"Proactive Output": per_type},
        "questions": 5,
        "missing": 1,
        "dropped": {"no answer of the model (skipped, as the official scorer skips it)": 1},
        "dropped_examples": {
            "no answer of the model (skipped, as the official scorer skips it)": ["[3].questions[0]"]
        },
    }
    assert (
        "dropped by the official rules: no answer of the model (skipped, as the official scorer skips it) = 1 (e.g. [3].questions[0])"
        in err
    )
    rows = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert [
        (r["id"], r["status"], r.get("time"), r.get("time_correct"), r.get("answer_correct")) for r in rows
    ] == [
        ("[0].questions[0]", "scored", 16.0, True, True),
        ("[1].questions[0]", "scored", 37.0, False, False),
        ("[1].questions[1]", "scored", 52.0, True, False),
        ("[2].questions[0]", "scored", 13.0, False, False),
        ("[3].questions[0]", "missing", None, None, None),
    ]


def test_model_key_found_or_chosen(tmp_path, capsys):
    data = predictions()
    for entry in data:  # a second model answers every question at its ground truth
        for q in entry["questions"]:
            gt = sum(int(x) * 60**i for i, x in enumerate(reversed(q["ground_truth_time_stamp"].split(":"))))
            ts = sum(int(x) * 60**i for i, x in enumerate(reversed(q["time_stamp"].split(":"))))
            q["Other"] = harness_entry(ts, gt, q["ground_truth_output"])
    pred = _write(tmp_path / "two.json", data)
    code, _, err = score(capsys, "--gt", str(GT_FILE), "--pred", str(pred))
    assert code == 2
    assert (
        "the questions hold answers of several models ('MyModel' (4 questions), 'Other' (5 questions)): pick one with --model"
        in err
    )
    code, res, _ = score(capsys, "--gt", str(GT_FILE), "--pred", str(pred), "--model", "Other")
    assert (res["model"], res["total"], res["time_accuracy"], res["answer_accuracy"], res["missing"]) == (
        "Other",
        5,
        1.0,
        1.0,
        0,
    )
    code, res, _ = score(capsys, "--gt", str(GT_FILE), "--pred", str(pred), "--model", "MyModel")
    assert (res["total"], res["answer_accuracy"]) == (4, 0.25)
    code, _, err = score(capsys, "--gt", str(GT_FILE), "--pred", str(pred), "--model", "mymodel")
    assert (
        code == 2
        and "no question holds answers of model 'mymodel' (models found: 'MyModel' (4 questions), 'Other' (5 questions))"
        in err
    )
    code, _, err = score(capsys, "--gt", str(GT_FILE), "--pred", str(GT_FILE))
    assert code == 2 and "no question holds a model's answers" in err


def test_empty_history_is_scored_wrong_and_named(tmp_path, capsys):
    data = predictions()
    data[0]["questions"][0]["MyModel"] = {"answered": False, "dialog_history": []}
    code, res, err = score(capsys, "--gt", str(GT_FILE), "--pred", str(_write(tmp_path / "p.json", data)))
    assert code == 0, err
    # the official scorer stops on it (history[-1]); here it counts as a wrong answer: 1 of 4 on time, none right
    assert (res["total"], res["time_correct"], res["answer_correct"], res["missing"]) == (4, 1, 0, 1)
    assert res["official_would_fail"] == {
        "an empty dialog_history (the official scorer stops on it: IndexError); scored as wrong": 1
    }
    assert (
        "the official evaluator would stop on: an empty dialog_history" in err and "[0].questions[0]" in err
    )


def _bad(data: list, where: tuple[int, int], change) -> list:
    data = copy.deepcopy(data)
    change(data[where[0]]["questions"][where[1]])
    return data


@pytest.mark.parametrize(
    ("change", "message", "strict_only"),
    [
        (
            lambda q: q["MyModel"]["dialog_history"][-1].update(time="16"),
            "field 'MyModel.dialog_history[23].time': expected the poll time in seconds, got '16'",
            False,
        ),
        (
            lambda q: q["MyModel"]["dialog_history"][-1].update(content=None),
            "field 'MyModel.dialog_history[23].content': expected the answer text, got NoneType None",
            False,
        ),
        (
            lambda q: q["MyModel"]["dialog_history"].pop(),
            "field 'MyModel.dialog_history[22]': the last turn must be the assistant's answer, got role 'user'",
            False,
        ),
        (
            lambda q: q.update(MyModel=None),
            "field 'MyModel': expected an object {answered, dialog_history}, got NoneType",
            False,
        ),
        (
            lambda q: q["MyModel"].pop("dialog_history"),
            "field 'MyModel.dialog_history': missing or not a list",
            False,
        ),
        (
            lambda q: q.update(ground_truth_output="Noon"),
            "field 'ground_truth_output': 'Noon' differs from the ground truth's [0].questions[0]: made from another release?",
            True,
        ),
        (
            lambda q: q.update(ground_truth_time_stamp="00:00:15"),
            "field 'ground_truth_time_stamp': '00:00:15' differs from the ground truth's [0].questions[0]",
            True,
        ),
        (
            lambda q: q.update(time_stamp="00:00:06"),
            "no question of the ground truth has video_path './videos/sample_3_proactive.mp4', time_stamp '00:00:06' and this question",
            True,
        ),
        (
            lambda q: q.update(time_stamp="0:0:5"),
            "field 'time_stamp': expected a time H:MM:SS (whole seconds, minutes and seconds 00-59), got '0:0:5'",
            False,
        ),
        (
            lambda q: q.update(task_type="Proactive Reminder"),
            "field 'task_type': unknown task type 'Proactive Reminder' (known: Proactive Output)",
            False,
        ),
    ],
)
def test_malformed_prediction_files_are_named(tmp_path, capsys, change, message, strict_only):
    pred = _write(tmp_path / "p.json", _bad(predictions(), (0, 0), change))
    code, _, err = score(capsys, "--gt", str(GT_FILE), "--pred", str(pred), "--strict")
    assert code == 2
    assert f"file {pred}, record [0].questions[0]" in err and message in err
    code, _, err = score(capsys, "--gt", str(GT_FILE), "--pred", str(pred))
    assert code == (0 if strict_only else 2), err  # the default scores what the official scorer scores


def test_a_file_asking_one_question_twice_scores_both_as_the_official_scorer_does(tmp_path, capsys):
    # count.py reads the prediction file alone and scores every question holding the model's entry,
    # against the question's own ground truth: the first question of segment 0 given twice (its copy
    # answered at 20 s, 6 s late) and a question with its own expected output ("Noon"); with
    # predictions() (time/answer): q0 at 16 s "noon" 1/1, its copy at 20 s (6 s late) 0/0, q1-0 0/0,
    # q1-1 with its own expected "lid" at 52 s: on time, "lid" in "the lid is open" 1/1 (against the
    # release's "lid open": 1/0), q2 0/0; q3 missing -> 5 scored, time 2/5, answer 2/5
    data = predictions()
    twice = copy.deepcopy(data[0]["questions"][0])
    twice["MyModel"] = harness_entry(5, 20, "It is noon now")
    data[0]["questions"].append(twice)
    own = copy.deepcopy(data[1]["questions"][1])
    own["ground_truth_output"] = "lid"
    data[1]["questions"][1] = own
    pred = _write(tmp_path / "p.json", data)
    code, res, err = score(capsys, "--gt", str(GT_FILE), "--pred", str(pred))
    assert code == 0, err
    assert (res["total"], res["time_correct"], res["answer_correct"]) == (5, 2, 2)
    assert (res["time_accuracy"], res["answer_accuracy"]) == (0.4, 0.4)
    assert res["repeated_questions"] == ["[0].questions[1] (as [0].questions[0])"]
    assert res["own_ground_truth"] == ["[1].questions[1]"] and res["missing"] == 1
    assert "1 questions given more than once, each scored, as the official scorer scores them" in err
    code, _, err = score(capsys, "--gt", str(GT_FILE), "--pred", str(pred), "--strict")
    assert code == 2 and f"file {pred}, record [0].questions[1]: the same question as [0].questions[0]" in err


def test_malformed_ground_truth_is_named(tmp_path, capsys):
    pred = _write(tmp_path / "p.json", predictions())
    gt = json.loads(GT_FILE.read_text())
    for where, change, message in [
        (
            (2, 0),
            lambda q: q.pop("ground_truth_time_stamp"),
            "record [2].questions[0], field 'ground_truth_time_stamp': missing field",
        ),
        ((2, 0), lambda q: q.update(time_stamp="00:00:02.5"), "got '00:00:02.5'"),
        (
            (1, 1),
            lambda q: q.update(task_type="Open-ended"),
            "record [1].questions[1], field 'task_type': unknown task type 'Open-ended'",
        ),
    ]:
        bad = _write(tmp_path / "gt.json", _bad(gt, where, change))
        code, _, err = score(capsys, "--gt", str(bad), "--pred", str(pred))
        assert code == 2 and f"file {bad}, " in err and message in err, err
    bad = _write(tmp_path / "gt.json", [*gt, gt[0]])
    code, _, err = score(capsys, "--gt", str(bad), "--pred", str(pred))
    assert (
        code == 2
        and "record [4].questions[0]: the same video, time_stamp and question as [0].questions[0]" in err
    )


def test_round_trip_records_and_predictions_to_the_official_file(tmp_path, capsys, caplog):
    videos = tmp_path / "src"
    for name in ("sample_3_proactive.mp4", "sample_8_proactive.mp4"):
        (videos / "videos").mkdir(parents=True, exist_ok=True)
        (videos / "videos" / name).touch()
    streams = build_source(
        SOURCE, tmp_path / "built", annotations=GT_FILE, videos=videos, check_videos=False
    ).records
    ids = [s.id for s in streams]
    assert ids == [f"{SOURCE}-{i}-{k}" for i, k in ((0, 0), (1, 0), (1, 1), (2, 0), (3, 0))]
    preds = [
        # ground truth 14 s: the frame at 14 s is first shown by the poll at 15 s (+1): on time, right
        Prediction(ids[0], [Reply(14.0, "noon"), Reply(16.0, "noon again")]),
        # ground truth 40 s: a reply on the frame at 42 s is the poll at 43 s: 3 s late
        Prediction(ids[1], [Reply(42.0, "Blue car")]),
        Prediction(ids[2], []),  # silent: "no" at every poll 51..54, the last at 54 s (4 s late)
        # ground truth 9 s: the frame at 6.5 s is first shown by the poll at 7 s (-2): on time, right
        Prediction(ids[3], [Reply(6.5, "7 points!")]),
        # ids[4]: no prediction (missing)
    ]
    out = tmp_path / "proactive_output_MyModel.json"
    with caplog.at_level(logging.WARNING):
        counts = write_official(out, streams, preds, "MyModel")
    assert counts == {"questions": 5, "answered": 3, "unanswered": 1, "missing": 1}
    assert (
        f"1 of 5 streams have no prediction; written without a 'MyModel' entry (the scorer skips them): {ids[4]}"
        in caplog.text
    )
    written = json.loads(out.read_text())
    # the release as it was, each answered question with the model's entry
    release = json.loads(GT_FILE.read_text())
    assert [
        {**e, "questions": [{k: v for k, v in q.items() if k != "MyModel"} for q in e["questions"]]}
        for e in written
    ] == release
    first = written[0]["questions"][0]["MyModel"]
    assert first["answered"] == 15
    turns = [(t["role"], t["content"], t["time"]) for t in first["dialog_history"]]
    question = release[0]["questions"][0]["question"]
    # each poll's user turn is the harness's poll query, as it records it; the answer's, the question
    query = f'{question} Is it the right time to output "noon"? You can only answer yes or no.'
    assert turns[:2] == [("user", query, 6), ("assistant", "no", 6)]  # the first poll: time_stamp + 1
    assert turns[-4:] == [
        ("user", query, 15),
        ("assistant", "yes", 15),
        ("user", question, 15),
        ("assistant", "noon", 15),
    ]
    assert len(turns) == 2 * 10 + 2  # polls 6..15
    silent = written[1]["questions"][1]["MyModel"]
    assert silent["answered"] is False and [t["time"] for t in silent["dialog_history"]][::2] == [
        51,
        52,
        53,
        54,
    ]
    code, res, err = score(capsys, "--gt", str(GT_FILE), "--pred", str(out))
    assert code == 0, err
    # scored 4: on time 14->15 (+1) and 9->7 (-2); late 40->43 (+3) and 50->54 (+4); both on-time texts hold the output
    assert (res["total"], res["time_correct"], res["answer_correct"], res["missing"]) == (4, 2, 2, 1)
    assert (res["time_accuracy"], res["answer_accuracy"]) == (0.5, 0.5)


def test_writer_refuses_foreign_predictions_and_streams(tmp_path):
    videos = tmp_path / "src/videos"
    videos.mkdir(parents=True)
    for name in ("sample_3_proactive.mp4", "sample_8_proactive.mp4"):
        (videos / name).touch()
    streams = build_source(
        SOURCE, tmp_path / "built", annotations=GT_FILE, videos=videos.parent, check_videos=False
    ).records
    with pytest.raises(
        RecordError, match=r"file preds.jsonl, record nope: a prediction for no stream of the records"
    ):
        write_official(tmp_path / "o.json", streams, [Prediction("nope", [])], "M", pred_file="preds.jsonl")
    other = streams[0].__class__.from_dict({**streams[0].to_dict(), "task": "timed_qa"})
    with pytest.raises(
        RecordError, match=rf"record {streams[0].id}, field 'task': a stream of task 'timed_qa'"
    ):
        write_official(tmp_path / "o.json", [other], [], "M")
    assert not (tmp_path / "o.json").exists()


def test_official_polls_cut_before_the_poll_and_a_bad_transcript_is_named(tmp_path):
    videos = tmp_path / "src"
    (videos / "videos").mkdir(parents=True)
    for name in ("sample_3_proactive.mp4", "sample_8_proactive.mp4"):
        (videos / "videos" / name).touch()
    streams = build_source(
        SOURCE, tmp_path / "built", annotations=GT_FILE, videos=videos, check_videos=False
    ).records
    first = streams[0]  # time_stamp 5, ground truth 14: polls 6..18, the clip [5, 18]
    question = read_question(first.meta["release_entry"], first.meta["release_question"], first.id)
    probes = poll_probes(first, question)
    # the poll at c shows the clip [5, c): its last frame is the one at c - 1, step c - 6
    assert [(p.key, p.step) for p in probes] == [(("poll", c), c - 6) for c in range(6, 19)]
    assert poll_step(first, 40) == 12  # past the clip's end: its last step
    assert probes[0].prompt.endswith(
        'Question: When the kitchen clock shows twelve, output "noon". Is it the right time to output '
        '"noon"? You can only answer yes or no.\n\nThe answer is:\n'
    )
    bad = {first.id: [{"turn": "poll", "time": 6, "response": "no"}, {"turn": "answer", "time": 7}]}
    with pytest.raises(RecordError, match=rf"record {first.id}, field 'polls\[1\]': expected \{{turn: poll"):
        write_official(tmp_path / "x.json", streams, [Prediction(first.id, [])], "M", transcripts=bad)
    assert not (tmp_path / "x.json").exists()


def test_a_model_key_given_twice_in_a_question_is_refused_naming_the_file_and_the_key(tmp_path, capsys):
    """The model's entry twice in one question, the second never saying yes: a JSON reader keeps it
    and drops the answer the first holds."""
    data = predictions()
    entry = f'"MyModel": {json.dumps(data[0]["questions"][0]["MyModel"])}'
    silent = json.dumps(harness_entry(5, None, last_poll=20))
    text = json.dumps(data)
    assert text.count(entry) == 1
    pred = tmp_path / "proactive_output_MyModel.json"
    pred.write_text(text.replace(entry, f'{entry}, "MyModel": {silent}'))
    code, _, err = score(capsys, "--gt", str(GT_FILE), "--pred", str(pred))
    assert code == 2 and f"file {pred}" in err and "key 'MyModel' is given twice" in err, err
