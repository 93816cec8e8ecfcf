"""``eval.score --protocol egoserve`` reproduces the official evaluator, one rule per test.

Every fixture is a small release folder and EgoMemo prediction folders written by ``tree``
(tests/servers.py) with invented values; each test's comment works out the official number by
hand (tolerances: EgoLife 60 s, HoloAssist 10 s, CaptainCook4D 25 s)."""

from __future__ import annotations

import json


def hms(seconds: float) -> str:
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{int(h):02d}:{int(m):02d}:{s:02g}" if s == int(s) else f"{int(h):02d}:{int(m):02d}:{s:04.1f}"


def vid(start: float, end: float | None = None) -> str:
    """A HoloAssist/CaptainCook4D prediction window (``DAY1`` required by the official parser, ignored)."""
    return f"DAY1 {hms(start)}-{hms(start if end is None else end)}"


def f1(matched: int, n_pred: int, n_gt: int) -> float:
    p, r = matched / n_pred if n_pred else 0.0, matched / n_gt if n_gt else 0.0
    return 2 * p * r / (p + r) if p + r else 0.0


def test_ties_go_to_the_earliest_prediction_centre(tree, egoserve):
    # HoloAssist: GT [100, 120] and [128, 130]; the file lists 118 before 101. Official: predictions
    # sorted by centre, GT1 takes 101 (both are inside, distance 0, the earlier wins), 118 is 10 s
    # before GT2 (= tol): 2 matches. EgoLife likewise with t+115 listed before t+2 for GT [t, t+120],
    # [t+170, t+175]: t+2 -> GT1, t+115 is 55 s before GT2. safety 2/2/2, tool_use 2/2/2 -> 100.
    tree.holo_event("v-tie", "instant", "safety", "100-120").holo_event(
        "v-tie", "instant", "safety", "128-130"
    )
    tree.pred(
        "holoassist",
        "v-tie",
        tree.entry(tree.service("Safety", vid(118))),
        tree.entry(tree.service("Safety", vid(101))),
    )
    t = 10 * 3600
    for a, b in ((t, t + 120), (t + 170, t + 175)):
        tree.ego_event("A1_JAKE", "instant", "tool_use", f"DAY2 {hms(a)}-{hms(b)}")
    late, early = (tree.service("Tool Use", f"DAY2 {hms(x)}-{hms(x)}") for x in (t + 115, t + 2))
    tree.pred("egolife", "A1_JAKE", tree.entry(late), tree.entry(early), day=2).write()
    res, _ = egoserve(*tree.args("holoassist", "egolife"))
    assert tree.counts(res) == {"safety": (2, 2, 2), "tool_use": (2, 2, 2)}
    assert res["overall_f1"] == 100.0


def test_tolerance_edges_are_inclusive_in_the_official_arithmetic(tree, egoserve):
    # tool_use: GT DAY3 [10:00:00, 10:00:10]; prediction 10:01:05-10:01:15 has centre end + 60 -> in.
    # GT [12:00:00, 12:00:10]; 12:01:06-12:01:15 has centre end + 60.5 -> out. tool_use 1/2/2: F1 .5.
    # safety: GT DAY1 [09:59:50, 10:00:00.2], prediction 10:01:00.1-10:01:00.3: the official centre
    # 86400 + (36060.1 + 36060.3) / 2.0 = 122460.2 equals end + 60 exactly (averaging the absolute
    # ends instead gives 122460.20000000001, outside); GT [11:00:00, 11:00:10] with a centre at
    # start - 60 -> in. safety 2/2/2: F1 1. Overall (0.5 + 1) / 2 = 75.
    for window, sub in (
        ("DAY3 10:00:00-10:00:10", "tool_use"),
        ("DAY3 12:00:00-12:00:10", "tool_use"),
        ("DAY1 09:59:50-10:00:00.2", "safety"),
        ("DAY1 11:00:00-11:00:10", "safety"),
    ):
        tree.ego_event("A1_JAKE", "instant", sub, window)
    tree.pred("egolife", "A1_JAKE", tree.entry(tree.service("Tool Use", "DAY3 10:01:05-10:01:15")), day=3)
    tree.pred("egolife", "A1_JAKE", tree.entry(tree.service("Tool Use", "DAY3 12:01:06-12:01:15")), day=3)
    tree.pred("egolife", "A1_JAKE", tree.entry(tree.service("Safety", "DAY1 10:01:00.1-10:01:00.3")), day=1)
    tree.pred(
        "egolife", "A1_JAKE", tree.entry(tree.service("Safety", "DAY1 10:58:55-10:59:05")), day=1
    ).write()
    res, _ = egoserve(*tree.args("egolife"))
    assert tree.counts(res) == {"safety": (2, 2, 2), "tool_use": (1, 2, 2)}
    assert res["overall_f1"] == 75.0


def test_memory_recall_outside_egolife_is_left_out_of_the_macro(tree, egoserve):
    # HoloAssist: GT safety [50, 55]; predictions safety 51 and three Episodic names at 52-54: not
    # HoloAssist subtypes, kept raw in the micro count only. CaptainCook4D: GT Safety [50, 55] and an
    # "Episodic Memory Recall" GT [80, 85] (raw: micro num_gt only); its Episodic predictions at 81
    # and 82 are skipped outright. Official: safety 2/2/2 -> Overall 100 (one active subtype);
    # micro: predictions 4 + 1 = 5, GT 1 + 2 = 3, matched 2.
    # Strict view: memory_recall 1/3/1 (F1 .5), task_reminder 0/2/0 (F1 0), safety 1 -> 50.
    tree.holo_event("v-mr", "instant", "safety", "50-55")
    names = (
        ("Episodic Memory Recall", 52),
        ("memory_recall", 53),
        ("Episodic Task Reminder", 54),
        ("Safety", 51),
    )
    tree.pred("holoassist", "v-mr", tree.entry(*(tree.service(n, vid(t)) for n, t in names), form="list"))
    tree.cc_item("1_1", 50, 55, sub="Safety", main="Instant Proactive Service")
    tree.cc_item("1_1", 80, 85, sub="Episodic Memory Recall", main="Episodic Proactive Service")
    cc_names = (("Episodic Memory Recall", 81), ("task reminder", 82), ("Safety", 52))
    tree.pred("captaincook4d", "1_1", tree.entry(*(tree.service(n, vid(t)) for n, t in cc_names))).write()
    res, err = egoserve(*tree.args("holoassist", "captaincook4d"))
    assert tree.counts(res) == {"safety": (2, 2, 2)} and res["overall_f1"] == 100.0
    assert (res["micro"]["matched"], res["micro"]["n_pred"], res["micro"]["n_gt"]) == (2, 5, 3)
    assert res["dropped"]["pred_subtype_micro_only"] == 3 and res["dropped"]["pred_subtype_skipped"] == 2
    assert res["dropped"]["gt_subtype_micro_only"] == 1
    strict = res["strict"]
    assert tree.counts(strict) == {
        "safety": (2, 2, 2),
        "memory_recall": (1, 3, 1),
        "task_reminder": (0, 2, 0),
    }
    assert strict["overall_f1"] == 100 * ((1 + 0.5 + 0) / 3)
    assert "pred_subtype_micro_only = 3" in err


def test_the_subtype_names_egomemo_asks_for(tree, egoserve):
    # EgoLife GT memory_recall, task_reminder, memory_link_contextual; predictions named as EgoMemo's
    # prompts name them, each inside its GT window and with its main type: 3 subtypes 1/1/1 -> 100.
    tree.ego_event("A4_LUCIA", "episodic", "memory_recall", "DAY1 09:00:00-09:00:10")
    tree.ego_event("A4_LUCIA", "episodic", "task_reminder", "DAY1 09:30:00-09:30:10")
    tree.ego_event("A4_LUCIA", "long_term", "memory_link_contextual", "DAY1 10:00:00-10:00:10")
    tree.pred(
        "egolife",
        "A4_LUCIA",
        tree.entry(
            tree.service(
                "Episodic Memory Recall", "DAY1 09:00:05-09:00:05", main="Episodic Proactive Service"
            )
        ),
        tree.entry(tree.service("Episodic Task Reminder", "DAY1 09:30:05-09:30:05", main="Episodic")),
        tree.entry(
            tree.service(
                "Long-Horizon Memory-Link", "DAY1 10:00:05-10:00:05", main="Long-Term Proactive Service"
            )
        ),
        day=1,
    ).write()
    res, _ = egoserve(*tree.args("egolife"))
    assert tree.counts(res) == {
        s: (1, 1, 1) for s in ("memory_link_contextual", "memory_recall", "task_reminder")
    }
    assert res["overall_f1"] == 100.0 and res["dropped"] == {}


def test_personal_progress_feedback_is_dropped_on_egolife_only(tree, egoserve):
    # EgoLife: habit_coaching GT matched; a "Personal Progress Feedback" prediction is dropped before
    # counting (EgoLife micro predictions 1). HoloAssist: the same name is kept raw (micro only):
    # HoloAssist micro predictions 2. Combined micro 2 matched / 3 predictions / 2 GT; Overall 100.
    tree.ego_event("A5_KATRINA", "long_term", "habit_coaching", "DAY4 20:00:00-20:00:10")
    tree.pred(
        "egolife",
        "A5_KATRINA",
        tree.entry(tree.service("Habit Coaching", "DAY4 20:00:05-20:00:05")),
        tree.entry(tree.service("Personal Progress Feedback", "DAY4 20:30:00-20:30:00", main="Long-Term")),
        day=4,
    )
    tree.holo_event("v-ppf", "instant", "tool_use", "10-12")
    tree.pred(
        "holoassist",
        "v-ppf",
        tree.entry(tree.service("Personal Progress Feedback", vid(11)), tree.service("Tool Use", vid(11))),
    )
    tree.write()
    res, _ = egoserve(*tree.args("egolife", "holoassist"))
    assert (
        tree.counts(res) == {"tool_use": (1, 1, 1), "habit_coaching": (1, 1, 1)}
        and res["overall_f1"] == 100.0
    )
    assert (res["micro"]["matched"], res["micro"]["n_pred"], res["micro"]["n_gt"]) == (2, 3, 2)
    assert (
        res["per_dataset"]["egolife"]["micro"]["n_pred"] == 1
        and res["per_dataset"]["holoassist"]["micro"]["n_pred"] == 2
    )
    assert res["dropped"]["pred_subtype_skipped"] == 1 and res["dropped"]["pred_subtype_micro_only"] == 1


def test_response_forms_null_text_and_dicts_without_finalized_services(tree, egoserve):
    # Ten GT safety events [20k + 10, 20k + 12]; entry k holds one matching service in form k. The
    # official reader takes services from: a list (0), finalized_services as a dict (1) or a list (2),
    # and even a dict whose suppression sits inside finalized_services (3). Nothing from null (4), raw
    # text (5), JSON text (6), a lone service dict (7), {"decision", "services"} (8), a top-level
    # "suppressed" (9). safety 4/4/10: P 1, R .4, F1 .8 / 1.4 -> 57.142857...
    # Strict: 0, 1, 2, 7, 8 read (3 and 9 are suppressed) -> 5/5/10: F1 2/3; null and text are errors.
    for k in range(10):
        tree.holo_event("v-forms", "instant", "safety", f"{20 * k + 10}-{20 * k + 12}")
    s = [tree.service("Safety", vid(20 * k + 11)) for k in range(10)]
    responses = [
        [s[0]],
        {"finalized_services": {"decision": "proactive", "services": [s[1]]}},
        {"finalized_services": [s[2]]},
        {"finalized_services": {"decision": "suppressed", "services": [s[3]]}},
        None,
        "I think the user should be careful.",
        '[{"service_sub_type": "Safety"}]',
        s[7],
        {"decision": "proactive", "services": [s[8]]},
        {"decision": "suppressed", "reason": "nothing new", "finalized_services": {"services": [s[9]]}},
    ]
    tree.pred(
        "holoassist",
        "v-forms",
        *({"frame_timestamp": k, "gemini_response": r} for k, r in enumerate(responses)),
    )
    res, _ = egoserve(*tree.write().args("holoassist"))
    assert tree.counts(res) == {"safety": (4, 4, 10)} and res["overall_f1"] == 100 * f1(4, 4, 10)
    assert {k: v for k, v in res["dropped"].items() if k.startswith("pred_")} == {
        "pred_entry_suppressed": 1,
        "pred_response_null": 1,
        "pred_response_text": 2,
        "pred_response_without_finalized_services": 2,
    }
    assert tree.counts(res["strict"]) == {"safety": (5, 5, 10)}
    assert res["strict"]["errors"] == {"pred_response_null": 1, "pred_response_text": 2}


def test_units_without_predictions_and_predictions_without_ground_truth(tree, egoserve):
    # EgoLife: A1_JAKE has a DAY1 file: his DAY1 GT stays (matched), his DAY2 GT is dropped; A4_LUCIA
    # has no folder: her GT is dropped. HoloAssist: a GT video without a folder is dropped; a folder
    # whose video is not in the GT, and one whose only GT has an empty message, are left out with
    # their predictions. CaptainCook4D: a GT recording without a folder is dropped, a prediction-only
    # recording counts as false positives. Official: safety 1/1/1, tool_use 1/1/1, error_recovery
    # 1/2/1 (F1 2/3) -> Overall (1 + 1 + 2/3) / 3.
    tree.ego_event("A1_JAKE", "instant", "safety", "DAY1 10:00:00-10:00:10")
    tree.ego_event("A1_JAKE", "instant", "safety", "DAY2 10:00:00-10:00:10")
    tree.ego_event("A4_LUCIA", "instant", "safety", "DAY1 10:00:00-10:00:10")
    tree.pred("egolife", "A1_JAKE", tree.entry(tree.service("Safety", "DAY1 10:00:05-10:00:05")), day=1)
    tree.holo_event("gt-only", "instant", "safety", "10-12")
    tree.holo_event("invalid-gt", "instant", "safety", "10-20", text="  ")
    tree.holo_event("both", "instant", "tool_use", "10-12")
    tree.pred("holoassist", "pred-only", tree.entry(tree.service("Safety", vid(15))))
    tree.pred(
        "holoassist",
        "invalid-gt",
        tree.entry(tree.service("Safety", vid(15)), tree.service("Safety", vid(200))),
    )
    tree.pred("holoassist", "both", tree.entry(tree.service("Tool Use", vid(11))))
    tree.cc_item("1_1", 100, 110).cc_item("2_2", 100, 110)
    tree.pred("captaincook4d", "2_2", tree.entry(tree.service("Error-Recovery", vid(105))))
    tree.pred("captaincook4d", "3_3", tree.entry(tree.service("Error-Recovery", vid(50)))).write()
    res, err = egoserve(*tree.args("egolife", "holoassist", "captaincook4d"))
    assert tree.counts(res) == {"safety": (1, 1, 1), "tool_use": (1, 1, 1), "error_recovery": (1, 2, 1)}
    assert res["overall_f1"] == 100 * ((1 + 1 + 2 / 3) / 3)
    assert res["dropped"]["gt_unit_without_predictions"] == 4  # A1 DAY2, A4, gt-only, 1_1
    assert res["dropped"]["pred_unit_not_evaluated"] == 3 and res["dropped"]["gt_empty_message"] == 1
    assert "gt-only" in err and "gt_unit_without_predictions = 4" in err
    # strict: every GT event counts. safety 2/4/5, tool_use 1/1/1, error_recovery 1/2/2
    assert tree.counts(res["strict"]) == {
        "safety": (2, 4, 5),
        "tool_use": (1, 1, 1),
        "error_recovery": (1, 2, 2),
    }
    assert res["strict"]["overall_f1"] == 100 * ((f1(2, 4, 5) + 1 + 0.5) / 3)


def test_day6_and_persons_other_than_the_default_three_are_ignored(tree, egoserve):
    # A1_JAKE: DAY5 GT matched by a DAY5 prediction; a DAY6 window inside the DAY5 file, the DAY6
    # folder and the DAY6 GT are ignored. A2_ALICE (not in A1_JAKE, A4_LUCIA, A5_KATRINA) is ignored
    # entirely. Official: safety 1/1/1 -> 100. Strict: safety 3/4/3 (DAY6 GT takes one of its two
    # predictions, A2_ALICE matches) -> F1 2 * .75 / 1.75.
    tree.ego_event("A1_JAKE", "instant", "safety", "DAY5 10:00:00-10:00:10")
    tree.ego_event("A1_JAKE", "instant", "safety", "DAY6 11:00:00-11:00:10")
    day6 = tree.service("Safety", "DAY6 11:00:05-11:00:05")
    tree.pred("egolife", "A1_JAKE", tree.entry(tree.service("Safety", "DAY5 10:00:05-10:00:05"), day6), day=5)
    tree.pred("egolife", "A1_JAKE", tree.entry(day6), day=6)
    tree.ego_event("A2_ALICE", "instant", "safety", "DAY1 10:00:00-10:00:10")
    tree.pred(
        "egolife", "A2_ALICE", tree.entry(tree.service("Safety", "DAY1 10:00:05-10:00:05")), day=1
    ).write()
    res, _ = egoserve(*tree.args("egolife"))
    assert tree.counts(res) == {"safety": (1, 1, 1)} and res["overall_f1"] == 100.0
    assert res["dropped"]["pred_day_not_evaluated"] == 2 and res["dropped"]["gt_day_not_evaluated"] == 1
    assert res["dropped"]["gt_person_not_evaluated"] == 1 and res["dropped"]["pred_unit_not_evaluated"] == 1
    assert tree.counts(res["strict"]) == {"safety": (3, 4, 3)}


def test_ground_truth_with_an_empty_first_assistant_text_is_dropped(tree, egoserve):
    # GT [10, 12]: the first assistant turn is blank (a later one is not); GT [30, 32]: no assistant
    # turn; GT [50, 52]: a message. Predictions at 11, 31, 51. Official: safety 1/3/1 -> F1 .5 -> 50.
    # Strict (the message is not needed to detect): 3/3/3 -> 100.
    blank_first = [{"role": "assistant", "utterance": "  "}, {"role": "assistant", "utterance": "Careful."}]
    tree.holo_event("v-empty", "instant", "safety", "10-12", dialogue=blank_first)
    tree.holo_event("v-empty", "instant", "safety", "30-32", dialogue=[{"role": "user", "utterance": "Hm."}])
    tree.holo_event("v-empty", "instant", "safety", "50-52")
    tree.pred("holoassist", "v-empty", tree.entry(*(tree.service("Safety", vid(t)) for t in (11, 31, 51))))
    res, _ = egoserve(*tree.write().args("holoassist"))
    assert tree.counts(res) == {"safety": (1, 3, 1)} and res["overall_f1"] == 50.0
    assert res["dropped"]["gt_empty_message"] == 2 and res["strict"]["overall_f1"] == 100.0


def test_unparsable_windows_are_dropped_and_counted(tree, egoserve):
    # GT "DAY1 10:00:00–10:00:10" (en dash) is dropped; GT 11:00:00-11:00:10 stays. Predictions: an
    # en dash, no DAY, one-digit minutes (all dropped) and "note: DAY1 11:00:05 - 11:00:06 approx"
    # (the official search finds it: matched). Official tool_use 1/1/1 -> 100.
    # Strict: both GT parse; the en-dash prediction matches GT1, "DAY1 9:5:00-9:6:00" reads as
    # 09:05:00-09:06:00 (a false positive), the other two are errors: tool_use 1/2/2 -> 50.
    tree.ego_event("A1_JAKE", "instant", "tool_use", "DAY1 10:00:00–10:00:10")
    tree.ego_event("A1_JAKE", "instant", "tool_use", "DAY1 11:00:00-11:00:10")
    windows = (
        "DAY1 10:00:01–10:00:02",
        "10:00:01-10:00:02",
        "DAY1 9:5:00-9:6:00",
        "note: DAY1 11:00:05 - 11:00:06 approx",
    )
    tree.pred("egolife", "A1_JAKE", *(tree.entry(tree.service("Tool Use", w)) for w in windows), day=1)
    res, _ = egoserve(*tree.write().args("egolife"))
    assert tree.counts(res) == {"tool_use": (1, 1, 1)}
    assert res["dropped"]["gt_unparsable_window"] == 1 and res["dropped"]["pred_unparsable_window"] == 3
    assert (
        tree.counts(res["strict"]) == {"tool_use": (1, 2, 2)}
        and res["strict"]["errors"]["pred_unparsable_window"] == 2
    )


def test_a_safety_event_under_short_term(tree, egoserve):
    # EgoLife takes the type from each event's sub_type: a safety event in short_term.json is an
    # Instant/safety GT (matched). HoloAssist reads only its five slots: short_term.safety is ignored,
    # so the safety prediction at 11 is a false positive. safety 1/2/1 (F1 2/3), tool_use 1/1/1
    # -> Overall (2/3 + 1) / 2. Strict: the misfiled event counts -> safety 2/2/2 -> 100.
    tree.ego_event("A1_JAKE", "short_term", "safety", "DAY1 10:00:00-10:00:10")
    tree.pred("egolife", "A1_JAKE", tree.entry(tree.service("Safety", "DAY1 10:00:05-10:00:05")), day=1)
    tree.holo_event("v-mis", "short_term", "safety", "10-12").holo_event(
        "v-mis", "instant", "tool_use", "30-32"
    )
    tree.pred(
        "holoassist", "v-mis", tree.entry(tree.service("Safety", vid(11)), tree.service("Tool Use", vid(31)))
    )
    res, _ = egoserve(*tree.write().args("egolife", "holoassist"))
    assert tree.counts(res) == {"safety": (1, 2, 1), "tool_use": (1, 1, 1)}
    assert res["overall_f1"] == 100 * ((2 / 3 + 1) / 2) and res["dropped"]["gt_outside_the_five_slots"] == 1
    assert res["strict"]["overall_f1"] == 100.0


def test_egolife_checks_the_main_type(tree, egoserve):
    # EgoLife: a Safety prediction labelled Short-Term cannot match the Instant GT; "Long Term" is no
    # known main type (kept as written: no match); "episodic" normalizes to Episodic (match).
    # HoloAssist does not check: its Safety prediction labelled Long-Term matches.
    # safety 1/2/2 (F1 .5), habit_coaching 0/1/1 (0), task_reminder 1/1/1 (1) -> Overall 50.
    tree.ego_event("A1_JAKE", "instant", "safety", "DAY1 10:00:00-10:00:10")
    tree.ego_event("A1_JAKE", "long_term", "habit_coaching", "DAY1 11:00:00-11:00:10")
    tree.ego_event("A1_JAKE", "episodic", "task_reminder", "DAY1 12:00:00-12:00:10")
    tree.pred(
        "egolife",
        "A1_JAKE",
        tree.entry(tree.service("Safety", "DAY1 10:00:05-10:00:05", main="Short-Term Proactive Service")),
        tree.entry(tree.service("Habit Coaching", "DAY1 11:00:05-11:00:05", main="Long Term")),
        tree.entry(tree.service("Task Reminder", "DAY1 12:00:05-12:00:05", main="episodic")),
        day=1,
    )
    tree.holo_event("v-main", "instant", "safety", "10-12")
    tree.pred(
        "holoassist",
        "v-main",
        tree.entry(tree.service("Safety", vid(11), main="Long-Term Proactive Service")),
    )
    res, _ = egoserve(*tree.write().args("egolife", "holoassist"))
    assert tree.counts(res) == {"safety": (1, 2, 2), "habit_coaching": (0, 1, 1), "task_reminder": (1, 1, 1)}
    assert res["overall_f1"] == 50.0 and res["dropped"]["pred_main_type_mismatch"] == 2
    assert res["strict"]["overall_f1"] == 100.0


def test_an_unreadable_prediction_file_keeps_its_unit(tree, egoserve):
    # v-ok: GT [10, 12] matched. v-bad: its folder holds a file that is not JSON; the official code
    # skips the file with a warning but the video is still evaluated, so its GT counts as missed.
    # safety 1/1/2 -> F1 2/3.
    tree.holo_event("v-ok", "instant", "safety", "10-12").holo_event("v-bad", "instant", "safety", "10-12")
    tree.pred("holoassist", "v-ok", tree.entry(tree.service("Safety", vid(11))))
    tree.raw(
        "predictions/holoassist_rebuttal/v-bad-qwenvl_3_8b_instruct/proactive_response_gpt_5.json",
        "{not json",
    )
    res, err = egoserve(*tree.write().args("holoassist"))
    assert tree.counts(res) == {"safety": (1, 1, 2)} and res["overall_f1"] == 100 * f1(1, 1, 2)
    assert res["dropped"]["pred_unreadable_file"] == 1 and "v-bad-qwenvl_3_8b_instruct" in err


def test_an_egolife_service_counts_on_its_own_day(tree, egoserve):
    # A1_JAKE has DAY2 (empty) and DAY3 files. The DAY3 file holds a DAY2 window (kept: DAY2 has a
    # file; it matches the DAY2 GT) and a DAY5 window (dropped: DAY5 has no file; so is the DAY5 GT).
    # safety 1/1/1 -> 100.
    tree.ego_event("A1_JAKE", "instant", "safety", "DAY2 10:00:00-10:00:10")
    tree.ego_event("A1_JAKE", "instant", "safety", "DAY5 10:00:00-10:00:10")
    tree.pred("egolife", "A1_JAKE", day=2)
    tree.pred(
        "egolife",
        "A1_JAKE",
        tree.entry(
            tree.service("Safety", "DAY2 10:00:05-10:00:05"), tree.service("Safety", "DAY5 10:00:05-10:00:05")
        ),
        day=3,
    ).write()
    res, _ = egoserve(*tree.args("egolife"))
    assert tree.counts(res) == {"safety": (1, 1, 1)}
    assert (
        res["dropped"]["pred_day_not_evaluated"] == 1 and res["dropped"]["gt_unit_without_predictions"] == 1
    )


def test_captaincook4d_items_without_a_time_are_skipped(tree, egoserve):
    # Items at (-1, -1), (30, -1) and without times are skipped; (0, 0) is kept and matched by a
    # prediction centred at 1 s (within 25 s). error_recovery 1/1/1 -> 100.
    tree.cc_item("4_4", -1, -1).cc_item("4_4", 30, -1).cc_item("4_4", 0, 0)
    tree.captaincook4d[0]["dialogue"]["items"].append({"service_type": {"main": "", "sub": "Error-Recovery"}})
    tree.pred("captaincook4d", "4_4", tree.entry(tree.service("Error-Recovery", vid(1))))
    res, _ = egoserve(*tree.write().args("captaincook4d"))
    assert tree.counts(res) == {"error_recovery": (1, 1, 1)} and res["dropped"]["gt_negative_time"] == 3
    assert res["strict"]["errors"]["gt_no_time"] == 3


def test_input_the_official_code_stops_on_is_counted_not_fatal(tree, egoserve):
    # The official EgoLife reader raises on a null trigger_time_window and on a null utterance (and
    # reports no number at all); here the two are dropped, counted under official_would_fail and the
    # rest is scored: safety 1/1/1.
    tree.ego_event("A1_JAKE", "instant", "safety", "DAY1 10:00:00-10:00:10")
    tree.ego_event(
        "A1_JAKE",
        "instant",
        "safety",
        "DAY1 12:00:00-12:00:10",
        proactive_dialogue=[{"role": "assistant", "utterance": None}],
    )
    tree.pred(
        "egolife",
        "A1_JAKE",
        tree.entry(tree.service("Safety", "DAY1 10:00:05-10:00:05"), tree.service("Safety", None)),
        day=1,
    ).write()
    res, err = egoserve(*tree.args("egolife"))
    assert tree.counts(res) == {"safety": (1, 1, 1)}
    assert res["official_would_fail"] == {
        "gt: an utterance must be a string, got NoneType": 1,
        "pred: a time window must be a string, got NoneType": 1,
    }
    assert "the official evaluator would stop on" in err


def test_a_key_given_twice_in_a_response_file_is_read_as_the_official_code_reads_it_and_counted(
    tree, egoserve
):
    # v-dup's entry holds its gemini_response twice, the second empty: the official json.load keeps
    # the empty one, so its service at 11 s is lost (safety 1/1/2, F1 2/3). The same number here,
    # with the lost value counted and named (dropped and strict: pred_duplicate_key).
    tree.holo_event("v-ok", "instant", "safety", "10-12").holo_event("v-dup", "instant", "safety", "10-12")
    tree.pred("holoassist", "v-ok", tree.entry(tree.service("Safety", vid(11))))
    text = json.dumps([tree.entry(tree.service("Safety", vid(11)), form="list")])
    relative = "predictions/holoassist_rebuttal/v-dup-qwenvl_3_8b_instruct/proactive_response_gpt_5.json"
    tree.raw(relative, text[: -len("}]")] + ', "gemini_response": []}]')
    res, err = egoserve(*tree.write().args("holoassist"))
    assert tree.counts(res) == {"safety": (1, 1, 2)} and res["overall_f1"] == 100 * f1(1, 1, 2)
    assert res["dropped"]["pred_duplicate_key"] == 1 and res["strict"]["errors"]["pred_duplicate_key"] == 1
    assert f"{tree.root / relative}: key 'gemini_response' is given twice" in err
