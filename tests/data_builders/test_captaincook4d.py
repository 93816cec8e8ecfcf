"""captaincook4d from its release layout: every Missing Step reminded, guidance consistent with the
reminders, instructions with their verb, ms overshoots and inversions kept, durations not probed."""

from __future__ import annotations

import json
import shutil

import pytest

from data_builders.build import build_source
from data_builders.sources.captaincook4d import step_text

# VERBATIM record from the CaptainCook4D error annotations (first 4 of 12 steps).
CAPTAINCOOK4D = {
    "recording_id": "1_10",
    "activity_id": 1,
    "is_error": True,
    "step_annotations": [
        {
            "description": "Coat -Coat a 6-oz. ramekin cup with cooking spray",
            "step_id": 3,
            "start_time": 11.749052505026611,
            "end_time": 46.436731329390895,
        },
        {
            "description": "Pour-Pour 1 egg into the ramekin cup",
            "step_id": 1,
            "start_time": 49.51386412832644,
            "end_time": 87.83815444234182,
        },
        {
            "description": "Microwave-Microwave the ramekin cup uncovered on high for 30 seconds",
            "step_id": 4,
            "errors": [{"tag": "Missing Step", "description": "Skipped this step"}],
            "start_time": -1.0,
            "end_time": -1.0,
            "modified_description": "Skipped this step",
        },
        {
            "description": "stir-stir the ramekin cup",
            "step_id": 11,
            "start_time": 91.4747659319929,
            "end_time": 136.22623827837478,
        },
    ],
}
SKIP = "You skipped a step: "


def _targets(stream):
    return [(round(t.time, 3), t.category, t.content) for t in stream.targets]


def test_verbatim_record_skip_in_the_middle_and_guidance_naming_it(tmp_path, mp4, build):
    videos = tmp_path / "videos"
    mp4(videos / "1_10_360p.mp4", 140)
    mp4(videos / "2_3_360p.mp4", 140)
    erroneous = json.loads(json.dumps(CAPTAINCOOK4D))
    erroneous["recording_id"] = "2_3"
    erroneous["step_annotations"][1]["errors"] = [{"tag": "Measurement Error", "description": "Used 2 eggs"}]
    ann = tmp_path / "error_annotations.json"
    ann.write_text(json.dumps([CAPTAINCOOK4D, erroneous]))
    first, second = build(tmp_path, "captaincook4d", ann, videos).records
    assert first.id == "captaincook4d-1_10" and first.task == "event_intervention"
    assert first.meta["recipe_order"] == "consensus"  # no task_graphs/ next to this file
    assert _targets(first) == [
        (46.437, "next_step_guidance", "Next: Pour 1 egg into the ramekin cup."),
        (87.838, "next_step_guidance", "Next: Microwave the ramekin cup uncovered on high for 30 seconds."),
        (91.475, "error_recovery", SKIP + "Microwave the ramekin cup uncovered on high for 30 seconds."),
    ]
    measured = [t for t in second.targets if t.window]
    assert [(t.time, t.window, t.content) for t in measured] == [
        (
            49.51386412832644,
            (49.51386412832644, 87.83815444234182),
            "Careful with 'Pour 1 egg into the ramekin cup': Used 2 eggs.",
        )
    ]
    only_errors = build(tmp_path, "captaincook4d", ann, videos, mode="errors").records
    assert [len(s.targets) for s in only_errors] == [1, 2]


def _missing_steps(ann):
    """(recording, step text) of every not-performed step tagged Missing Step, read from the file."""
    out = []
    for rec in json.loads(ann.read_text()):
        for s in rec["step_annotations"]:
            tags = {e["tag"] for e in s.get("errors", [])}
            if s["start_time"] < 0 and "Missing Step" in tags:
                out.append((rec["recording_id"], step_text(s["description"])))
    return out


def test_every_missing_step_is_reminded_wherever_it_is_listed(tmp_path, release, by_id):
    ann, videos = release("captaincook4d", real=False)
    s = by_id(
        build_source(
            "captaincook4d", tmp_path / "out", annotations=ann, videos=videos, check_videos=False
        ).records
    )
    missing = _missing_steps(ann)
    assert (
        len(missing) == 5
    )  # 2 listed after every performed step, 1 in the middle, 2 with nothing after them
    for rid, text in missing:
        assert SKIP + text + "." in [t.content for t in s[f"captaincook4d-{rid}"].targets], (rid, text)
    reminders = {
        sid: [(round(t.time, 3), t.content[len(SKIP) :]) for t in x.targets if t.content.startswith(SKIP)]
        for sid, x in s.items()
    }
    assert reminders == {
        # listed last; its recipe successor (the whisking, task graph) starts at 41.5 s
        "captaincook4d-31_14": [(41.5, "Measure 1/8 teaspoon of salt and add it to the mug.")],
        # listed in the middle; due when its successor starts (that step's times were inverted by 12 ms)
        "captaincook4d-31_15": [(27.238, "Add 2 tablespoons of flour to the mug.")],
        # nothing that follows them was performed: due at the end of the last performed step
        "captaincook4d-31_16": [
            (75.0, "Microwave the mug on high for 60 seconds."),
            (75.0, "Top with whipped cream if desired."),
        ],
        "captaincook4d-32_7": [],
        # no task graph of this recipe: order from the other recordings (consensus)
        "captaincook4d-32_8": [(13.0, "Heat the milk on low until warm.")],
    }
    kinds = {sid: x.meta["recipe_order"] for sid, x in s.items()}
    assert kinds == {f"captaincook4d-{r}": "task_graph" for r in ("31_14", "31_15", "31_16")} | {
        f"captaincook4d-{r}": "consensus" for r in ("32_7", "32_8")
    }


def test_guidance_never_names_a_step_a_reminder_then_calls_skipped(tmp_path, release, by_id):
    ann, videos = release("captaincook4d", real=False)
    s = by_id(
        build_source(
            "captaincook4d", tmp_path / "out", annotations=ann, videos=videos, check_videos=False
        ).records
    )
    assert _targets(s["captaincook4d-31_14"])[:3] == [
        (19.87, "next_step_guidance", "Next: Add 2 tablespoons of flour to the mug."),
        (40.0, "next_step_guidance", "Next: Measure 1/8 teaspoon of salt and add it to the mug."),
        (41.5, "error_recovery", SKIP + "Measure 1/8 teaspoon of salt and add it to the mug."),
    ]
    for (
        stream
    ) in s.values():  # a reminder due at a later step's start follows guidance naming the skipped step
        guidance = [
            (t.time, t.content[len("Next: ") :]) for t in stream.targets if t.category == "next_step_guidance"
        ]
        last_guidance = max((g[0] for g in guidance), default=0.0)
        for t in stream.targets:
            if t.content.startswith(SKIP) and t.time <= last_guidance:
                before = [g for g in guidance if g[0] <= t.time]
                assert before[-1][1] == t.content[len(SKIP) :], (stream.id, t)


def test_optional_untagged_steps_get_nothing(tmp_path, release, by_id):
    ann, videos = release("captaincook4d", real=False)
    report = build_source(
        "captaincook4d", tmp_path / "out", annotations=ann, videos=videos, check_videos=False
    )
    s = by_id(report.records)
    assert not any("whipped cream" in t.content for t in s["captaincook4d-31_14"].targets)
    assert report.counts["optional_steps_not_performed"] == 1
    assert report.counts["skip_reminders"] == 5


@pytest.mark.parametrize(
    ("description", "text"),
    [
        ("Chop-Chop the onion", "Chop the onion"),  # the rest repeats the verb
        ("Add-1 egg to a blender", "Add 1 egg to a blender"),  # the rest does not
        ("Add-1/6 cup grated parmesan cheese ", "Add 1/6 cup grated parmesan cheese"),
        (
            "add-Measure 1/16 teaspoon of baking soda and add it to the mug",
            "Measure 1/16 teaspoon of baking soda and add it to the mug",
        ),
        ("Microwave -Continue to Microwave for 30 more seconds", "Continue to Microwave for 30 more seconds"),
        ("Cut or tear-Cut or tear 1 slice of bread", "Cut or tear 1 slice of bread"),
        ("Measure and add-1/4 tsp of salt", "Measure and add 1/4 tsp of salt"),
        ("stir-stir the ramekin cup", "Stir the ramekin cup"),
        ("Serve", "Serve"),
    ],
)
def test_step_text_keeps_the_verb_in_both_forms(description, text):
    assert step_text(description) == text


def test_ms_overshoot_clamped_inversion_repaired_duplicate_merged(tmp_path, release, by_id):
    ann, videos = release("captaincook4d")
    report = build_source("captaincook4d", tmp_path / "out", annotations=ann, videos=videos, workers=2)
    s = by_id(report.records)
    assert len(s) == 5 and report.errors == []  # no recording lost to 4 ms past the end or a 12 ms inversion
    err = [t for t in s["captaincook4d-31_14"].targets if t.window]
    assert [(t.time, t.window) for t in err] == [(72.0, (72.0, 120.0))]  # ended at 120.004 s of a 120 s video
    stats = json.loads((tmp_path / "out/stats.json").read_text())["conversion"]
    assert (stats["clamped_targets"], stats["repaired_inversions"], stats["merged_duplicate_steps"]) == (
        1,
        1,
        1,
    )
    microwaves = [t for t in s["captaincook4d-31_15"].targets if "Microwave" in t.content]
    assert len(microwaves) == 1  # the step listed twice (60.5 s and 60.6 s) is one step


def test_list_order_and_no_repository_files(tmp_path, release, by_id):
    ann, videos = release("captaincook4d", real=False)
    s = by_id(
        build_source(
            "captaincook4d",
            tmp_path / "l",
            annotations=ann,
            videos=videos,
            check_videos=False,
            options={"recipe_order": "list"},
        ).records
    )
    salt = [t for t in s["captaincook4d-31_14"].targets if t.content.startswith(SKIP)]
    assert [t.time for t in salt] == [120.0]  # listed last: at the end of the last step (120.004 s, clamped)
    alone = tmp_path / "alone.json"
    shutil.copy(ann, alone)  # no task_graphs/ or metadata/ beside it: consensus order, probed durations
    with pytest.raises(Exception, match="recipe_order=task_graph but no task_graphs folder"):
        build_source(
            "captaincook4d",
            tmp_path / "g",
            annotations=alone,
            videos=videos,
            options={"recipe_order": "task_graph"},
        )
    consensus = by_id(
        build_source(
            "captaincook4d",
            tmp_path / "c",
            annotations=alone,
            videos=videos,
            check_videos=False,
            probe=lambda p, check_end: _info(120.0),
            max_error_rate=1.0,
        ).records
    )
    assert [t.time for t in consensus["captaincook4d-31_14"].targets if t.content.startswith(SKIP)] == [41.5]


def _info(duration: float):
    from data_builders.video import VideoInfo

    return VideoInfo(duration=duration, fps=1.0, n_frames=int(duration), width=16, height=16)
