"""nexar, ucf_crime and object_tracks: exact Warning times, windows and negatives from real-format files."""

from __future__ import annotations

import json

from data_builders.build import build_source
from data_builders.record_io import load_streams


def test_nexar_alert_window_and_negative(tmp_path, mp4, build, by_id):
    videos = tmp_path / "videos"
    for name in ("00822", "01924", "00007"):
        mp4(videos / f"{name}.mp4", 25)
    csv = tmp_path / "train.csv"
    csv.write_text("id,time_of_event,time_of_alert,target\n822,19.5,18.633,1\n1924,,,0\n7,20.101,20.068,1\n")
    report = build(tmp_path, "nexar", csv, videos)
    s = by_id(report.records)
    assert sorted(s) == ["nexar-00007", "nexar-00822", "nexar-01924"]
    t = s["nexar-00822"].targets
    assert [(x.time, x.window, x.label) for x in t] == [(18.633, (18.633, 19.5), "Warning")]
    assert s["nexar-00007"].targets[0].window == (20.068, 20.101)
    assert s["nexar-01924"].targets == [] and s["nexar-01924"].clip_end == 25.0
    assert s["nexar-00822"].video == "../videos/00822.mp4"
    assert report.errors == []
    assert len(load_streams(tmp_path / "out")) == 3  # the parquet shards load back


def test_nexar_hf_layout_and_contradicting_flag(tmp_path, mp4, build, by_id):
    videos = tmp_path / "videos"
    mp4(videos / "a.mp4", 25)
    mp4(videos / "b.mp4", 25)
    csv = tmp_path / "metadata.csv"
    csv.write_text(
        "file_name,time_of_event,time_of_alert,light_conditions,weather,scene,target\n"
        "a.mp4,19.8,19.233,Normal,Cloudy,Sub-urban,1\nb.mp4,,,Normal,Clear,Urban,1\n"
    )
    report = build(tmp_path, "nexar", csv, videos, max_error_rate=1.0)
    assert [s.id for s in report.records] == ["nexar-a"]
    assert report.records[0].meta["scene"] == "Sub-urban"
    assert report.records[0].targets[0].time == 19.233
    assert [(e.record, "contradicts" in e.reason) for e in report.errors] == [("b", True)]


def test_ucf_crime_frames_at_30fps_two_segments_normal(tmp_path, mp4, build, by_id):
    videos = tmp_path / "videos"  # a flat folder, not the release's: found by the video index
    for name in ("Abuse028_x264", "Arrest001_x264", "Normal_Videos_003_x264"):
        mp4(videos / f"{name}.mp4", 20, fps=30)
    ann = tmp_path / "Temporal_Anomaly_Annotation_for_Testing_Videos.txt"
    ann.write_text(
        "Abuse028_x264.mp4  Abuse  165  240  -1  -1\n"
        "Arrest001_x264.mp4  Arrest  30  90  300  450\n"
        "Normal_Videos_003_x264.mp4  Normal  -1  -1  -1  -1\n"
    )
    s = by_id(build(tmp_path, "ucf_crime", ann, videos).records)
    abuse = s["ucf_crime-Abuse028_x264"].targets
    assert [(t.time, t.window, t.label) for t in abuse] == [(5.5, (5.5, 8.0), "Warning")]
    assert [(t.time, t.window) for t in s["ucf_crime-Arrest001_x264"].targets] == [
        (1.0, (1.0, 3.0)),
        (10.0, (10.0, 15.0)),
    ]
    assert s["ucf_crime-Normal_Videos_003_x264"].is_negative
    first = build(tmp_path, "ucf_crime", ann, videos, segments="first").records
    assert [len(x.targets) for x in first] == [1, 1, 0]


def test_ucf_crime_release_layout_normals_and_a_25fps_video(tmp_path, release, by_id, caplog):
    ann, videos = release("ucf_crime")
    assert (
        ann.read_text().splitlines()[0] == "Arson011_x264.mp4  Arson  60  150  -1  -1  "
    )  # two-space columns
    lines = [x for x in ann.read_text().splitlines() if x.strip()]
    with caplog.at_level("WARNING", logger="data_builders"):
        report = build_source("ucf_crime", tmp_path / "out", annotations=ann, videos=videos, workers=2)
    s = by_id(report.records)
    assert len(s) == len(lines) == 5 and report.errors == []  # every line converted
    normals = [x for x in s.values() if x.meta["event_class"] == "Normal"]
    assert [(x.id, x.is_negative) for x in normals] == [
        ("ucf_crime-Normal_Videos_004_x264", True),
        ("ucf_crime-Normal_Videos_017_x264", True),
    ]
    assert all(x.video.startswith("../release/videos/Testing_Normal_Videos_Anomaly/") for x in normals)
    assert s["ucf_crime-Arson011_x264"].video == "../release/videos/Arson/Arson011_x264.mp4"
    road = s["ucf_crime-RoadAccidents017_x264"]  # frames 50-125 of a 25 fps video: 2.0-5.0 s
    assert (road.meta["fps"], [(t.time, t.window) for t in road.targets]) == (25.0, [(2.0, (2.0, 5.0))])
    assert report.counts["fps_differs_from_frame_rate"] == 1
    assert "RoadAccidents017_x264.mp4: probed 25.000 fps, not 30" in caplog.text
    fixed = by_id(
        build_source(
            "ucf_crime", tmp_path / "fixed", annotations=ann, videos=videos, options={"use_probed_fps": False}
        ).records
    )
    assert [round(t.time, 3) for t in fixed["ucf_crime-RoadAccidents017_x264"].targets] == [1.667]


def test_object_tracks_each_disappearance_is_a_target(tmp_path, mp4, build, by_id):
    videos = tmp_path / "videos"
    mp4(videos / "desk.mp4", 4)
    tracks = tmp_path / "tracks.jsonl"
    rows = [
        {
            "id": "mug",
            "video": "desk.mp4",
            "object": "the red mug",
            "fps": 2,
            "visible": [True, True, False, False, True, False, True, True],
        },
        {
            "id": "pen",
            "video": "desk.mp4",
            "object": "the pen",
            "fps": 2,
            "boxes": [None, [1, 1, 5, 5], [1, 1, 5, 5], [], [2, 2, 6, 6], None, None, None],
        },
        {
            "id": "book",
            "video": "desk.mp4",
            "object": "the book",
            "fps": 2,
            "mask_areas": [5, 9, 9, 9, 9, 9, 9, 9],
        },
    ]
    tracks.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    s = by_id(build(tmp_path, "object_tracks", tracks, videos).records)
    mug = s["object_tracks-mug"]
    assert [(t.time, t.label) for t in mug.targets] == [(1.0, "Warning"), (2.5, "Warning")]
    assert mug.targets[0].content == "Warning: the red mug has disappeared."
    assert mug.clip_end == 4.0
    assert [t.time for t in s["object_tracks-pen"].targets] == [
        1.5,
        2.5,
    ]  # absent at frame 0 is no disappearance
    assert s["object_tracks-book"].is_negative
    debounced = by_id(build(tmp_path, "object_tracks", tracks, videos, min_absent_frames=2).records)
    assert [t.time for t in debounced["object_tracks-mug"].targets] == [1.0]
    assert [t.time for t in debounced["object_tracks-pen"].targets] == [2.5]
