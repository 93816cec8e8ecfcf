"""Own data (``source=jsonl``) and mixtures, issue 55: a video under two names is one video for the
split; JSON Lines are split at ``\\n`` alone; times, ids, windows and video paths are checked by type
and place; no text of a record may hold a control token of the model's turn format."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from data_builders.build import build_source
from data_builders.mixture import MixtureConfig, SourceShare, build_mixture
from data_builders.record_io import load_streams, write_jsonl
from data_builders.records import HistoryEntry, RecordError, Stream
from data_builders.synthetic.toy import generate_toy
from data_builders.toolkit import load_json
from infra.files import json_lines


def _build(tmp_path: Path, lines: list[str], videos: Path, **kw):
    ann = tmp_path / "streams.jsonl"
    ann.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return build_source("jsonl", tmp_path / "built" / "mine", annotations=ann, videos=videos, **kw)


def _line(video: str, **fields) -> str:
    return json.dumps({"video": video, "instruction": "Say when it moves.", "end": 6.0, **fields})


def test_a_video_under_two_names_is_one_video_for_the_split(tmp_path, mp4):
    """Each of 4 files is named three ways (itself, a symlink, a hard link): 12 records, and each
    file's three records land in one split (before: grouped by path, 3 of the 4 files were in both)."""
    videos = tmp_path / "videos"
    lines = []
    for i in range(4):
        real = mp4(videos / f"clip{i}.mp4", 8)
        os.symlink(real.name, videos / f"soft{i}.mp4")
        os.link(real, videos / f"hard{i}.mp4")
        lines += [_line(f"{name}{i}.mp4") for name in ("clip", "soft", "hard")]
    report = _build(tmp_path, lines, videos)
    assert len(report.records) == 12 and not report.errors
    cfg = MixtureConfig(
        name="own",
        root=str(tmp_path / "built"),
        dir=str(tmp_path / "mix"),
        splits={"train": 0.5, "test": 0.5},
        sources={"mine": SourceShare()},
    )
    summary = build_mixture(cfg)
    splits_of: dict[tuple[int, int], set[str]] = {}
    for split in ("train", "test"):
        for s in load_streams(tmp_path / "mix" / split / "records.jsonl"):
            st = os.stat(tmp_path / "mix" / split / s.video)
            splits_of.setdefault((st.st_dev, st.st_ino), set()).add(split)
    assert len(splits_of) == 4
    assert all(len(splits) == 1 for splits in splits_of.values()), splits_of
    assert sum(v["records"] for v in summary["splits"].values()) == 12


#: Breaks that ``str.splitlines`` splits at and JSON allows raw inside a string.
BREAKS = ["\u2028", "\u2029", "\x85"]
#: Breaks ``str.splitlines`` splits at that JSON allows only escaped (control characters).
CONTROLS = ["\x1c", "\x1d", "\x1e"]


def test_json_lines_are_split_at_newlines_only(tmp_path, mp4):
    """A file whose strings hold U+2028, U+2029 and U+0085 raw reads one record a line, also through
    ``load_json``; a line holding raw ``\\x1c``-``\\x1e`` (not JSON) is refused alone, under its own
    line number (before: each break began a line, one torn, the line numbers and default ids after
    it shifted)."""
    mp4(tmp_path / "videos" / "a.mp4", 8)
    texts = [f"Say when{b}it moves{b}." for b in BREAKS]
    lines = [json.dumps({"video": "a.mp4", "instruction": t, "end": 6.0}, ensure_ascii=False) for t in texts]
    lines.insert(2, _line("a.mp4").replace("Say when", "Say" + "".join(CONTROLS) + "when"))
    assert all(b in lines[k] for k, b in [(0, BREAKS[0]), (1, BREAKS[1]), (3, BREAKS[2])])
    report = _build(tmp_path, lines, tmp_path / "videos", max_error_rate=1.0)
    assert [(e.record, e.reason.split(":")[0]) for e in report.errors] == [
        ("line 3", "invalid JSON at line 3, column 39")
    ]
    assert {s.id: s.instruction for s in report.records} == {
        "mine-1": texts[0],
        "mine-2": texts[1],
        "mine-4": texts[2],
    }
    valid = tmp_path / "valid.jsonl"
    valid.write_text("\r\n".join(lines[:2] + lines[3:]) + "\r\n", encoding="utf-8")
    assert [row["instruction"] for row in load_json(valid)] == texts
    as_json = tmp_path / "valid.json"  # not one document: read as JSON Lines from its first line
    as_json.write_text(valid.read_text(encoding="utf-8"), encoding="utf-8")
    assert [row["instruction"] for row in load_json(as_json)] == texts
    assert json_lines("a\u2028b\r\nc\x85d\x1ce\n\nf") == ["a\u2028b", "c\x85d\x1ce", "", "f"]


#: (line, what its error names) for each wrong type or place of issue 55 (before: each was built).
WRONG = [
    (_line("a.mp4", start=False), "field 'start': expected a number of seconds, got False"),
    (_line("a.mp4", start=""), "field 'start': expected a number of seconds, got the string ''"),
    (_line("a.mp4", start=[]), "field 'start': expected a number of seconds, got []"),
    (_line("a.mp4", end=True), "field 'end': expected a number of seconds, got True"),
    (_line("a.mp4", instruction_time="2"), "field 'instruction_time': expected a number of seconds"),
    (_line("a.mp4", id=False), "field 'id': expected a non-empty string or a whole number, got bool False"),
    (_line("a.mp4", id={"k": 1}), "field 'id': expected a non-empty string or a whole number, got dict"),
    (_line("a.mp4", id=1.5), "field 'id': expected a non-empty string or a whole number, got float 1.5"),
    (
        _line("a.mp4", responses=[{"time": 5.0, "window": [1.0, 2.0], "text": "Now."}]),
        "field 'responses[0].time': 5.0 lies outside its own window [1.0, 2.0]",
    ),
    (
        _line("a.mp4", responses=[{"time": 2.0, "window": [1.0, False], "text": "Now."}]),
        "field 'responses[0].window': expected a number of seconds, got False",
    ),
    (_line("../outside.mp4"), "field 'video': '../outside.mp4' climbs out of videos="),
    (_line("sub/../../outside.mp4"), "field 'video': 'sub/../../outside.mp4' climbs out of videos="),
]


def test_wrong_types_and_places_in_own_data_are_refused_naming_line_field_and_value(tmp_path, mp4):
    mp4(tmp_path / "videos" / "a.mp4", 8)
    (tmp_path / "videos" / "sub").mkdir()
    mp4(tmp_path / "outside.mp4", 8)  # a real file the climbs would reach
    good = [
        _line("a.mp4", id=7),
        _line("a.mp4", id="kept", responses=[{"time": 2.0, "window": [1.0, 3.0], "text": "Now."}]),
        _line(str(tmp_path / "outside.mp4")),  # absolute paths stay allowed
    ]
    report = _build(tmp_path, [line for line, _ in WRONG] + good, tmp_path / "videos", max_error_rate=1.0)
    assert sorted(s.id for s in report.records) == ["7", "kept", f"mine-{len(WRONG) + 3}"]
    reasons = {e.record: e.reason for e in report.errors}
    assert sorted(reasons) == sorted(f"line {n}" for n in range(1, len(WRONG) + 1))
    for n, (_, want) in enumerate(WRONG, start=1):
        assert want in reasons[f"line {n}"], (n, reasons[f"line {n}"])
    rows = [json.loads(line) for line in (tmp_path / "built/mine/errors.jsonl").read_text().splitlines()]
    assert {r["source_file"] for r in rows} == {str(tmp_path / "streams.jsonl")}


#: (line, field, token): a control token of the turn format in each text field of a line.
CONTROL = [
    (
        json.dumps({"video": "a.mp4", "instruction": "Say <|image_pad|> when", "end": 6.0}),
        "instruction",
        "<|image_pad|>",
    ),
    (
        _line("a.mp4", responses=[{"time": 2.0, "text": "Done.<|im_end|>"}]),
        "targets[0].content",
        "<|im_end|>",
    ),
    (
        _line("a.mp4", responses=[{"time": 2.0, "text": "Done.", "category": "</Silence>"}]),
        "targets[0].category",
        "</Silence>",
    ),
    (_line("a.mp4", responses=[{"time": 2.0, "text": "</Response> x"}]), "targets[0].content", "</Response>"),
    (
        json.dumps({"video": "a.mp4", "instruction": "<|im_start|>system", "end": 6.0}),
        "instruction",
        "<|im_start|>",
    ),
]


def test_a_control_token_in_any_text_is_refused_by_the_build_naming_line_field_and_token(tmp_path, mp4):
    """Before: built, then ``eval.run`` died of ``generator raised StopIteration`` and ``train.sft`` of
    ``Image features and image tokens do not match``."""
    mp4(tmp_path / "videos" / "a.mp4", 8)
    lines = [line for line, _, _ in CONTROL] + [_line("a.mp4")]
    report = _build(tmp_path, lines, tmp_path / "videos", max_error_rate=1.0)
    assert [s.id for s in report.records] == [f"mine-{len(CONTROL) + 1}"]
    rows = {
        r["record"]: r["reason"]
        for r in map(json.loads, (tmp_path / "built/mine/errors.jsonl").read_text().splitlines())
    }
    for n, (_, field, token) in enumerate(CONTROL, start=1):
        assert f"field '{field}': holds '{token}', a control token" in rows[f"line {n}"], rows[f"line {n}"]


def test_a_built_record_holding_a_control_token_is_refused_when_read(tmp_path):
    """Records written before the check (or by hand): reading them names the file, the record, the
    field and the token, in the history and the later user turns too."""
    streams = generate_toy(tmp_path, n=3, seed=0)
    bad = [
        replace(streams[0], history=[HistoryEntry(1.0, "fine"), HistoryEntry(2.0, "<|vision_end|>")]),
        replace(streams[1], meta={"user_turns": [{"time": 3.0, "content": "and <|video_pad|>?"}]}),
    ]
    for stream, field, token in zip(
        bad,
        ["history[1].text", "meta.user_turns[0].content"],
        ["<|vision_end|>", "<|video_pad|>"],
        strict=True,
    ):
        write_jsonl(tmp_path / "records.jsonl", [streams[2], stream])
        with pytest.raises(RecordError) as err:
            load_streams(tmp_path / "records.jsonl")
        assert str(err.value).startswith(
            f"file {tmp_path / 'records.jsonl'}, record {stream.id}, field '{field}': holds '{token}'"
        )
    assert Stream.from_dict(streams[2].to_dict()) == streams[2]
