"""egoserve, propermem and toy from files in their (real or our) formats (captaincook4d and holoassist:
test_captaincook4d.py, test_holoassist.py)."""

from __future__ import annotations

import json

from data_builders.build import build_source


def test_egoserve_three_parts(tmp_path, mp4, build, by_id):
    release, videos = tmp_path / "EgoServe_release", tmp_path / "videos"
    (release / "EgoLife/A1_JAKE").mkdir(parents=True)
    (release / "EgoLife/A1_JAKE/instant.json").write_text(
        json.dumps(
            [
                {
                    "sub_type": "safety",
                    "current_time_window": "DAY1 11:09:42-11:10:00",
                    "proactive_dialogue": [
                        {"role": "assistant", "utterance": "Careful, the knife is sharp."},
                        {"role": "user", "utterance": "Thanks."},
                    ],
                }
            ]
        )
    )
    (release / "EgoLife/A1_JAKE/long_term.json").write_text(
        json.dumps(
            [
                {
                    "sub_type": "habit_coaching",
                    "current_time_window": "DAY1 - 11:09:31-11:09:35",
                    "dialogue": [{"role": "assistant", "utterance": "Less phone at meals?"}],
                }
            ]
        )
    )
    mp4(videos / "EgoLife/A1_JAKE/DAY1/DAY1_A1_JAKE_11093000.mp4", 30)
    (release / "EgoLife/A4_LUCIA").mkdir()
    (release / "EgoLife/A4_LUCIA/episodic.json").write_text(
        json.dumps(
            [
                {
                    "sub_type": "memory_recall",
                    "current_time_window": "DAY2 09:00:05-09:00:07",
                    "dialogue": [{"role": "assistant", "utterance": "Your keys are on the shelf."}],
                }
            ]
        )
    )
    mp4(videos / "EgoLife/A4_LUCIA/DAY2/DAY2_A4_LUCIA_09000050.mp4", 30)
    (release / "HoloAssist").mkdir()
    (release / "HoloAssist/holoassist_service_annotations.json").write_text(
        json.dumps(
            {
                "z117-aug-05-22-printer_big": {
                    "instant": {
                        "safety": [
                            {
                                "time_window": "00:00:19.503-00:00:21.433",
                                "dialogue": [{"role": "assistant", "utterance": "Mind the hot part."}],
                                "observation": "o",
                            }
                        ],
                        "tool_use": [],
                    },
                    "short_term": {
                        "next_step_guidance": [
                            {
                                "time_window": "3.5-4.0",
                                "dialogue": [{"role": "assistant", "utterance": "Open it."}],
                            }
                        ],
                        "error_recovery": [],
                        "resource_reminder": [],
                    },
                }
            }
        )
    )
    mp4(videos / "HoloAssist/z117-aug-05-22-printer_big/Export_py/Video_pitchshift.mp4", 30)
    (release / "CaptainCook4D").mkdir()
    (release / "CaptainCook4D/captaincook4d_service_annotations.json").write_text(
        json.dumps(
            [
                {
                    "recording_id": "1_7",
                    "dialogue": {
                        "items": [
                            {
                                "step_id": 3,
                                "start_time": 12.5,
                                "end_time": 40.0,
                                "service_type": {
                                    "main": "Short-Term Proactive Service",
                                    "sub": "Next-Step Guidance",
                                },
                                "dialogue": [{"role": "assistant", "utterance": "Now whisk."}],
                                "error_tag": "Order Error",
                            },
                            {
                                "step_id": 4,
                                "start_time": -1.0,
                                "end_time": -1.0,
                                "service_type": {"main": "Instant Proactive Service", "sub": "Tool Use"},
                                "dialogue": [{"role": "assistant", "utterance": "x"}],
                            },
                        ]
                    },
                }
            ]
        )
    )
    mp4(videos / "CaptainCook4D/1_7_360p.mp4", 45)
    s = by_id(build(tmp_path, "egoserve", release, videos).records)
    ego = s["egoserve-egolife-DAY1_A1_JAKE_11093000"]
    chunk_start = 86400 + 11 * 3600 + 9 * 60 + 30  # 126570
    assert (ego.clip_start, ego.clip_end, ego.video_offset) == (chunk_start, chunk_start + 30, chunk_start)
    assert [(t.time, t.window, t.category) for t in ego.targets] == [
        (126573.0, (126571.0, 126575.0), "habit_coaching"),
        (126591.0, (126582.0, 126600.0), "safety"),
    ]
    assert ego.meta["unit"] == "A1_JAKE" and ego.meta["dataset"] == "egolife" and ego.task == "egoserve"
    lucia = s["egoserve-egolife-DAY2_A4_LUCIA_09000050"]  # chunk starts at 09:00:00.50 of day 2
    assert (lucia.meta["unit"], lucia.video_offset) == ("A4_LUCIA", 2 * 86400 + 9 * 3600 + 0.5)
    assert [(t.time, t.category) for t in lucia.targets] == [(2 * 86400 + 9 * 3600 + 6.0, "memory_recall")]
    holo = s["egoserve-holoassist-z117-aug-05-22-printer_big"]
    assert [(t.window, t.category, t.content) for t in holo.targets] == [
        ((3.5, 4.0), "next_step_guidance", "Open it."),
        ((19.503, 21.433), "safety", "Mind the hot part."),
    ]
    cook = s["egoserve-captaincook4d-1_7"]
    assert [(t.time, t.window, t.category) for t in cook.targets] == [
        (26.25, (12.5, 40.0), "next_step_guidance")
    ]
    assert cook.meta == {
        "dataset": "captaincook4d",
        "unit": "1_7",
        "skipped_absent": 1,
        "video_id": "captaincook4d/1_7",
    }


def test_propermem_positive_and_memory_removed_negative(tmp_path, mp4, build, by_id):
    videos = tmp_path / "videos"
    mp4(videos / "pm_0001.mp4", 60)
    ann = tmp_path / "clips.jsonl"
    rows = [
        {
            "id": "pm_0001",
            "video": "pm_0001.mp4",
            "clip_start": 0.0,
            "clip_end": 60.0,
            "history": [
                {"id": "m1", "time": -31_000_000.0, "text": "Bought a new mug."},
                {"id": "m2", "time": -86_400.0, "text": "The coffee maker overflowed with a dirty mug."},
                {"id": "m3", "time": -3_600.0, "text": "Watched TV."},
            ],
            "trigger": {"window": [30.0, 42.0], "response": "Rinse the mug first.", "evidence": ["m2"]},
        },
        {
            "id": "pm_0002",
            "video": "pm_0001.mp4",
            "clip_start": 0.0,
            "clip_end": 60.0,
            "history": [{"id": "m1", "time": -10.0, "text": "Walked in."}],
            "trigger": None,
        },
    ]
    ann.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    s = by_id(build(tmp_path, "propermem", ann, videos).records)
    assert sorted(s) == ["propermem-pm_0001", "propermem-pm_0001-neg", "propermem-pm_0002"]
    pos, neg = s["propermem-pm_0001"], s["propermem-pm_0001-neg"]
    assert [(t.time, t.window, t.content) for t in pos.targets] == [
        (30.0, (30.0, 42.0), "Rinse the mug first.")
    ]
    assert [h.text for h in pos.history][1] == "The coffee maker overflowed with a dirty mug."
    assert neg.is_negative and [h.time for h in neg.history] == [-31_000_000.0, -3_600.0]
    assert s["propermem-pm_0002"].is_negative and pos.task == "propermem"


def test_toy_source_registers_and_builds(tmp_path):
    report = build_source("toy", tmp_path / "toy", options={"n": 4, "seed": 0}, workers=2)
    assert [s.id for s in report.records] == [f"toy-0-{i:05d}" for i in range(4)]
    assert all((tmp_path / "toy" / s.video).is_file() for s in report.records)
    assert report.records[0].video == "videos/toy_00000.mp4" and report.errors == []
