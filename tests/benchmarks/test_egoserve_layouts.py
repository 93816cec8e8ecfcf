"""``eval.score --protocol egoserve`` reads EgoMemo's files as they are: the per-unit folders of its
inference (each dataset's suffix, EgoLife DAY folders), the release root with a prediction root,
a flat list, a ``{unit: [entries]}`` object, JSON Lines and this project's reply lines."""

from __future__ import annotations

import json


def _one_of_each(tree):
    """One matched service per dataset: EgoLife A1_JAKE DAY1 safety, HoloAssist tool_use,
    CaptainCook4D error_recovery; and one false positive on HoloAssist. Official: safety 1/1/1,
    tool_use 1/2/1 (F1 2/3), error_recovery 1/1/1 -> Overall (1 + 2/3 + 1) / 3."""
    tree.ego_event("A1_JAKE", "instant", "safety", "DAY1 10:00:00-10:00:10")
    tree.pred("egolife", "A1_JAKE", tree.entry(tree.service("Safety", "DAY1 10:00:05-10:00:05")), day=1)
    tree.holo_event("z045-june-27-22-dslr", "instant", "tool_use", "00:00:19.503-00:00:21.433")
    tree.pred(
        "holoassist",
        "z045-june-27-22-dslr",
        tree.entry(tree.service("Tool Use", "DAY1 00:00:20-00:00:20"), form="list"),
        tree.entry(tree.service("Tool Use", "DAY1 00:05:00-00:05:00"), form="list"),
    )
    tree.cc_item("3_41", 120.4, 151.0)
    tree.pred("captaincook4d", "3_41", tree.entry(tree.service("Error-Recovery", "DAY1 00:02:10-00:02:12")))
    return tree.write()


EXPECTED = {"safety": (1, 1, 1), "tool_use": (1, 2, 1), "error_recovery": (1, 1, 1)}


def test_egomemo_folders_per_dataset_and_the_release_root(tree, egoserve):
    _one_of_each(tree)
    per_dataset, _ = egoserve(*tree.args("egolife", "holoassist", "captaincook4d"))
    assert tree.counts(per_dataset) == EXPECTED
    assert per_dataset["overall_f1"] == 100 * ((1 + 2 / 3 + 1) / 3)
    assert per_dataset["datasets"] == ["captaincook4d", "egolife", "holoassist"]
    root, _ = egoserve("--gt", str(tree.gt_root), "--pred", str(tree.pred_root))
    assert tree.counts(root) == EXPECTED and root["overall_f1"] == per_dataset["overall_f1"]


def test_a_release_root_whose_dataset_has_no_prediction_folder(tree, egoserve):
    # HoloAssist GT is there but predictions/holoassist_rebuttal is not: the official evaluator finds
    # no video and leaves the dataset out; its GT event is counted as dropped.
    _one_of_each(tree)
    for f in (tree.pred_root / "holoassist_rebuttal").rglob("*.json"):
        f.unlink()
    for d in sorted((tree.pred_root / "holoassist_rebuttal").rglob("*"), reverse=True):
        d.rmdir()
    (tree.pred_root / "holoassist_rebuttal").rmdir()
    res, _ = egoserve("--gt", str(tree.gt_root), "--pred", str(tree.pred_root))
    assert tree.counts(res) == {"safety": (1, 1, 1), "error_recovery": (1, 1, 1)}
    assert res["dropped"]["dataset_without_prediction_folder"] == 1
    assert res["dropped"]["gt_unit_without_predictions"] == 1


def test_folder_suffixes_are_each_datasets_own(tree, egoserve):
    # HoloAssist folders end in "-qwenvl_3_8b_instruct", CaptainCook4D folders in "_qwenvl_3_8b_instruct";
    # a folder with the other separator (or an EgoLife folder without "_restart") is not read
    # (as in the official code) and is counted and named.
    _one_of_each(tree)
    tree.holo_event("v2", "instant", "safety", "10-12")
    tree.pred(
        "holoassist",
        "v2",
        tree.entry(tree.service("Safety", "DAY1 00:00:11-00:00:11")),
        suffix="_qwenvl_3_8b_instruct",
    )
    tree.cc_item("9_9", 10, 12)
    tree.pred(
        "captaincook4d",
        "9_9",
        tree.entry(tree.service("Error-Recovery", "DAY1 00:00:11-00:00:11")),
        suffix="-qwenvl_3_8b_instruct",
    )
    tree.pred(
        "egolife",
        "A1_JAKE",
        tree.entry(tree.service("Safety", "DAY1 18:00:00-18:00:00")),
        day=1,
        suffix="-qwenvl_3_8b_instruct",
    )
    tree.write()
    res, err = egoserve(*tree.args("egolife", "holoassist", "captaincook4d"))
    assert tree.counts(res) == EXPECTED
    assert res["dropped"]["pred_folder_other_suffix"] == 3 and "v2_qwenvl_3_8b_instruct" in err
    assert res["dropped"]["gt_unit_without_predictions"] == 2  # v2 and 9_9 have no folder of their own


def test_another_models_folders_with_model_suffix_and_response_name(tree, capsys, egoserve):
    from eval.score import main

    tree.ego_event("A4_LUCIA", "instant", "safety", "DAY2 10:00:00-10:00:10")
    svc = tree.service("Safety", "DAY2 10:00:05-10:00:05")
    tree.pred(
        "egolife",
        "A4_LUCIA",
        tree.entry(svc),
        day=2,
        suffix="-mymodel_restart",
        response="proactive_response_ablation",
    )
    tree.write()
    args = ["--protocol", "egoserve", *tree.args("egolife")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "no unit folder ends with '-qwenvl_3_8b_instruct_restart'" in err and "--model-suffix" in err
    res, _ = egoserve(
        *tree.args("egolife"),
        "--model-suffix=-mymodel_restart",
        "--response-name",
        "proactive_response_ablation",
    )
    assert tree.counts(res) == {"safety": (1, 1, 1)}
    res, _ = egoserve(*tree.args("egolife"), "--model-suffix=-mymodel_restart")  # default response name
    assert (
        res["dropped"]["pred_file_other_response_name"] == 1
        and res["dropped"]["gt_unit_without_predictions"] == 1
    )


def test_flat_list_unit_object_and_json_lines_read_like_the_folders(tree, egoserve, tmp_path):
    _one_of_each(tree)
    expected, _ = egoserve(*tree.args("holoassist", "egolife"))

    def entries(dataset, unit_dir):
        path = next(
            (
                tree.pred_root / {"egolife": "egolife_results", "holoassist": "holoassist_rebuttal"}[dataset]
            ).glob(f"{unit_dir}*/**/*.json")
        )
        return json.loads(path.read_text())

    holo = entries("holoassist", "z045")
    ego = entries("egolife", "A1_JAKE")
    flat_holo = tmp_path / "holo_flat.json"
    flat_holo.write_text(json.dumps([{"video_name": "z045-june-27-22-dslr", **e} for e in holo]))
    flat_ego = tmp_path / "ego_flat.jsonl"
    flat_ego.write_text("".join(json.dumps({"person": "A1_JAKE", **e}) + "\n" for e in ego))
    by_unit_holo = tmp_path / "holo_by_unit.json"
    by_unit_holo.write_text(json.dumps({"z045-june-27-22-dslr": holo}))
    by_day_ego = tmp_path / "ego_by_day.json"
    by_day_ego.write_text(json.dumps({"A1_JAKE/DAY1": ego}))
    for holo_pred, ego_pred in ((flat_holo, flat_ego), (by_unit_holo, by_day_ego)):
        res, _ = egoserve(
            "--gt",
            str(tree.gt("holoassist")),
            "--pred",
            str(holo_pred),
            "--gt",
            str(tree.gt("egolife")),
            "--pred",
            str(ego_pred),
        )
        assert tree.counts(res) == tree.counts(expected) == {"safety": (1, 1, 1), "tool_use": (1, 2, 1)}
        assert res["overall_f1"] == expected["overall_f1"]


def test_an_egolife_unit_key_with_a_day_evaluates_that_day_only(tree, egoserve, tmp_path):
    # {"A1_JAKE/DAY1": [...]}: DAY1 is evaluated, the DAY2 GT is not (as a DAY1-only folder);
    # {"A1_JAKE": [...]}: every day 1-5 is, so the DAY2 GT counts as missed.
    tree.ego_event("A1_JAKE", "instant", "safety", "DAY1 10:00:00-10:00:10")
    tree.ego_event("A1_JAKE", "instant", "safety", "DAY2 10:00:00-10:00:10").write()
    entries = [tree.entry(tree.service("Safety", "DAY1 10:00:05-10:00:05"))]
    for key, expected in (("A1_JAKE/DAY1", (1, 1, 1)), ("A1_JAKE", (1, 1, 2))):
        pred = tmp_path / "ego.json"
        pred.write_text(json.dumps({key: entries}))
        res, _ = egoserve("--gt", str(tree.gt("egolife")), "--pred", str(pred))
        assert tree.counts(res) == {"safety": expected}


def test_reply_lines_against_the_release_files(tree, egoserve, tmp_path):
    tree.holo_event("vidA", "instant", "safety", "19.5-21.4").holo_event(
        "vidA", "short_term", "error_recovery", "100.0-104.0"
    )
    tree.write()
    pred = tmp_path / "pred.jsonl"
    replies = [
        {"time": 31.0, "text": "[safety] Careful."},
        {"time": 102.0, "text": "Undo it.", "category": "Error-Recovery"},
    ]
    pred.write_text(json.dumps({"id": "vidA", "replies": replies}) + "\n")
    res, _ = egoserve("--gt", str(tree.gt("holoassist")), "--pred", str(pred))
    assert tree.counts(res) == {"safety": (1, 1, 1), "error_recovery": (1, 1, 1)}


def test_unreadable_entries_are_counted_and_named_never_a_traceback(tree, egoserve, tmp_path):
    tree.holo_event("vidA", "instant", "safety", "10-12").write()
    pred = tmp_path / "pred.json"
    good = tree.entry(tree.service("Safety", "DAY1 00:00:11-00:00:11"))
    pred.write_text(
        json.dumps(
            [
                {"video_name": "vidA", **good},
                "not an entry",
                {"gemini_response": []},
                {"video_name": "vidA", "gemini_response": ["not a service", {"service_sub_type": "Safety"}]},
                {
                    "video_name": "vidA",
                    "gemini_response": {
                        "finalized_services": [
                            {"service_sub_type": None, "trigger_time_window": "DAY1 00:00:11-00:00:12"}
                        ]
                    },
                },
            ]
        )
    )
    res, err = egoserve("--gt", str(tree.gt("holoassist")), "--pred", str(pred))
    assert tree.counts(res) == {"safety": (1, 1, 1)}
    assert res["dropped"]["pred_entry_without_unit"] == 2 and f"{pred}[1]" in err
    assert res["dropped"]["pred_service_not_an_object"] == 1 and res["dropped"]["pred_unparsable_window"] == 1
    assert res["official_would_fail"] == {"pred: a service type must be a string, got NoneType": 1}
    assert res["strict"]["errors"]["pred_unknown_subtype"] == 1


def test_files_that_are_not_release_files_fail_with_their_name(tree, capsys, tmp_path):
    from eval.score import main

    bad = tmp_path / "notes.json"
    bad.write_text('"just text"')
    assert main(["--protocol", "egoserve", "--gt", str(bad), "--pred", str(tmp_path)]) == 2
    assert str(bad) in capsys.readouterr().err
    assert (
        main(["--protocol", "egoserve", "--gt", str(tmp_path / "missing.json"), "--pred", str(tmp_path)]) == 2
    )
    assert "does not exist" in capsys.readouterr().err


def test_a_unit_given_twice_in_a_flat_prediction_object_is_refused_naming_it(tree, capsys, tmp_path):
    """``{unit: [entries]}`` with the unit twice: a JSON reader keeps the second list only."""
    _one_of_each(tree)
    pred = tmp_path / "holo_by_unit.json"
    pred.write_text('{"z045-june-27-22-dslr": [], "z045-june-27-22-dslr": []}')
    from eval.score import main

    code = main(["--protocol", "egoserve", "--gt", str(tree.write().gt("holoassist")), "--pred", str(pred)])
    err = capsys.readouterr().err
    assert code == 2 and f"file {pred}: key 'z045-june-27-22-dslr' is given twice" in err, err
