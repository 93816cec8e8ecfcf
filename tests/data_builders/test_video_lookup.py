"""Videos are found where each release puts them and in layouts of the user's own (one index of the
video root); an ambiguous name is an error listing both files; with stated durations and
check_videos=false no video is opened."""

from __future__ import annotations

import json
import os

import pytest

from data_builders.build import build_source
from data_builders.video_index import AmbiguousVideo, VideoIndex


def test_index_by_stem_and_enclosing_folders(tmp_path):
    for rel in (
        "R301-2Aug-Light Switch & Plate/Export_py/Video_pitchshift.mp4",
        "R301-2Aug-Light Switch & Plate/Export_py/Video_compress.mp4",
        "R301-2Aug-Light Switch & Plate/Export_py/Video/Pose_sync.txt",
        "Arson/Arson011_x264.mp4",
        ".staging-x/Arson011_x264.mp4",  # hidden folders are not indexed
        "flat/z044 jun.MKV",
    ):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).touch()
    os.symlink(tmp_path, tmp_path / "flat" / "loop")  # a link back up is walked once, not forever
    index = VideoIndex(tmp_path)
    assert index.find("Arson011_x264.mp4") == "Arson/Arson011_x264.mp4"
    assert index.find("z044 jun.mp4") == "flat/z044 jun.MKV"
    assert index.find("other.mp4", ["R301-2Aug-Light Switch"]) is None
    with pytest.raises(AmbiguousVideo):  # the %20-quoted name matches the folder (which holds two videos)
        index.find("other.mp4", ["R301-2Aug-Light%20Switch%20&%20Plate"])
    assert (
        index.n_files == 4
    )  # the .txt, the hidden folder and the second walk through the link are not counted
    # a folder holding two videos: narrowed by the pattern's file name
    wanted = "R301-2Aug-Light Switch & Plate/Export_py/Video_pitchshift.mp4"
    assert index.find("x/" + wanted.split("/", 1)[1], ["R301-2Aug-Light Switch & Plate"]) == wanted
    with pytest.raises(AmbiguousVideo, match="matches 2 video files") as err:
        index.find("clip.mp4", ["R301-2Aug-Light Switch & Plate"])
    assert err.value.candidates == [
        "R301-2Aug-Light Switch & Plate/Export_py/Video_compress.mp4",
        "R301-2Aug-Light Switch & Plate/Export_py/Video_pitchshift.mp4",
    ]


def test_users_own_layouts_work_without_a_pattern(tmp_path, mp4, by_id):
    ann = tmp_path / "data-annotation-trainval-v1_1.json"
    records = [
        {
            "video_name": "R9%20Tea%20&%20Cup",
            "videoMetadata": {"duration": {"raw": "00:00:20.00", "seconds": 20}},
            "events": [],
        },
        {
            "video_name": "z1-printer",
            "videoMetadata": {"duration": {"raw": "00:00:20.00", "seconds": 20}},
            "events": [],
        },
    ]
    ann.write_text(json.dumps(records))
    flat = tmp_path / "flat"
    mp4(flat / "R9 Tea & Cup.mp4", 20)  # <root>/<video_name>.mp4, the name %20-decoded
    mp4(flat / "deeper/z1-printer/cam/main.mp4", 20)  # a folder named after the video, any depth
    s = by_id(build_source("holoassist", tmp_path / "out", annotations=ann, videos=flat).records)
    assert s["holoassist-R9%20Tea%20&%20Cup"].video == "../flat/R9 Tea & Cup.mp4"
    assert s["holoassist-z1-printer"].video == "../flat/deeper/z1-printer/cam/main.mp4"


def test_captaincook4d_downloader_tree_and_ambiguous_names(tmp_path, release, by_id):
    ann, videos = release("captaincook4d", real=False)
    top = videos.parents[2]  # the downloader's output folder, above captain_cook_4d/gopro/resolution_360p
    s = by_id(
        build_source("captaincook4d", tmp_path / "a", annotations=ann, videos=top, check_videos=False).records
    )
    assert s["captaincook4d-31_14"].video.endswith("captain_cook_4d/gopro/resolution_360p/31_14_360p.mp4")
    (top / "copies").mkdir()
    (top / "copies/31_14_360p.mp4").touch()
    report = build_source(
        "captaincook4d", tmp_path / "b", annotations=ann, videos=top, check_videos=False, max_error_rate=1.0
    )
    assert len(report.records) == 4
    [err] = report.errors
    assert err.record == "31_14" and err.reason.startswith(
        "ambiguous video: '31_14_360p' matches 2 video files"
    )
    assert "captain_cook_4d/gopro/resolution_360p/31_14_360p.mp4" in err.reason
    assert "copies/31_14_360p.mp4" in err.reason


def test_missing_video_names_what_was_searched(tmp_path, release):
    ann, videos = release("ucf_crime", real=False)
    (videos / "Testing_Normal_Videos_Anomaly/Normal_Videos_004_x264.mp4").unlink()
    report = build_source(
        "ucf_crime",
        tmp_path / "out",
        annotations=ann,
        videos=videos,
        check_videos=False,
        max_error_rate=1.0,
        probe=lambda p, check_end: _info(10.0, 30.0),
    )
    [err] = report.errors
    assert err.reason == (
        f"video file missing: {videos / 'Testing_Normal_Videos_Anomaly/Normal_Videos_004_x264.mp4'} "
        f"(no video named 'Normal_Videos_004_x264' under {videos})"
    )


def test_index_is_built_only_when_a_pattern_path_is_absent(tmp_path, release, monkeypatch):
    ann, videos = release("ucf_crime", real=False)
    import data_builders.build as build

    def refuse(root):
        raise AssertionError("indexed although every pattern path exists")

    monkeypatch.setattr(build, "VideoIndex", refuse)
    report = build_source(
        "ucf_crime",
        tmp_path / "out",
        annotations=ann,
        videos=videos,
        check_videos=False,
        probe=lambda p, check_end: _info(12.0, 30.0),
    )
    assert len(report.records) == 5


def test_stated_durations_and_check_videos_false_open_no_video(tmp_path, release, monkeypatch):
    import av
    import decord

    opened = []
    monkeypatch.setattr(av, "open", lambda *a, **k: opened.append(a) or (_ for _ in ()).throw(OSError("no")))
    monkeypatch.setattr(
        decord, "VideoReader", lambda *a, **k: opened.append(a) or (_ for _ in ()).throw(OSError("no"))
    )
    built = {}
    for source in ("captaincook4d", "holoassist", "ego4d_events"):
        ann, videos = release(source, real=False)  # empty placeholder files: opening one would fail
        report = build_source(source, tmp_path / source, annotations=ann, videos=videos, check_videos=False)
        built[source] = (len(report.records), report.errors == [] or [e.scope for e in report.errors])
    assert opened == []
    assert built == {
        "captaincook4d": (5, True),
        "holoassist": (3, ["event"]),
        "ego4d_events": (10, ["skipped"]),
    }


def _info(duration: float, fps: float):
    from data_builders.video import VideoInfo

    return VideoInfo(duration=duration, fps=fps, n_frames=int(duration * fps), width=16, height=16)


def test_index_bench_walks_every_file_of_its_tree():
    """The bench's figure is a speed (``python -m perf builders`` prints it); here only what it
    measures: a tree of n files, 9 in 10 of them videos, all indexed (checked inside)."""
    from perf.builders import index_files_per_second

    assert index_files_per_second(2_000, repeats=1) > 0
