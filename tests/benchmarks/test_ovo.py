"""``eval.score --protocol ovo``: OVO-Bench's official figures from its release file and a prediction
folder, and the official prediction file written from stream records and replies.

The release file is ``tests/data_builders/fixtures/ovo/ovo_bench_new.json`` (our own twelve items,
one per task, in the release's structure); prediction folders are written here in the format the
official harness writes. Each test works its figures out by hand in a comment.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest

from benchmarks.protocols.ovo import CHOICE_FIELDS, probe_answers, probe_plan, write_predictions
from data_builders.records import RecordError, Stream
from data_builders.sources.ovo import (
    CHOICE_PROMPT,
    CRR_PROMPT,
    REC_PROMPT,
    SSR_PROMPT,
    cut_step,
    item_streams,
    parse_item,
    read_release,
)
from data_builders.toolkit import Tally
from engine.replies import Prediction, Reply
from eval.score import main

GT = Path(__file__).resolve().parents[1] / "data_builders/fixtures/ovo/ovo_bench_new.json"
RELEASE = json.loads(GT.read_text())
BY_ID = {item["id"]: item for item in RELEASE}
PART = {**dict.fromkeys(("EPM", "ASI", "HLD"), "backward"), **dict.fromkeys(("REC", "SSR", "CRR"), "forward")}


def official(item_id: int, response) -> dict:
    """A prediction item as the official harness writes it: a multiple-choice item's six fields, or
    the release's forward item with ``test_info[i].response`` (``response`` is then the list)."""
    item = copy.deepcopy(BY_ID[item_id])
    if "test_info" in item:
        for probe, answer in zip(item["test_info"], response, strict=True):
            probe["response"] = answer
        return item
    letter = chr(65 + item["gt"])
    return {
        **{k: item[k] for k in ("id", "video", "task", "question")},
        "response": response,
        "ground_truth": letter,
    }


def folder(tmp_path: Path, *files: list[dict], name: str = "MyModel") -> Path:
    """``results/<name>/`` with one official file per list of items (each in its task's part)."""
    out = tmp_path / "results" / name
    out.mkdir(parents=True)
    for k, items in enumerate(files):
        data = {"backward": [], "realtime": [], "forward": []}
        for item in items:
            data[PART.get(item["task"], "realtime")].append(item)
        (out / f"{name}_{k}_offline.json").write_text(json.dumps(data, indent=4))
    return out


def score(pred: Path, capsys, gt: Path = GT, *extra: str) -> tuple[int, dict | None, str]:
    code = main(["--protocol", "ovo", "--gt", str(gt), "--pred", str(pred), *extra])
    out, err = capsys.readouterr()
    return code, json.loads(out.strip().splitlines()[-1]) if code == 0 else None, err


def test_official_figures_of_a_folder_worked_by_hand(tmp_path, capsys):
    # backward: EPM "C" (gt C) 1; ASI "B" (gt A) 0; HLD null (gt B) 0 -> 100, 0, 0: part 33.33
    # realtime: STU "The answer is D." 1; OJR "a" (gt A: case counts) 0; ATR "C" 1; ACR "B. Because A"
    # (gt B) 1; OCR "" 0; FPD not predicted (left out) -> 100, 0, 100, 100, 0: part 300 / 5 = 60
    # forward: REC counts 1, 2, 2, 2: "1" 1, "2, not 3" (digits joined: 23) 0, "2" 1, "2 times" 1 -> 75;
    # SSR types 1, 1, 0, 1, 1: "Y" 1, "yes" 0, "Nope" (contains No) 1, "Yes" 1, null 0 -> 60;
    # CRR types 0, 0, 1, 1: "N" 1, "Y" 0, "Yes" 1, "Not sure" 0 -> 50: part (75 + 60 + 50) / 3
    # total (33.33 + 60 + 61.67) / 3 = 155 / 3
    pred = folder(
        tmp_path,
        [
            official(7, "C"),
            official(305, "B"),
            official(480, None),
            official(650, "The answer is D."),
            official(811, "a"),
            official(902, "C"),
            official(1010, "B. Because A"),
            official(1101, ""),
        ],
        [
            official(1560, ["1", "2, not 3", "2", "2 times"]),
            official(1520, ["Y", "yes", "Nope", "Yes", None]),
            official(1470, ["N", "Y", "Yes", "Not sure"]),
        ],
    )
    code, res, err = score(pred, capsys)
    assert code == 0, err
    tasks = {"EPM": 100, "ASI": 0, "HLD": 0, "STU": 100, "OJR": 0, "ATR": 100, "ACR": 100, "OCR": 0}
    assert {k: res[k] for k in tasks} == tasks and res["FPD"] is None
    assert (res["REC"], res["SSR"], res["CRR"]) == (75.0, 60.0, 50.0)
    assert res["backward"] == pytest.approx(100 / 3) and res["realtime"] == 60.0
    assert res["forward"] == pytest.approx(185 / 3) and res["total"] == pytest.approx(155 / 3)
    assert res["missing"] == {"FPD": 1} and res["n_missing"] == 1 and res["n_items"] == 12
    assert res["scored"]["REC"] == 4 and res["scored"]["FPD"] == 0
    assert "1 of 12 release items have no prediction" in err and "(FPD 1)" in err


def test_a_part_with_nothing_predicted_has_no_figure_and_no_total(tmp_path, capsys):
    # forward only: REC "1", "2", "2", "0" -> 75; the official scorer stops at its total here
    pred = folder(tmp_path, [official(1560, ["1", "2", "2", "0"])])
    code, res, err = score(pred, capsys)
    assert code == 0, err
    assert (res["REC"], res["forward"], res["backward"], res["realtime"], res["total"]) == (
        75.0,
        75.0,
        None,
        None,
        None,
    )
    assert res["n_missing"] == 11 and "nothing scored in backward, realtime: no figure there, no total" in err


def _replace(item: dict, **fields) -> dict:
    return {**item, **fields}


@pytest.mark.parametrize(
    ("files", "strict_only", "message"),
    [
        # an id that is not in the release
        (
            [[_replace(official(7, "C"), id=4242)]],
            True,
            "MyModel_0_offline.json, record backward[0] (id 4242): id 4242 is not an item of the release file",
        ),
        # the same item in two files (the official scorer counts it twice)
        (
            [[official(7, "C")], [official(7, "A")]],
            True,
            "MyModel_1_offline.json, record backward[0] (id 7): id 7 is given twice (first: MyModel_0_offline.json backward[0] (id 7))",
        ),
        # a list response (the official scorer stops on it in REC)
        (
            [[official(1560, [["1"], "2", "2", "2"])]],
            False,
            "field 'test_info[0].response': expected a string or null, got list ['1']",
        ),
        # a stale ground truth: the file was made from another release
        (
            [[_replace(official(7, "C"), ground_truth="A")]],
            True,
            "field 'ground_truth': 'A' here but 'C' in the release",
        ),
        (
            [[_replace(official(1470, ["N"] * 4), test_info=official(1470, ["N"] * 4)["test_info"][:3])]],
            True,
            "field 'test_info': expected the release's 4 probes, got 3 entries",
        ),
        (
            [[{k: v for k, v in official(305, "A").items() if k != "response"}]],
            False,
            "field 'response' is missing",
        ),
        (
            [[_replace(official(305, "A"), ground_truth=None)]],
            False,
            "field 'ground_truth': expected the right",
        ),
    ],
)
def test_bad_prediction_files_fail_naming_the_file_the_item_and_the_reason(
    tmp_path, capsys, files, strict_only, message
):
    pred = folder(tmp_path, *files)
    strict, default = score(pred, capsys, GT, "--strict"), score(pred, capsys)
    if strict_only:  # the default scores the file as the official scorer does
        assert strict[0] == 2 and message in strict[2], strict[2]
        assert default[0] == 0, default[2]
    else:
        assert default[0] == 2 and message in default[2], default[2]
        assert strict[0] == 2


def test_a_folder_reusing_ids_is_scored_as_the_official_scorer_scores_it(tmp_path, capsys):
    # The structure of two published result folders: one file's entries reuse an id of an
    # older numbering (the second id 7 is another EPM question, with its own ground truth, A), and
    # a forward entry carries its own probe counts (an older release's). The official score.py
    # scores every entry against its own ground truth:
    # EPM "C" (gt C) 1, "A" (its own gt A) 1 -> 100; ASI "B" (gt A) 0; HLD "B" (gt B) 1 -> 200/3;
    # OJR "A" 1 -> realtime 100; REC own counts 1, 2, 3, 3 vs "1", "2", "3", "2": 3/4 -> 75;
    # total (200/3 + 100 + 75) / 3 = 725/9
    older = official(1560, ["1", "2", "3", "2"])
    for probe, count in zip(older["test_info"], (1, 2, 3, 3), strict=True):
        probe["count"] = count
    pred = folder(
        tmp_path,
        [official(7, "C"), _replace(official(7, "A"), question="What did I leave?", ground_truth="A")],
        [official(305, "B"), official(480, "B"), official(811, "A"), older],
    )
    code, res, err = score(pred, capsys)
    assert code == 0, err
    assert (res["EPM"], res["ASI"], res["HLD"], res["OJR"], res["REC"]) == (100.0, 0.0, 100.0, 100.0, 75.0)
    assert res["backward"] == pytest.approx(200 / 3) and res["total"] == pytest.approx(725 / 9)
    assert res["scored"]["EPM"] == 2 and res["reused_ids"] == [7] and res["own_ground_truth"] == [7, 1560]
    assert "1 ids given more than once, each entry scored, as the official scorer scores them" in err
    assert "(--strict refuses them): 7" in err and "not the release's, as the official scorer" in err
    code, _, err = score(pred, capsys, GT, "--strict")
    assert code == 2 and "id 7 is given twice (first: MyModel_0_offline.json backward[0] (id 7))" in err


def test_an_item_in_the_wrong_list_and_a_file_for_a_folder_fail(tmp_path, capsys):
    out = folder(tmp_path, [])
    (out / "MyModel_0_offline.json").write_text(
        json.dumps({"backward": [], "realtime": [official(7, "C")], "forward": []})
    )
    code, _, err = score(out, capsys)
    assert (
        code == 2 and "record realtime[0] (id 7): listed under 'realtime', but EPM is a backward task" in err
    )
    code, _, err = score(out / "MyModel_0_offline.json", capsys)
    assert code == 2 and "expected the folder <results>/<model> of official prediction files" in err
    (out / "MyModel_0_offline.json").write_text(json.dumps({"backward": [], "realtime": []}))
    code, _, err = score(out, capsys)
    assert code == 2 and "expected an object with the lists 'backward', 'realtime' and 'forward'" in err


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"id": 99, "task": "XYZ"}, "record id 99: field 'task': unknown task 'XYZ'"),
        (
            {"test_info": [{"realtime": 8, "type": 0}, {"type": 1}]},
            "record id 1470: field 'test_info[1].realtime': a probe needs its time",
        ),
        ({"ask_time": "8s"}, "record id 1470: field 'ask_time': cannot parse time '8s'"),
    ],
)
def test_a_bad_release_file_fails_naming_the_item(tmp_path, capsys, change, message):
    items = copy.deepcopy(RELEASE)
    items[9].update(change)  # the CRR item
    gt = tmp_path / "ovo_bench_new.json"
    gt.write_text(json.dumps(items))
    code, _, err = score(folder(tmp_path, [official(7, "C")]), capsys, gt=gt)
    assert code == 2 and f"file {gt}, {message}" in err, err


def _records() -> list[Stream]:
    """The fixture's records as ``source=ovo`` builds them (no probe), read back from their JSON."""
    streams = [s for item in read_release(GT) for s in item_streams(item, item.video, None, Tally())]
    return [Stream.from_dict(json.loads(json.dumps(s.to_dict()))) for s in streams]


def test_replies_answer_the_question_whose_step_they_follow():
    rec = {s.id: s for s in _records()}["ovo-1560"]  # REC probes at 4, 11, 11, 16.5 on a 17 s clip
    replies = [
        Reply(2.0, "0"),
        Reply(4.0, "1"),
        Reply(11.0, "2"),
        Reply(11.0, "3"),
        Reply(12.0, "9"),
        Reply(16.0, "2"),
    ]
    # 2 s is before the first probe, 12 s a third reply in the span of the two 11 s probes: both unused;
    # 16.5 lands on the last step, 16 s
    assert probe_answers(rec, replies) == (["1", "2", "3", "2"], 2)
    assert probe_answers(rec, [Reply(5.0, "1")]) == (["1", None, None, None], 0)


def test_records_and_replies_round_trip_to_the_official_figures(tmp_path, capsys, caplog):
    # at 1 step/s a target lands on the first step at or after its time, at most the clip's last step
    replies = {
        "ovo-7": [(3.0, "A"), (11.0, "C")],  # lands on 11 (clip 12 s); 3 s answers nothing. gt C: 1
        "ovo-305": [(9.0, "B")],  # gt A: 0
        "ovo-480": [(11.0, "B")],  # 11.5 s on a 12 s clip (no probe), lands on 11; gt B: 1
        # ovo-650 (STU) has no prediction: left out, STU has no figure
        "ovo-811": [(0.0, "A")],  # 1
        "ovo-902": [(6.0, "The car is blue, so C")],  # 1
        "ovo-1010": [],  # null response: 0
        "ovo-1101": [(10.0, "D")],  # 1
        "ovo-1230": [(14.0, "A")],  # 1
        # REC: 1, 2, 3 (count 2: 0), the 12 s reply unused, 2 -> 3/4
        "ovo-1560": [(4.0, "1"), (11.0, "2"), (11.0, "3"), (12.0, "2"), (16.0, "2")],
        "ovo-1520-step0": [(3.0, "Yes"), (7.0, "No")],  # probes 0, 1 (types 1, 1): 1, 0
        "ovo-1520-step1": [(5.0, "N"), (9.0, "Y")],  # probes 2, 3, 4 (types 0, 1, 1): 1, 1, null 0
        "ovo-1470": [(8.0, "No"), (11.0, "Yes"), (15.0, "Yes"), (21.0, "Yes, now")],  # types 0 0 1 1: 1 0 1 1
    }
    preds = [Prediction(rid, [Reply(t, x) for t, x in rs]) for rid, rs in replies.items()]
    out = tmp_path / "results" / "ours"
    summary = write_predictions(_records(), preds, out)
    del summary["path"]
    assert summary == {
        "incomplete_items": 0,
        "items": 11,
        "records": 13,
        "missing_records": 1,
        "unanswered": 2,
        "unused_replies": 2,
    }
    assert "1 of 13 OVO-Bench records have no prediction (left out), 2 questions no answer" in caplog.text
    written = json.loads((out / "ovo_predictions.json").read_text())
    assert [tuple(x) for x in written["backward"]] == [CHOICE_FIELDS] * 3
    ssr = next(x for x in written["forward"] if x["task"] == "SSR")
    assert [p["response"] for p in ssr["test_info"]] == ["Yes", "No", "N", "Y", None]
    assert ssr["test_info"][2] == {"realtime": 5, "step": "fit the new chain", "type": 0, "response": "N"}
    # backward EPM 100, ASI 0, HLD 100 -> 200/3; realtime OJR, ATR, OCR, FPD 100, ACR 0 -> 80;
    # forward REC 75, SSR 3/5 = 60, CRR 75 -> 70; total (200/3 + 80 + 70) / 3 = 650/9
    code, res, err = score(out, capsys)
    assert code == 0, err
    assert (res["EPM"], res["ASI"], res["HLD"], res["ACR"], res["STU"]) == (100.0, 0.0, 100.0, 0.0, None)
    assert (res["REC"], res["SSR"], res["CRR"], res["realtime"], res["forward"]) == (
        75.0,
        60.0,
        75.0,
        80.0,
        70.0,
    )
    assert res["backward"] == pytest.approx(200 / 3) and res["total"] == pytest.approx(650 / 9)
    assert res["missing"] == {"STU": 1}


def test_writing_refuses_a_stray_prediction_and_leaves_out_a_part_predicted_item(tmp_path, caplog):
    records = _records()
    with pytest.raises(RecordError, match="record ovo-9: a prediction for an id that is no record given"):
        write_predictions(records, [Prediction("ovo-9", [])], tmp_path)
    assert not list(tmp_path.iterdir())  # nothing half-written
    # SSR 1520 predicted on its first step only: its test_info cannot be written whole, so the item
    # is left out (the scorer then counts it missing), counted and logged
    summary = write_predictions(records, [Prediction("ovo-1520-step0", [Reply(3.0, "Yes")])], tmp_path)
    assert (summary["items"], summary["incomplete_items"], summary["missing_records"]) == (0, 1, 12)
    assert "1 SSR items predicted on some of their steps only, left out whole" in caplog.text
    assert "1520 (no prediction for ovo-1520-step1)" in caplog.text
    assert json.loads((tmp_path / "ovo_predictions.json").read_text()) == {
        "backward": [],
        "realtime": [],
        "forward": [],
    }


# The official cut, as ``utils/chunk_videos.py`` writes it for a probe (and, in its branch for them,
# for a multiple-choice question): ``end_time = math.ceil(realtime)``, at most the video's length,
# then ``clip = video.subclip(0, end_time)``; the written clip lasts ``end_time`` seconds, so its
# frames are those at times before ``end_time``: at 1 frame/s, frames 0 .. ceil(t) - 1.
def _official_frames(t: float, video_seconds: int) -> list[int]:
    end = min(math.ceil(t), video_seconds)
    return [k for k in range(video_seconds) if k < end] or [0]


def test_official_mode_asks_each_question_on_the_frames_of_its_official_cut():
    # one video of 11 s: REC probes first at 0.4 s (fractional), middle at 4 s (whole) and 7.5 s
    # (fractional), last at 11 s (whole, the clip's end); questions at 6 s (whole) and 9.5 s
    rec = {"id": 70, "task": "REC", "video": "v.mp4", "activity": "jump", "start_times": [1], "end_times": [2],
           "test_info": [{"realtime": t, "count": 1} for t in (0.4, 4, 7.5, 11)]}  # fmt: skip
    mc = [
        {"id": 71 + k, "task": "EPM", "video": "v.mp4", "realtime": t, "question": "Where?",
         "options": ["here", "there"], "gt": 0}
        for k, t in enumerate((6, 9.5))
    ]  # fmt: skip
    streams = [s for raw in (rec, *mc) for s in item_streams(parse_item(raw), "v.mp4", None, Tally())]
    [(longest, probes)] = probe_plan(streams, 1.0)
    assert longest.id == "ovo-70" and longest.clip_end == 11.0
    seen = {p.key: list(range(p.step + 1)) for p in probes}  # a probe at step k has seen frames 0..k
    times = {("ovo-70", j): t for j, t in enumerate((0.4, 4, 7.5, 11))} | {
        ("ovo-71", 0): 6,
        ("ovo-72", 0): 9.5,
    }
    assert seen == {key: _official_frames(t, 11) for key, t in times.items()}
    assert [len(seen[("ovo-70", j)]) for j in range(4)] == [1, 4, 8, 11]
    assert (len(seen[("ovo-71", 0)]), len(seen[("ovo-72", 0)])) == (6, 10)
    # the official answer rule reads each answer at that step: replies there answer their probe
    replies = [Reply(float(k), f"{k}") for k in (0, 3, 7, 10)]
    assert probe_answers(streams[0], replies, official_cut=True) == (["0", "3", "7", "10"], 0)
    # the streaming rule reads them at the first step at or after each time: they shift
    assert probe_answers(streams[0], replies) == (["3", "7", None, "10"], 1)
    cuts = [cut_step(longest, t) for t in (6.0, 5.999, 6.001, 0.0, 30.0)]
    assert cuts == [5, 5, 6, 0, 10]  # 30 s: past the video's end, the cut stops at its last frame


# The official prompt templates (``constant.py``), as their text reads: the blank first line, the
# trailing spaces and the typographic quotes are the benchmark's.
OFFICIAL_PROMPTS = {
    "choice": """
Question: {}
Options:
{}

Respond only with the letter corresponding to your chosen option (e.g., A, B, C). 
Do not include any additional text or explanation in your response.
""",  # noqa: W291 (the template's own trailing spaces)
    "REC": """
You're watching a video in which people may perform a certain type of action repetively. 
The person performing this kind of action are referred to as 'they' in the following statement.
You're task is to count how many times have different people in the video perform this kind of action in total.
One complete motion counts as one. 
Now, answer the following question: {}
Provide your answer as a single number (e.g., 0, 1, 2, 3…) indicating the total count.
Do not include any additional text or explanation in your response.
""",  # noqa: W291 (the template's own trailing spaces)
    "SSR": """
You're watching a tutorial video which contain a sequential of steps. 
The following is one step from the whole procedures: 
{}
Your task is to determine if the man or woman in the video is currently performing this step.
Answer only with “Yes” or “No”.
Do not include any additional text or explanation in your response.
""",  # noqa: W291 (the template's own trailing spaces)
    "CRR": """
You're responsible of answering questions based on the video content. 
The following question are relevant to the latest frames, i.e. the end of the video.
{}
Decide whether existing visual content, especially latest frames, i.e. frames that near the end of the video, provide enough information for answering the question.
Answer only with “Yes” or “No”.
Do not include any additional text or explanation in your response.
""",  # noqa: W291 (the template's own trailing spaces)
}  # fmt: skip


def test_the_prompts_are_the_official_templates_word_for_word():
    ours = {"choice": CHOICE_PROMPT, "REC": REC_PROMPT, "SSR": SSR_PROMPT, "CRR": CRR_PROMPT}
    assert ours == OFFICIAL_PROMPTS
    rec = {s.id: s for s in _records()}["ovo-1560"]
    activity = BY_ID[1560]["activity"]
    assert rec.instruction == OFFICIAL_PROMPTS["REC"].format(f"How many times did they {activity}?")


def test_a_part_given_twice_in_a_prediction_file_is_refused_naming_the_file_and_the_key(tmp_path, capsys):
    """``backward`` twice in one file, the second empty: a JSON reader drops the first list's items."""
    pred = folder(tmp_path, [official(7, "C")])
    (path,) = pred.iterdir()
    path.write_text(path.read_text().replace('"realtime"', '"backward": [], "realtime"', 1))
    for strict in ([], ["--strict"]):
        code, _, err = score(pred, capsys, GT, *strict)
        assert code == 2 and f"file {path}" in err and "key 'backward' is given twice" in err, err
