"""eval.score --protocol estp on ESTP-Bench's release and prediction structure (our own values in
fixtures/estp/), worked by hand; the round trip through write_official; bad input named.

Hand computation, single-question file, ``--content any`` (every answer score 5):
- vid-a/clip-1[0], Object Recognition (optimal = start). Answer 1 [110, 114] accepts [109, 116],
  scale 7: 109.5 s -> (5 + 5 (1 - 0.5/7)) / 10 = 0.96429, 112 s -> (5 + 5 (1 - 2/7)) / 10 = 0.85714,
  S = 0.91071. Answer 2 [130, 132] accepts [129, 134]: nothing. 140 s matches nothing: FP.
  P = 0.91071 / (1 matched + 1 FP) = 0.45536, R = 0.91071 / 2 = 0.45536, F1 = 0.45536.
  (The user turns of the dialog history are the polling prompts, not replies.)
- vid-a/clip-1[1], Action Recognition (optimal = midpoint 145), [140, 150], scale 13: 151 s ->
  (5 + 5 (1 - 6/13)) / 10 = 0.76923; P = R = F1 = 0.76923.
- vid-b/clip-7[0], Task Understanding: no answers of the model: missing, F1 0.
ESTP-F1 = (45.536 + 76.923 + 0) / 3 = 40.820; Explicit (OR, AR) 61.229, Implicit (TU) 0.
With ``--content exact`` the 112 s reply ("A red can.") scores answer 1: (1 + 3.5714) / 10 = 0.45714,
S = (0.96429 + 0.45714) / 2 = 0.71071, OR = 35.536.
"""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import pytest

from benchmarks.protocols.estp import asked_stream, write_official
from data_builders.sources.estp import read_release, stream_of
from engine.replies import Prediction, Reply
from eval.score import main

FIXTURE = Path(__file__).parent / "fixtures" / "estp"
SQ, CQ = FIXTURE / "estp_bench_sq.json", FIXTURE / "estp_bench_cq_v3.json"


def _score(capsys, *args: str) -> tuple[int, dict | None, str]:
    code = main(["--protocol", "estp", *args])
    out, err = capsys.readouterr()
    return code, (json.loads(out.strip().splitlines()[-1]) if code == 0 else None), err


def test_single_question_release_by_hand(capsys):
    code, m, err = _score(
        capsys, "--gt", str(SQ), "--pred", str(FIXTURE / "MiniCPMV_fbf.json"), "--content", "any"
    )
    assert code == 0
    assert m["tasks"] == pytest.approx({"OR": 45.535714, "AR": 76.923077, "TU": 0.0})
    assert m["categories"] == pytest.approx({"Explicit": 61.229396, "Implicit": 0.0})
    assert m["ESTP-F1"] == pytest.approx(40.819597)
    assert (m["protocol"], m["model"], m["content"]) == ("estp", "MiniCPMV", "any")
    assert (m["questions"], m["scored"], m["missing_predictions"]) == (3, 3, 1)
    assert "1 of 3 questions have no answers of model 'MiniCPMV'" in err and "vid-b/clip-7[0]" in err
    # pooled over questions: TP 1.67995, 2 matched, 1 FP, 4 answers
    assert m["pooled"]["precision"] == pytest.approx(100 * 1.679945 / 3)
    assert m["pooled"]["recall"] == pytest.approx(100 * 1.679945 / 4)


def test_answer_quality_weights_the_matches(capsys):
    code, m, _ = _score(
        capsys, "--gt", str(SQ), "--pred", str(FIXTURE / "MiniCPMV_fbf.json"), "--content", "exact"
    )
    assert (
        code == 0
        and m["tasks"]["OR"] == pytest.approx(35.535714)
        and m["tasks"]["AR"] == pytest.approx(76.923077)
    )


def test_contextual_release_by_hand(capsys):
    # Object Relative Context (optimal = start): 61 s on [60, 62] (scale 5) -> (5 + 4) / 10 = 0.9;
    # 92 s on [90, 91] (accepts up to 93, scale 4) -> (5 + 2.5) / 10 = 0.75; 95 s: FP.
    # P = 1.65 / 3, R = 1.65 / 2, F1 = 0.66
    code, m, _ = _score(
        capsys, "--gt", str(CQ), "--pred", str(FIXTURE / "MiniCPMV_cq.json"), "--content", "any"
    )
    assert (
        code == 0
        and m["ESTP-F1"] == pytest.approx(66.0)
        and m["categories"] == pytest.approx({"Contextual": 66.0})
    )


def test_folder_of_per_gpu_parts(tmp_path, capsys):
    pred = json.loads((FIXTURE / "MiniCPMV_fbf.json").read_text())
    parts = tmp_path / "parts"
    parts.mkdir()
    (parts / "MiniCPMV_fbf.json.part0").write_text(json.dumps({"vid-a": pred["vid-a"]}))
    (parts / "MiniCPMV_fbf.json.part1").write_text(json.dumps({"vid-b": pred["vid-b"]}))
    code, m, _ = _score(capsys, "--gt", str(SQ), "--pred", str(parts), "--content", "any")
    assert code == 0 and m["ESTP-F1"] == pytest.approx(40.819597) and m["missing_predictions"] == 1


def test_round_trip_records_predictions_official_file(tmp_path, capsys):
    records = [stream_of(qa, f"{qa.video_uid}.mp4") for qa in read_release(SQ)]  # what source=estp writes
    preds = [
        Prediction(
            "estp-vid-a-clip-1-0",
            [Reply(109.5, "It is a tin of tomatoes."), Reply(112.0, "A red can."), Reply(140.0, "A tin.")],
        ),
        Prediction("estp-vid-a-clip-1-1", [Reply(151.0, "You are stirring the pot now.")]),
        Prediction("estp-vid-b-clip-7-0", []),  # ran, stayed silent: not missing
    ]
    out = tmp_path / "official" / "proactive_vlm_sq.json"
    assert write_official(SQ, records, preds, out) == 3
    written = json.loads(out.read_text())
    assert written["vid-a"]["clip-1"][1]["proactive_vlm"] == {
        "dialog_history": [
            {"role": "user", "content": "Tell me when I stir the pot.", "time": 100.0},  # at the clip start
            {"role": "assistant", "content": "You are stirring the pot now.", "time": 151.0},
        ]
    }
    assert written["vid-b"]["clip-7"][0]["question"] == "What am I making?"  # the release's fields kept
    code, m, err = _score(capsys, "--gt", str(SQ), "--pred", str(out), "--content", "any")
    assert code == 0 and m["ESTP-F1"] == pytest.approx(40.819597)
    assert (m["model"], m["missing_predictions"], err) == ("proactive_vlm", 0, "")
    with pytest.raises(ValueError, match="record estp-nope: a prediction for a stream that is not among"):
        write_official(SQ, records, [Prediction("estp-nope", [])], tmp_path / "x.json")


def _bad(tmp_path, edit, name="pred.json", source=FIXTURE / "MiniCPMV_fbf.json"):
    data = json.loads(source.read_text())
    edit(data)
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        (
            lambda d: d["vid-a"]["clip-1"].append(dict(d["vid-a"]["clip-1"][1])),
            "record vid-a/clip-1[2]: a prediction for a question the ground truth does not have",
        ),
        (
            lambda d: d["vid-a"]["clip-1"][1]["MiniCPMV"]["dialog_history"][0].update(time="2:31"),
            "record vid-a/clip-1[1]: field 'dialog_history[0].time': cannot parse time '2:31'",
        ),
        (
            lambda d: d["vid-a"]["clip-1"][1]["MiniCPMV"]["dialog_history"][0].pop("time"),
            "record vid-a/clip-1[1]: dialog_history[0]: an assistant turn with no time",
        ),
        (
            lambda d: d["vid-a"]["clip-1"][0].update(question="Something else?"),
            "record vid-a/clip-1[0]: field 'question' is 'Something else?'",
        ),
        (
            lambda d: d["vid-a"]["clip-1"][0].update(Qwen2VL={"dialog_history": []}),
            "the file holds several models' answers (MiniCPMV, Qwen2VL): pass --model",
        ),
    ],
    ids=["unknown-question", "malformed-time", "no-time", "other-question", "two-models"],
)
def test_bad_predictions_name_file_item_and_reason(tmp_path, capsys, edit, reason):
    pred = _bad(tmp_path, edit)
    code, _, err = _score(capsys, "--gt", str(SQ), "--pred", str(pred), "--content", "any")
    assert code == 2 and f"file {pred}" in err and reason in err


def test_bad_ground_truth_names_file_item_and_reason(tmp_path, capsys):
    gt = _bad(tmp_path, lambda d: d["vid-b"]["clip-7"][0].update({"Task Type": "Counting"}), "gt.json", SQ)
    code, _, err = _score(
        capsys, "--gt", str(gt), "--pred", str(FIXTURE / "MiniCPMV_fbf.json"), "--content", "any"
    )
    assert (
        code == 2
        and f"file {gt}, record vid-b/clip-7[0]: field 'Task Type': unknown task type 'Counting'" in err
    )
    gt = _bad(tmp_path, lambda d: d["vid-c"]["clip-2"][0]["conversation"][2].pop("time"), "gt2.json", CQ)
    code, _, err = _score(
        capsys, "--gt", str(gt), "--pred", str(FIXTURE / "MiniCPMV_cq.json"), "--content", "any"
    )
    assert code == 2 and "record vid-c/clip-2[0]: conversation[2]: a question with no time" in err
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = _score(capsys, "--gt", str(SQ), "--pred", str(empty), "--content", "any")
    assert code == 2 and "prediction folder holds no .json file" in err


def test_a_single_question_is_asked_at_the_clip_start_or_before_the_first_answer(tmp_path):
    records = {s.id: s for s in (stream_of(qa, f"{qa.video_uid}.mp4") for qa in read_release(SQ))}
    tin = records["estp-vid-a-clip-1-0"]  # clip 100-160 s, first answer [110, 114]: midpoint 112 s
    assert asked_stream(tin, "clip_start").instruction_time == 100.0
    # EyeWO's loader: uniform from the clip start to one frame interval before that midpoint, here
    # seeded by the qa's name, so every run asks at the same time
    for sps, latest in ((1.0, 111.0), (2.0, 111.5)):
        t = asked_stream(tin, "before_first_answer", sps).instruction_time
        assert t == random.Random("vid-a/clip-1[0]").uniform(100.0, latest) and 100.0 < t < latest
        assert asked_stream(tin, "before_first_answer", sps).instruction_time == t
    other = asked_stream(records["estp-vid-b-clip-7-0"], "before_first_answer").instruction_time
    assert other == random.Random("vid-b/clip-7[0]").uniform(0.0, 24.0)  # [20, 30]: midpoint 25 s
    # a first answer due within a step of the clip start: asked at the clip start
    early = dataclasses.replace(tin, targets=[dataclasses.replace(tin.targets[0], window=(100.0, 101.5))])
    assert asked_stream(early, "before_first_answer").instruction_time == 100.0
    # a contextual qa's questions carry their own times: never moved
    contextual = [stream_of(qa, "v.mp4") for qa in read_release(CQ)]
    assert [asked_stream(s, "before_first_answer") for s in contextual] == contextual
    with pytest.raises(ValueError, match="question_time must be one of clip_start, before_first_answer"):
        asked_stream(tin, "at_random")
    # the prediction file records the question at the time it was asked
    out = tmp_path / "pred.json"
    asked = asked_stream(tin, "before_first_answer")
    write_official(SQ, [asked], [Prediction(tin.id, [Reply(112.0, "A tin.")])], out)
    history = json.loads(out.read_text())["vid-a"]["clip-1"][0]["proactive_vlm"]["dialog_history"]
    assert history[0] == {"role": "user", "content": tin.instruction, "time": asked.instruction_time}


@pytest.mark.parametrize("strict", [[], ["--strict"]], ids=["default", "strict"])
def test_a_clip_given_twice_in_a_prediction_file_is_refused_naming_the_file_and_the_key(
    tmp_path, capsys, strict
):
    """``clip-1`` twice under ``vid-a``, its second copy without the model's answers: a JSON reader
    keeps the last, so the file scored ESTP-F1 0.0 instead of 40.8, exit 0 (``--strict`` too)."""
    data = json.loads((FIXTURE / "MiniCPMV_fbf.json").read_text())
    unanswered = [{k: v for k, v in qa.items() if k != "MiniCPMV"} for qa in data["vid-a"]["clip-1"]]
    clip = f'"clip-1": {json.dumps(data["vid-a"]["clip-1"])}'
    text = json.dumps(data)
    assert text.count(clip) == 1
    pred = tmp_path / "pred.json"
    pred.write_text(text.replace(clip, f'{clip}, "clip-1": {json.dumps(unanswered)}'))
    code, _, err = _score(capsys, "--gt", str(SQ), "--pred", str(pred), "--content", "any", *strict)
    assert code == 2, err
    assert err.strip() == (
        f"eval.score: file {pred}: key 'clip-1' is given twice in one JSON object (a JSON reader keeps "
        "only the last)"
    )
