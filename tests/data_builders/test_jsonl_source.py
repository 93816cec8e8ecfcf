"""``source=jsonl``: a user's own file of streams, built with the same checks as every source, a task
of the user's own allowed, and mixed alone or beside the built sources by naming it.

The example file is the one of docs/data.md (read from the page, so the two cannot drift)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from data_builders.build import BuildFailed, build_source
from data_builders.record_io import load_streams
from data_builders.synthetic.toy import generate_toy
from tests.conftest import run_module

ROOT = Path(__file__).resolve().parents[2]
MARK = "<!-- example: streams.jsonl -->\n```\n"


def example_lines() -> str:
    """The example file of docs/data.md's "Your own data" section, as written there."""
    text = (ROOT / "docs" / "data.md").read_text(encoding="utf-8")
    return text.split(MARK, 1)[1].split("```", 1)[0]


def write_example(root: Path) -> Path:
    """``root/streams.jsonl`` (the docs' example) and toy clips under the names it uses in
    ``root/videos/``; returns the annotation file."""
    lines = example_lines()
    names = sorted({json.loads(line)["video"] for line in lines.splitlines()})
    streams = generate_toy(root / "toygen", n=len(names), seed=0)
    (root / "videos").mkdir(parents=True, exist_ok=True)
    for s, name in zip(streams, names, strict=True):
        shutil.copy(root / "toygen" / s.video, root / "videos" / name)
    (root / "streams.jsonl").write_text(lines)
    return root / "streams.jsonl"


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return run_module("data_builders", *args, cwd=cwd)


def test_the_example_file_builds_into_five_records_with_the_documented_defaults(tmp_path):
    ann = write_example(tmp_path)
    out = cli(
        "build", "source=jsonl", f"annotations={ann}", "videos=videos", "out=data/built/mine", cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr[-2000:]
    summary = json.loads(out.stdout.splitlines()[-1])
    assert summary["records"] == 5
    # the summary names the records' source, as they do (it said "jsonl" where they say "mine")
    assert (summary["source"], summary["builder"]) == ("mine", "jsonl")
    by_id = {s.id: s for s in load_streams(tmp_path / "data/built/mine/records.jsonl")}
    assert sorted(by_id) == ["desk-1", "mine-1", "mine-2", "mine-3", "mine-5"]
    assert {s.source for s in by_id.values()} == {"mine"}  # named after the out folder
    kettle, cut, street, desk, phone = (by_id[k] for k in ("mine-1", "mine-2", "mine-3", "desk-1", "mine-5"))
    assert (kettle.task, kettle.clip_start, kettle.clip_end) == ("kettle_watch", 0.0, 20.0)  # probed
    assert [(t.time, t.content) for t in kettle.targets] == [(12.0, "The kettle is boiling.")]
    assert cut.is_negative and (cut.clip_start, cut.clip_end) == (0.0, 9.0)
    (warn,) = street.targets
    assert (warn.time, warn.window, warn.label) == (7.5, (6.0, 9.0), "Warning")  # due at the center
    assert desk.task == "custom" and desk.instruction_time == 2.0
    assert [t.category for t in desk.targets] == [None, "follow_up"]
    assert desk.meta["user_turns"] == [{"time": 10.0, "content": "And when I put it down?"}]
    assert "user_turns" not in kettle.meta  # no questions: no later turns
    assert (phone.clip_start, phone.clip_end, phone.instruction_time, phone.targets) == (4.0, 18.0, 4.0, [])


BAD_LINES = [
    ('{"video": "kitchen.mp4", "instruction": 3}', "field 'instruction': expected a string, got int 3"),
    ("{not json", "invalid JSON at line 2, column 2"),
    ('{"video": "gone.mp4", "instruction": "x"}', "video file missing"),
    ('{"video": "desk.mp4", "instruction": "x", "respones": []}', "unknown field(s) ['respones']"),
    (
        '{"video": "desk.mp4", "instruction": "x", "task": "two words"}',
        "field 'task': task 'two words' is neither",
    ),
    ('{"video": "desk.mp4", "instruction": "x", "responses": [{"text": "t"}]}', "needs a time or a window"),
    (
        '{"video": "desk.mp4", "instruction": "x", "responses": [{"time": 2}]}',
        "missing field 'responses[0].text'",
    ),
    (
        '{"video": "desk.mp4", "instruction": "x", "responses": [{"time": 50, "text": "late"}]}',
        "past the clip end",
    ),
    (
        '{"video": "desk.mp4", "instruction": "x", "start": 9, "end": 3}',
        "field 'start..end': ends before it starts",
    ),
]


def test_every_bad_line_is_listed_with_its_line_and_field_and_the_good_lines_are_built(tmp_path):
    write_example(tmp_path)
    good = example_lines().splitlines()
    ann = tmp_path / "mixed.jsonl"
    ann.write_text("\n".join([line for line, _ in BAD_LINES] + good) + "\n")
    report = build_source(
        "jsonl", tmp_path / "out", annotations=ann, videos=tmp_path / "videos", max_error_rate=1.0
    )
    assert len(report.records) == 5
    reasons = {e.record: e.reason for e in report.errors}
    assert sorted(reasons) == sorted(f"line {n}" for n in range(1, len(BAD_LINES) + 1))
    for n, (_, want) in enumerate(BAD_LINES, start=1):
        assert want in reasons[f"line {n}"], (n, reasons[f"line {n}"])
    with pytest.raises(BuildFailed, match="failed"):  # over the default max_error_rate: nothing kept
        build_source("jsonl", tmp_path / "out2", annotations=ann, videos=tmp_path / "videos")


def test_a_users_source_is_mixed_alone_or_beside_the_toy_source_by_naming_it(tmp_path):
    ann = write_example(tmp_path)
    assert (
        cli(
            "build",
            "source=jsonl",
            f"annotations={ann}",
            "videos=videos",
            "out=data/built/mine",
            cwd=tmp_path,
        ).returncode
        == 0
    )
    build_source("toy", tmp_path / "data/built/toy", options={"n": 8, "seed": 0}, check_videos=False)
    taken = {}
    for group, folder in [("own", "data/own"), ("toy", "data/both")]:
        out = cli(
            "mix",
            f"data={group}",
            "data.root=data/built",
            f"data.dir={folder}",
            "data.sources.mine.weight=1",
            cwd=tmp_path,
        )
        assert out.returncode == 0, out.stderr[-2000:]
        taken[group] = {k: v["taken"] for k, v in json.loads(out.stdout.splitlines()[-1])["sources"].items()}
    assert taken == {"own": {"mine": 5}, "toy": {"mine": 5, "toy": 8}}
    empty = cli("mix", "data=own", "data.root=data/built", "data.dir=data/none", cwd=tmp_path)
    assert empty.returncode == 2 and "name one with data.sources.<name>.weight=1" in empty.stderr


BAD_QUESTIONS = [
    ('"questions": {"time": 3, "text": "x"}', "field 'questions': expected a list, got dict"),
    ('"questions": ["x"]', "field 'questions[0]': expected an object, got str"),
    ('"questions": [{"time": 3, "txt": "x"}]', "field 'questions[0]': unknown field(s) ['txt']"),
    ('"questions": [{"time": 3}]', "missing field 'questions[0].text'"),
    ('"questions": [{"text": "x"}]', "missing field 'questions[0].time'"),
    (
        '"questions": [{"time": "later", "text": "x"}]',
        "field 'questions[0].time': expected a number of seconds, got the string 'later'",
    ),
    (
        '"questions": [{"time": 1, "text": "x"}]',
        "field 'questions[0].time': 1 s is before the instruction (2 s)",
    ),
    ('"questions": [{"time": 50, "text": "x"}]', "the question at 50 s ('x') is past the clip end (20 s)"),
]


def test_every_bad_question_is_its_lines_error_naming_the_field(tmp_path):
    write_example(tmp_path)
    ann = tmp_path / "questions.jsonl"
    head = '{"video": "desk.mp4", "instruction": "Say when I stand up.", "instruction_time": 2.0, '
    ann.write_text("".join(head + q + "}\n" for q, _ in BAD_QUESTIONS) + head + '"questions": []}\n')
    report = build_source(
        "jsonl", tmp_path / "out", annotations=ann, videos=tmp_path / "videos", max_error_rate=1.0
    )
    assert [s.id for s in report.records] == [f"out-{len(BAD_QUESTIONS) + 1}"]  # [] is no question
    reasons = {e.record: e.reason for e in report.errors}
    assert sorted(reasons) == sorted(f"line {n}" for n in range(1, len(BAD_QUESTIONS) + 1))
    for n, (_, want) in enumerate(BAD_QUESTIONS, start=1):
        assert want in reasons[f"line {n}"], (n, reasons[f"line {n}"])


def test_a_later_question_is_rendered_as_a_user_turn_on_its_step(tmp_path, tiny_model_and_processor):
    """The example's ``desk-1``, built: its instruction in the user turn at 2 s, its second question
    in the user turn at 10 s (before that step's timestamp and frame), each once, and the reply to
    it at 15 s: what SFT trains on and what the streaming engine gives the model."""
    from data_builders.config import RenderConfig
    from data_builders.frames import stream_frames
    from engine.render import TurnRenderer

    ann = write_example(tmp_path)
    report = build_source("jsonl", tmp_path / "built" / "mine", annotations=ann, videos=tmp_path / "videos")
    desk = next(s for s in report.records if s.id == "desk-1")
    renderer = TurnRenderer(tiny_model_and_processor[1], RenderConfig(max_pixels=64 * 64))
    frames = stream_frames(desk, tmp_path / "built" / "mine" / desk.video, renderer.cfg)
    text = renderer.tokenizer.decode(renderer.render(desk, frames).input_ids)
    users = re.findall(r"<\|im_start\|>user\n(.*?)<\|vision_start\|>", text, flags=re.S)
    answers = re.findall(r"<\|im_start\|>assistant\n(.*?)<\|im_end\|>", text, flags=re.S)
    assert len(users) == len(answers) == 20
    assert users[2] == "Say when I pick up the red pen.\n<2.0 seconds>"
    assert users[10] == "And when I put it down?\n<10.0 seconds>"
    assert [k for k, u in enumerate(users) if "\n" in u] == [2, 10]  # no other turn carries text
    assert answers[5] == "</Response> You picked up the red pen."
    assert answers[15] == "</Response> [follow_up] You put it down."
