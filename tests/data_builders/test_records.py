"""Stream records: round trips through JSONL and parquet, and errors that name file, record, field."""

from __future__ import annotations

import json

import pytest

from data_builders.record_io import load_streams, write_jsonl, write_parquet
from data_builders.records import RecordError, Stream, Target
from data_builders.stream_steps import decision_counts, target_step
from engine.replies import load_predictions


def _stream(i: int = 0, **kw) -> Stream:
    base = dict(
        id=f"s{i}",
        source="toy",
        task="accident_warning",
        video=f"videos/{i}.mp4",
        clip_start=0.0,
        clip_end=20.0,
        instruction="Warn me.",
        instruction_time=0.0,
        targets=[Target(time=5.0, window=(5.0, 8.0), content="Warning: collision.", label="Warning")],
        meta={"video_id": f"v{i}", "event_second": 5},
    )
    base.update(kw)
    return Stream(**base)


def _row(**overrides) -> dict:
    row = _stream().to_dict()
    row.update(overrides)
    return row


def test_jsonl_and_parquet_round_trip(tmp_path):
    streams = [_stream(i) for i in range(5)] + [_stream(9, targets=[], task="event_monitoring")]
    write_jsonl(tmp_path / "r.jsonl", streams)
    assert load_streams(tmp_path / "r.jsonl") == streams
    paths = write_parquet(tmp_path / "pq", streams, shard_size=4)
    assert [p.name for p in paths] == ["records-00000-of-00002.parquet", "records-00001-of-00002.parquet"]
    assert load_streams(tmp_path / "pq") == streams


def test_parquet_loads_with_datasets(tmp_path):
    import datasets

    streams = [_stream(i) for i in range(3)]
    write_parquet(tmp_path / "pq", streams)
    ds = datasets.load_dataset("parquet", data_files=str(tmp_path / "pq" / "*.parquet"), split="train")
    assert ds.num_rows == 3
    assert [Stream.from_dict(r) for r in ds] == streams


def test_whole_video_stream_starts_clip_and_instruction_at_zero():
    target = Target(time=3.5, content="Now.", label="Warning")
    s = Stream.whole_video(
        id="nexar-00001",
        source="nexar",
        task="accident_warning",
        video="videos/00001.mp4",
        clip_end=12.25,
        instruction="Warn me.",
        targets=[target],
        meta={"video_id": "nexar/00001"},
    )
    assert (s.clip_start, s.clip_end, s.instruction_time, s.video_offset) == (0.0, 12.25, 0.0, 0.0)
    assert s.targets == [target] and s.history == [] and s.meta == {"video_id": "nexar/00001"}
    assert Stream.from_dict(s.to_dict()) == s


def test_window_only_target_takes_center():
    t = Target.from_dict({"window": [10.0, 14.0], "content": "x"})
    assert t.time == 12.0


@pytest.mark.parametrize(
    ("row", "field", "reason"),
    [
        (
            _row(targets=[{"time": 3.0, "window": [9.0, 4.0], "content": "x"}]),
            "targets[0].window",
            "window ends before it starts",
        ),
        (_row(task="two words"), "task", "task 'two words' is neither a built-in task"),
        (_row(clip_end=None), "clip_end", "missing required field"),
        (_row(clip_start="zero"), "clip_start", "expected a number of seconds"),
        (_row(targets=[{"time": 25.0, "content": "x"}]), "targets[0]", "outside the clip"),
        (_row(targets=[{"content": "x"}]), "targets[0].time", "a target needs a time or a window"),
        (_row(clip_start=30.0), "clip_end", "clip ends before it starts"),
    ],
)
def test_invalid_record_names_file_record_field_reason(tmp_path, row, field, reason):
    path = tmp_path / "bad.jsonl"
    good = _stream(7).to_dict()
    path.write_text(json.dumps(good) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(RecordError) as info:
        load_streams(path)
    msg = str(info.value)
    assert str(path) in msg
    assert "record s0" in msg
    assert f"field '{field}'" in msg
    assert reason in msg


def test_duplicate_id_is_rejected(tmp_path):
    path = tmp_path / "dup.jsonl"
    write_jsonl(path, [_stream(1), _stream(2), _stream(1)])
    with pytest.raises(RecordError, match=r"record s1, field 'id': duplicate id \(first seen on line 1\)"):
        load_streams(path)


def test_bad_json_names_line(tmp_path):
    path = tmp_path / "broken.jsonl"
    path.write_text(json.dumps(_stream(1).to_dict()) + "\n{not json\n")
    with pytest.raises(RecordError, match=r"broken.jsonl, record line 2: invalid JSON"):
        load_streams(path)


def test_record_without_id_is_located_by_line(tmp_path):
    path = tmp_path / "noid.jsonl"
    row = _row()
    del row["id"]
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(RecordError, match=r"record line 1, field 'id'"):
        load_streams(path)


def test_predictions_reject_missing_time_and_disorder(tmp_path):
    path = tmp_path / "pred.jsonl"
    path.write_text(json.dumps({"id": "a", "replies": [{"text": "hi"}]}) + "\n")
    with pytest.raises(RecordError, match=r"record a, field 'replies\[0\]\.time': missing required field"):
        load_predictions(path)
    path.write_text(json.dumps({"id": "a", "replies": [{"time": 5, "text": "x"}, {"time": 2, "text": "y"}]}))
    with pytest.raises(RecordError, match="not in time order"):
        load_predictions(path)


def test_target_steps_and_decision_counts():
    s = _stream(targets=[Target(time=t, content="x") for t in (0.0, 4.2, 4.9, 19.7)])
    assert [target_step(s, t) for t in s.targets] == [0, 5, 5, 19]
    assert decision_counts(s) == (17, 3)  # 20 steps, targets on 3 distinct steps
    assert [target_step(s, t, steps_per_second=0.5) for t in s.targets] == [0, 3, 3, 9]
