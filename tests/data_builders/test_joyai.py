"""source=joyai: JoyAI-VL-Interaction's release (our own values in its layout and fields,
fixtures/joyai/: ``<subset>/<subset>.json`` for background, chat, event_grounding and narration) ->
one stream per item through ``python -m data_builders build`` itself, every question kept (the first
as the instruction, the later ones as later user turns at their times); a bad item is one error
naming the file, the item and the reason."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from data_builders.build import BuildFailed, build_source
from data_builders.record_io import load_streams, resolve_video
from data_builders.sources.joyai import SUBSET_TASKS

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = Path(__file__).parent / "fixtures" / "joyai"


def fixture_questions() -> dict[tuple[str, int], list[tuple[float, str]]]:
    """Every question of the fixture, one per time (``"5,6"`` is two), read from the files as they are."""
    out = {}
    for path in sorted(FIXTURE.glob("*/*.json")):
        for k, item in enumerate(json.loads(path.read_text())):
            out[(path.parent.name, k)] = sorted(
                (float(t), q["content"]) for q in item.get("question") or [] for t in q["time"].split(",")
            )
    return out


def cli_build(ann: Path, videos: Path, out: Path, *keys: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    cmd = [sys.executable, "-m", "data_builders", "build", "source=joyai", f"annotations={ann}"]
    cmd += [f"videos={videos}", f"out={out}", *keys]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)


def test_the_build_command_keeps_every_question_of_every_subset(release, tmp_path):
    ann, videos = release("joyai")
    proc = cli_build(ann, videos, tmp_path / "out")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1])["records"] == 7
    streams = {s.id: s for s in load_streams(tmp_path / "out" / "records.jsonl")}
    asked = fixture_questions()
    assert len(streams) == len(asked) == 7
    for s in streams.values():
        given = [(s.instruction_time, s.instruction)] if s.instruction else []
        given += [(u["time"], u["content"]) for u in s.meta["user_turns"]]
        assert given == asked[(s.meta["subset"], s.meta["index"])], s.id
        assert [(q["time"], q["text"]) for q in s.meta["questions"]] == given
    assert sum(len(q) for q in asked.values()) == 10
    room = streams["joyai-chat-0"]
    assert (room.task, room.clip_start, room.clip_end) == ("timed_qa", 0.0, 24.0)  # the probed video
    assert (room.instruction, room.instruction_time) == ("What is on the coffee table?", 1.0)
    assert room.meta["user_turns"] == [
        {"time": 9.0, "content": "Which plant did I just walk past?"},
        {"time": 17.0, "content": "Is the window open now?"},
    ]
    assert [t.time for t in room.targets] == [2.0, 10.0, 18.0]
    assert (
        resolve_video(room, tmp_path / "out").resolve()
        == (videos / "home_tours/living_room_0003.mp4").resolve()
    )
    assert {s.meta["subset"]: s.task for s in streams.values()} == SUBSET_TASKS
    bus = streams["joyai-event_grounding-0"]
    assert [(t.time, t.content) for t in bus.targets] == [(4.0, "A bus goes by."), (10.0, "A bus goes by.")]
    assert streams["joyai-event_grounding-1"].is_negative  # the pot never boils over
    unprompted = streams["joyai-narration-1"]  # no question; the responses in nested lists
    assert (unprompted.instruction, [t.time for t in unprompted.targets]) == ("", [3.0, 9.0])
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert stats["conversion"]["later_questions"] == 4 and stats["targets"] == 14
    assert (tmp_path / "out" / "errors.jsonl").read_text() == ""


def write_chat(root: Path, items: list) -> Path:
    (root / "chat").mkdir(parents=True, exist_ok=True)
    (root / "chat" / "chat.json").write_text(json.dumps(items))
    return root


def chat_item(name: str = "desk_0042.mp4", **fields) -> dict:
    item = {
        "video_name": name,
        "video_path": f"/path/to/videos/{name}",
        "task_type": "chat",
        "source": "desk_vlogs",
        "question": [{"content": "What is on the desk?", "time": "1"}],
        "response": [{"content": "A laptop.", "time": "3"}],
    }
    return {**item, **fields}


def test_each_bad_item_is_one_error_naming_the_file_the_item_and_the_reason(release, tmp_path):
    _, videos = release("joyai")
    root = write_chat(
        tmp_path / "ann",
        [
            chat_item(),
            ["not", "an", "item"],
            chat_item(name=None),
            chat_item(question=[{"content": "When?", "time": "soon"}]),
            chat_item(question=[{"content": "Too late?", "time": "40"}]),  # the video lasts 16 s
            chat_item(question=[{"content": "Before?", "time": "-1"}]),
            chat_item(question=[{"content": "Just after the end?", "time": "16.5"}]),  # moved to 16 s
            chat_item(response=[{"content": "A laptop.", "time": "3"}, {"content": "No time."}]),
        ],
    )
    report = build_source("joyai", tmp_path / "out", annotations=root, videos=videos, max_error_rate=1.0)
    errors = [json.loads(line) for line in (tmp_path / "out" / "errors.jsonl").read_text().splitlines()]
    got = {(e["record"], e["scope"]): e["reason"] for e in errors}
    assert {e["source_file"] for e in errors} == {str(root / "chat" / "chat.json")}
    assert len(errors) == len(got) == 6  # five items failed, one response dropped
    assert "expected an item object, got list" in got[("item 1", "record")]
    assert "field 'video_name': expected a file name, got None" in got[("item 2", "record")]
    assert "field 'question[0].time': cannot parse time 'soon'" in got[("item 3 (desk_0042.mp4)", "record")]
    assert (
        "a question at 40 s ('Too late?') is past the video's end (16.000 s)"
        in got[("item 4 (desk_0042.mp4)", "record")]
    )
    assert "a time before the video starts" in got[("item 5 (desk_0042.mp4)", "record")]
    assert "field 'response[1].time': missing; response dropped" in got[("item 7 (desk_0042.mp4)", "event")]
    by_id = {s.id: s for s in report.records}
    assert sorted(by_id) == ["joyai-chat-0", "joyai-chat-6", "joyai-chat-7"]
    assert by_id["joyai-chat-6"].instruction_time == 16.0 and report.counts["clamped_questions"] == 1
    assert [t.content for t in by_id["joyai-chat-7"].targets] == ["A laptop."]


def test_a_subset_folder_or_one_file_builds_and_video_path_is_used_when_it_names_a_file(release, tmp_path):
    ann, videos = release("joyai")
    one = build_source("joyai", tmp_path / "one", annotations=ann / "chat", videos=videos)
    assert sorted(s.id for s in one.records) == ["joyai-chat-0", "joyai-chat-1"]
    file_only = build_source(
        "joyai", tmp_path / "file", annotations=ann / "chat" / "chat.json", videos=videos
    )
    assert [s.id for s in file_only.records] == [s.id for s in one.records]
    elsewhere = tmp_path / "elsewhere.mp4"
    elsewhere.write_bytes((videos / "desk_vlogs" / "desk_0042.mp4").read_bytes())
    root = write_chat(tmp_path / "given", [chat_item(video_path=str(elsewhere), source="not_a_folder")])
    (given,) = build_source(
        "joyai", tmp_path / "given_out", annotations=root, videos=videos, video_paths="absolute"
    ).records
    assert given.video == str(elsewhere)
    (by_name,) = build_source(
        "joyai",
        tmp_path / "name_out",
        annotations=root,
        videos=videos,
        video_paths="absolute",
        options={"use_video_path": False},
    ).records  # the pattern's folder does not exist: found by its name under videos=
    assert Path(by_name.video) == (videos / "desk_vlogs" / "desk_0042.mp4").resolve()


def test_layouts_and_keys_that_cannot_be_read_fail_naming_why(release, tmp_path):
    ann, videos = release("joyai")
    stray = tmp_path / "stray"
    write_chat(stray, [chat_item()])
    (stray / "extra").mkdir()
    (stray / "extra" / "more.json").write_text("[]")
    with pytest.raises(BuildFailed, match=r"JSON files outside the subset folders .*'extra/more.json'"):
        build_source("joyai", tmp_path / "o1", annotations=stray, videos=videos)
    (tmp_path / "mine.json").write_text(json.dumps([chat_item()]))
    with pytest.raises(BuildFailed, match="cannot tell the subset of this file"):
        build_source("joyai", tmp_path / "o2", annotations=tmp_path / "mine.json", videos=videos)
    with pytest.raises(BuildFailed, match=r"field 'task': task 'two words' is neither"):
        build_source(
            "joyai", tmp_path / "o3", annotations=ann, videos=videos, options={"chat_task": "two words"}
        )
    renamed = build_source(
        "joyai", tmp_path / "o4", annotations=ann / "chat", videos=videos, options={"chat_task": "live_chat"}
    )
    assert {s.task for s in renamed.records} == {"live_chat"}
