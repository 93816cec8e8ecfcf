"""holoassist from its release layout: proactive help only, no chit-chat or unintelligible reply,
mistakes from the fine-grained actions, ms inversions repaired, a bad event never costs the video."""

from __future__ import annotations

import json

from data_builders.build import build_source

V1 = "holoassist-R301-2Aug-Light Switch & Plate"
V2 = "holoassist-z044-jun-10-22-nespresso"
V3 = "holoassist-z117-jul-04-22-printer_small"


def _rows(stream):
    return [(t.time, t.window, t.category, t.content) for t in stream.targets]


def test_release_fixture_gives_proactive_help_only(tmp_path, release, by_id):
    ann, videos = release("holoassist")
    report = build_source("holoassist", tmp_path / "out", annotations=ann, videos=videos, workers=2)
    s = by_id(report.records)
    assert sorted(s) == [V1, V2, V3]  # names with spaces and '&', found at the release's default path
    assert (
        s[V1].video
        == "../release/videos/video_pitch_shifted/R301-2Aug-Light Switch & Plate/Export_py/Video_pitchshift.mp4"
    )
    assert _rows(s[V1]) == [
        (4.5, (4.5, 7.25), "next_step_guidance", "First take off the old plate with the screwdriver."),
        # "correct the wrong action", linked to the wrong action 7 (14.0 s): the window opens at the mistake
        (17.4, (14.0, 19.9), "error_recovery", "Not that one, use the cross-head screwdriver."),
        # labelled "follow-up instruction", but wrong action 10 names it as its correction
        (23.1, (21.0, 25.0), "error_recovery", "Turn it the other way, counter-clockwise."),
        # end 37 ms before its start in the annotation: repaired, kept
        (52.5, (52.5, 52.537), "next_step_guidance", "Line up the new plate with the screw holes."),
        (80.0, (80.0, 84.0), "next_step_guidance", "Last, switch the power back on and test it."),
    ]
    assert s[V2].is_negative  # the instructor only greeted and answered questions
    # the last conversation ends 0.6 s after the 60 s video: clamped to the end
    assert _rows(s[V3]) == [
        (5.0, (5.0, 7.0), "next_step_guidance", "Open the paper tray first."),
        (59.4, (59.4, 60.0), "next_step_guidance", "Now press the green button."),
    ]
    c = report.counts
    assert (c["dropped_low_confidence"], c["dropped_unintelligible"], c["repaired_inversions"]) == (1, 1, 1)
    assert (c["conversations_other_purpose"], c["conversations_not_proactive"], c["clamped_targets"]) == (
        7,
        5,
        1,
    )
    assert [(e.record, e.scope) for e in report.errors] == [("R301-2Aug-Light Switch & Plate", "event")]
    assert "ends 4.000 s before it starts (70.0 > 66.0)" in report.errors[0].reason
    assert s[V1].meta["dropped_targets"] == 3 and report.n_failed == 0
    assert json.loads((tmp_path / "out/stats.json").read_text())["conversion"]["dropped_events"] == 1


def test_no_chitchat_nor_unintelligible_reply(tmp_path, release):
    ann, videos = release("holoassist", real=False)
    records = build_source(
        "holoassist", tmp_path / "out", annotations=ann, videos=videos, check_videos=False
    ).records
    replies = {t.content for s in records for t in s.targets}
    events = [
        ev for rec in json.loads(ann.read_text()) for ev in rec["events"] if ev["label"] == "Conversation"
    ]
    for ev in events:
        purpose = ev["attributes"]["Conversation Purpose"]
        text = ev["attributes"]["Transcription"]
        if any(
            k in purpose
            for k in ("remarks", "adjusting", "_other", "confirming", "student-start", "reply-to-student")
        ):
            assert text not in replies, purpose
        if ev["attributes"]["Transcription Confidence"] != "none" or "unintelligible" in text:
            assert text not in replies
    assert len(replies) == 7


def test_choices_are_keys(tmp_path, release, by_id):
    ann, videos = release("holoassist", real=False)

    def v1(**options):
        out = tmp_path / str(len(list(tmp_path.iterdir())))
        records = build_source(
            "holoassist", out, annotations=ann, videos=videos, check_videos=False, options=options
        )
        return by_id(records.records)[V1]

    replies = v1(roles=["instructor-start-conversation", "instructor-reply-to-student"])
    assert (21.5, (21.5, 22.4), "next_step_guidance", "Yes, that screw.") in _rows(replies)
    unlinked = _rows(v1(corrections_from_actions=False))
    assert (17.4, (17.4, 19.9), "error_recovery", "Not that one, use the cross-head screwdriver.") in unlinked
    assert (23.1, (23.1, 25.0), "next_step_guidance", "Turn it the other way, counter-clockwise.") in unlinked
    trusting = _rows(v1(drop_confidence=[]))
    assert (30.0, (30.0, 32.5), "next_step_guidance", "Now pull the plate off gently.") in trusting


def test_stated_duration_and_a_video_whose_only_target_is_lost(tmp_path, release, by_id):
    ann, videos = release("holoassist", real=False)
    data = json.loads(ann.read_text())
    s = by_id(
        build_source("holoassist", tmp_path / "a", annotations=ann, videos=videos, check_videos=False).records
    )
    assert (s[V1].clip_end, s[V2].clip_end) == (90.4, 45.0)  # videoMetadata.duration.raw, no probe
    only = data[2]
    only["events"] = [only["events"][0] | {"start": 9.0, "end": 3.0}]  # inverted by 6 s: dropped
    ann.write_text(json.dumps(data))
    report = build_source(
        "holoassist", tmp_path / "b", annotations=ann, videos=videos, check_videos=False, max_error_rate=1.0
    )
    assert V3 not in by_id(report.records)  # not turned into a negative
    lost = [e for e in report.errors if e.scope == "record"]
    assert [e.record for e in lost] == ["z117-jul-04-22-printer_small"]
    assert "not kept as a negative" in lost[0].reason and len(report.records) == 2
