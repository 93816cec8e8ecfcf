"""shot2story, magqa, llava_video and ego4d_events from files in their real formats."""

from __future__ import annotations

import hashlib
import json

import pytest

from data_builders.build import BuildFailed, build_source


def _shot2story_record(clip: str, shots: list[tuple[int, int]], **extra) -> dict:
    return {
        "video": f"{clip}.mp4",
        "image_id": f"{clip}.mp4",
        "id": 0,
        "whole_caption": "summary",
        "whole_ASR": "asr",
        "nvid": f"{clip}.mp4",
        "video_names": [f"{clip}_{a}_{b}.mp4" for a, b in shots],
        "audio_captions": ["n"] * len(shots),
        "ASR": ["a"] * len(shots),
        "captions": [f"Shot {k} shows a dog. It runs." for k in range(len(shots))],
        **extra,
    }


def test_shot2story_shot_starts_from_frame_names_and_probed_fps(tmp_path, mp4, build, by_id):
    videos = tmp_path / "videos"
    mp4(videos / "LEwayCpIk20.78.mp4", 8, fps=25)
    mp4(videos / "R2-Usq--J3U.2.mp4", 8, fps=25)
    ann = tmp_path / "20k_train.json"
    ann.write_text(
        json.dumps(
            [
                _shot2story_record("LEwayCpIk20.78", [(0, 49), (50, 124), (125, 199)]),
                _shot2story_record(
                    "R2-Usq--J3U.2", [(0, 29), (30, 79)], fps=10
                ),  # own fps key: 30 / 10 = 3.0 s
            ]
        )
    )
    s = by_id(build(tmp_path, "shot2story", ann, videos).records)
    narration = s["shot2story-LEwayCpIk20.78-narration"]
    assert [t.time for t in narration.targets] == [0.0, 2.0, 5.0]  # frames 0, 50, 125 at 25 fps
    assert narration.targets[1].content == "Shot 1 shows a dog. It runs."
    assert narration.task == "proactive_narration" and narration.clip_end == 8.0
    query = s["shot2story-LEwayCpIk20.78-query"]
    k = 1 + int(hashlib.sha1(b"0:LEwayCpIk20.78").hexdigest(), 16) % 2
    assert query.instruction == f"Tell me when this happens: Shot {k} shows a dog."
    assert [t.time for t in query.targets] == [[2.0, 5.0][k - 1]]
    assert [t.time for t in s["shot2story-R2-Usq--J3U.2-narration"].targets] == [0.0, 3.0]
    assert s["shot2story-R2-Usq--J3U.2-query"].targets[0].time == 3.0
    assert narration.meta["video_id"] == "shot2story/LEwayCpIk20.78"


def test_shot2story_bad_shot_names_are_errors(tmp_path, mp4, build):
    videos = tmp_path / "videos"
    mp4(videos / "c1.mp4", 8, fps=25)
    ann = tmp_path / "a.json"
    bad = _shot2story_record("c1", [(0, 49), (50, 124)], fps=25)
    bad["video_names"][1] = "other_50_124.mp4"
    empty = _shot2story_record("c1", [(0, 49), (50, 124)], fps=25)
    empty["captions"][1] = ""
    ann.write_text(json.dumps([bad, _shot2story_record("c1", [(60, 10)], fps=25), empty]))
    with pytest.raises(BuildFailed, match="no record was built"):
        build(tmp_path, "shot2story", ann, videos, max_error_rate=1.0)
    rows = (tmp_path / "out/failed_build/errors.jsonl").read_text().splitlines()
    reasons = [json.loads(r)["reason"] for r in rows]
    assert "is not c1_<start>_<end>.mp4" in reasons[0] and "ends before it starts" in reasons[1]
    assert reasons[2] == "shot(s) [1] have an empty caption"


def test_magqa_reply_times_and_spans(tmp_path, mp4, build):
    videos = tmp_path / "videos"
    mp4(videos / "clipA.mp4", 12)
    ann = tmp_path / "magqa.json"
    ann.write_text(
        json.dumps(
            [
                {
                    "video_uid": "clipA",
                    "conversation": [
                        {"role": "user", "content": "What does the man hold?", "time": 1.0},
                        {
                            "role": "assistant",
                            "content": "A red cup.",
                            "time": 4.0,
                            "timespan": [2.0, 3.5],
                            "learn": True,
                        },
                        {
                            "role": "assistant",
                            "content": "Now a plate.",
                            "time": 7.0,
                            "timespan": [6.0, 6.5],
                            "learn": True,
                        },
                        {"role": "user", "content": "Where is he?", "time": 8.0},
                        {
                            "role": "assistant",
                            "content": "In a kitchen.",
                            "time": 9.5,
                            "timespan": [8.0, 9.0],
                            "learn": True,
                        },
                    ],
                }
            ]
        )
    )
    streams = build(tmp_path, "magqa", ann, videos).records
    assert [s.id for s in streams] == ["magqa-clipA-0-q0", "magqa-clipA-0-q1"]
    q0, q1 = streams
    assert (q0.instruction, q0.instruction_time, q0.task) == ("What does the man hold?", 1.0, "timed_qa")
    assert [(t.time, t.window, t.content) for t in q0.targets] == [
        (4.0, (2.0, 3.5), "A red cup."),
        (7.0, (6.0, 6.5), "Now a plate."),
    ]
    assert [(t.time, t.window) for t in q1.targets] == [(9.5, (8.0, 9.0))]
    assert q0.clip_end == 12.0 and q0.meta["video_id"] == "shot2story/clipA"


def test_llava_video_answer_at_last_step(tmp_path, mp4, build, by_id):
    videos = tmp_path / "videos"
    mp4(videos / "NextQA/NExTVideo/1006/8968804598.mp4", 12.5, fps=2)
    ann = tmp_path / "0_30_s_nextqa"
    ann.mkdir()
    (ann / "0_30_s_nextqa_mc_v0_1_qa_processed.json").write_text(
        json.dumps(
            [
                {
                    "id": "1006-8968804598",
                    "data_source": "0_30_s_nextqa",
                    "video": "NextQA/NExTVideo/1006/8968804598.mp4",
                    "conversations": [
                        {"from": "human", "value": "<image>\nWhy?\nOptions:\nA. x\nE. training."},
                        {"from": "gpt", "value": "E. training."},
                        {"from": "human", "value": "What next?"},
                        {"from": "gpt", "value": "He leaves."},
                    ],
                }
            ]
        )
    )
    s = by_id(build(tmp_path, "llava_video", ann, videos).records)
    first = s["llava_video-0_30_s_nextqa_mc_v0_1_qa_processed-0-0"]
    assert first.instruction == "Why?\nOptions:\nA. x\nE. training."
    assert first.instruction_time == 0.0 and first.clip_end == 12.5
    assert [(t.time, t.content) for t in first.targets] == [
        (11.0, "E. training.")
    ]  # last 1 fps step of 12.5 s
    assert s["llava_video-0_30_s_nextqa_mc_v0_1_qa_processed-0-1"].targets[0].time == 11.0
    assert (first.meta["subset"], first.meta["record_id"]) == ("multi_choice", "1006-8968804598")


def _ego4d_narration(pairs: list[tuple[float, str]]) -> dict:
    return {
        "narrations": [
            {"timestamp_sec": t, "timestamp_frame": round(t * 30), "narration_text": x, "annotation_uid": "a"}
            for t, x in pairs
        ],
        "summaries": [],
    }


def test_ego4d_events_single_category_and_negative_queries(tmp_path, mp4, build, by_id):
    videos = tmp_path / "videos"
    mp4(videos / "u1.mp4", 20)
    mp4(videos / "u2.mp4", 15)
    ann = tmp_path / "narration.json"
    ann.write_text(
        json.dumps(
            {
                "u1": {
                    "status": "complete",
                    "narration_pass_1": _ego4d_narration(
                        [
                            (2.4, "#C C holds a cup"),
                            (5.0, "#C C holds a cup."),
                            (7.0, "#C C holds a knife"),
                            (9.0, "#C C opens the door"),
                            (12.0, "#unsure"),
                        ]
                    ),
                    "narration_pass_2": _ego4d_narration([(3.0, "#C C washes a plate")]),
                },
                "u2": {"narration_pass_2": _ego4d_narration([(1.0, "#C C cuts an onion")])},
            }
        )
    )
    s = by_id(build(tmp_path, "ego4d_events", ann, videos, queries_per_clip=10, negatives_per_clip=5).records)
    assert sorted(s) == [
        "ego4d-u1-w000-c0",
        "ego4d-u1-w000-e0",
        "ego4d-u1-w000-e1",
        "ego4d-u1-w000-e2",
        "ego4d-u1-w000-n0",
        "ego4d-u2-w000-e0",
        "ego4d-u2-w000-n0",
        "ego4d-u2-w000-n1",
        "ego4d-u2-w000-n2",
    ]
    cup = s["ego4d-u1-w000-e0"]
    assert cup.instruction == "Tell me when the camera wearer holds a cup."
    assert [t.time for t in cup.targets] == [2.4, 5.0] and cup.meta["pass"] == "narration_pass_1"
    assert [t.time for t in s["ego4d-u1-w000-e2"].targets] == [9.0]
    category = s["ego4d-u1-w000-c0"]
    assert category.instruction == "Tell me each time the camera wearer holds something."
    assert [t.time for t in category.targets] == [2.4, 5.0, 7.0]
    neg = s["ego4d-u1-w000-n0"]  # washes a plate is only in the unused pass 2: not in the pool
    assert neg.instruction == "Tell me when the camera wearer cuts an onion." and neg.is_negative
    assert [x.instruction for x in (s[f"ego4d-u2-w000-n{k}"] for k in range(3))] == [
        "Tell me when the camera wearer holds a cup.",
        "Tell me when the camera wearer holds a knife.",
        "Tell me when the camera wearer opens the door.",
    ]
    assert s["ego4d-u2-w000-e0"].meta["pass"] == "narration_pass_2" and cup.clip_end == 20.0
    windows = build(tmp_path, "ego4d_events", ann, videos, clip_length=8.0, min_clip=5.0).records
    u1 = sorted({(x.clip_start, x.clip_end) for x in windows if x.id.startswith("ego4d-u1")})
    assert u1 == [(0.0, 8.0), (8.0, 16.0)]  # the last 4 s piece is shorter than min_clip


def test_shot2story_release_fixture(tmp_path, release, by_id):
    ann, videos = release("shot2story")
    rec = json.loads(ann.read_text())[0]
    assert list(rec) == [
        "video",
        "image_id",
        "id",
        "whole_caption",
        "whole_ASR",
        "nvid",
        "video_names",
        "audio_captions",
        "captions",
        "ASR",
    ]  # the release's fields
    s = by_id(build_source("shot2story", tmp_path / "out", annotations=ann, videos=videos).records)
    assert [t.time for t in s["shot2story-Qm3-xT_9kLp.3-narration"].targets] == [
        0.0,
        2.0,
        5.0,
    ]  # 25 fps probed
    assert [t.time for t in s["shot2story-bN7_rr2-Wq0.11-narration"].targets] == [0.0, 3.0]
    assert len(s) == 4


def test_magqa_train_and_test_files(tmp_path, release, by_id):
    ann, videos = release("magqa")
    report = build_source("magqa", tmp_path / "train", annotations=ann, videos=videos)
    s = by_id(report.records)
    q = s["magqa-Qm3-xT_9kLp.3-0-q0"]  # video_uid holds ".mp4": the default pattern adds nothing
    assert q.video == "../release/videos/Qm3-xT_9kLp.3.mp4" and (q.clip_start, q.instruction_time) == (
        0.5,
        1.0,
    )
    # the second reply is due 0.6 s after the 8 s clip ends: clamped, counted
    assert [(t.time, t.window) for t in q.targets] == [(3.5, (2.0, 4.96)), (8.0, (5.0, 8.0))]
    assert report.counts["clamped_targets"] == 1
    early = s["magqa-bN7_rr2-Wq0.11-1-q0"]  # question at 1.5 s, video_start_time 2.0: the clip starts earlier
    assert (early.clip_start, early.instruction_time, early.meta["video_start_time"]) == (0.0, 1.5, 2.0)
    test = build_source("magqa", tmp_path / "test", annotations=ann.parent / "magqa_test.json", videos=videos)
    [t] = test.records
    assert (t.id, t.instruction, t.instruction_time) == (
        "magqa-bN7_rr2-Wq0.11.mp4-q0",
        "What does the man drink from?",
        0.5,
    )
    assert [(x.time, x.window, x.content) for x in t.targets] == [(5.5, (3.0, 5.5), "From a water bottle.")]


def test_llava_video_release_fixture_ids_and_subset_folders(tmp_path, release, by_id):
    ann, videos = release("llava_video")
    report = build_source("llava_video", tmp_path / "a", annotations=ann, videos=videos)
    s = by_id(report.records)
    assert len(s) == 5  # two open-ended records share id K2L7Q: their streams do not collide
    oe = [x for x in s.values() if x.meta["subset"] == "open_ended"]
    assert sorted(x.id for x in oe) == [
        "llava_video-0_30_s_academic_oe_v0_1_qa_processed-0-0",
        "llava_video-0_30_s_academic_oe_v0_1_qa_processed-0-1",
        "llava_video-0_30_s_academic_oe_v0_1_qa_processed-1-0",
    ]
    assert {x.meta["record_id"] for x in oe} == {"K2L7Q"}
    # videos= the root holding every subset's unpacked folder: the index finds <root>/<subset>/<video>
    root = build_source("llava_video", tmp_path / "b", annotations=ann, videos=videos.parent)
    assert (
        sorted(x.video for x in root.records)[0]
        == "../release/videos/0_30_s_academic_v0_1/academic_source/Charades/K2L7Q.mp4"
    )


def test_ego4d_release_fixture_redacted_metadata_and_wearer_mid_sentence(tmp_path, release, by_id):
    ann, videos = release("ego4d_events")
    probed = []
    report = build_source(
        "ego4d_events",
        tmp_path / "out",
        annotations=ann,
        videos=videos,
        check_videos=False,
        probe=lambda p, check_end: probed.append(p),
    )
    assert probed == []  # ego4d.json beside the annotations states every duration
    s = by_id(report.records)
    assert [(e.scope, e.reason) for e in report.errors] == [("skipped", "redacted video without narrations")]
    assert report.counts["skipped_records"] == 1 and report.n_failed == 0
    events = {x.meta.get("event") for x in s.values()}
    assert "woman x hands the camera wearer a plate" in events
    u1 = sorted({(x.clip_start, x.clip_end) for x in s.values() if "6f1c0b2a" in x.id})
    assert u1 == [(0.0, 60.0), (60.0, 80.0)]


def test_egoserve_release_fixture(tmp_path, release, by_id):
    ann, videos = release("egoserve")
    report = build_source("egoserve", tmp_path / "out", annotations=ann, videos=videos)
    s = by_id(report.records)
    ego = s["egoserve-egolife-DAY1_A1_JAKE_11093000"]
    assert [(t.category, t.window) for t in ego.targets] == [
        ("safety", (126582.0, 126590.0)),
        ("tool_use", (126591.0, 126595.0)),  # named time_window / dialogue, as the tool-use schema does
        ("next_step_guidance", (126597.7, 126598.0)),  # inverted by 0.3 s: repaired
    ]
    holo = s["egoserve-holoassist-R301-2Aug-Light Switch & Plate"]
    assert holo.video.endswith("HoloAssist/R301-2Aug-Light Switch & Plate/Export_py/Video_pitchshift.mp4")
    assert [(t.window, t.category) for t in holo.targets] == [
        ((5.2, 7.9), "safety"),
        ((17.4, 19.9), "error_recovery"),
        ((80.0, 84.0), "next_step_guidance"),
    ]
    cook = s["egoserve-captaincook4d-31_14"]
    assert [(t.window, t.category) for t in cook.targets] == [
        ((72.0, 120.0), "error_recovery")
    ]  # 4 ms clamped
    assert cook.meta["skipped_absent"] == 1
    assert sorted((e.record, e.scope) for e in report.errors) == [
        ("A1_JAKE/episodic[0]", "event"),  # personal_progressive: not an EgoServe subtype
        ("A1_JAKE/short_term[1]", "skipped"),  # empty first assistant turn: no event for the benchmark
    ]
    c = report.counts
    assert (c["repaired_inversions"], c["clamped_targets"], c["dropped_events"], c["skipped_records"]) == (
        1,
        1,
        1,
        1,
    )
