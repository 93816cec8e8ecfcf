"""Results know what they were computed from (``eval.provenance``): a record rebuilt in place is
streamed again, not resumed; ranks with another config or other weights refuse to merge; a watcher
with another config evaluates again."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from data_builders.record_io import load_streams, write_jsonl
from data_builders.records import Target
from eval.provenance import RECORD_FIELD, decides, describe_difference, first_difference, record_fingerprint
from eval.store import PredictionLog
from tests.conftest import eval_overrides, run_module

ROOT = Path(__file__).resolve().parents[2]


def eval_run(*args: str) -> subprocess.CompletedProcess:
    return run_module("eval.run", *args)


def test_first_difference_names_the_dotted_key_and_both_values():
    a = {"threshold": 0.5, "render": {"max_pixels": 4096, "fps": 2}, "weights": "ab"}
    b = {"threshold": 0.5, "render": {"max_pixels": 8192, "fps": 2}, "weights": "ab"}
    assert first_difference(a, a) is None
    assert first_difference(a, b) == ("render.max_pixels", 4096, 8192)
    assert first_difference(a, {**a, "memory": {}}) == ("memory", "<absent>", {})
    assert (
        describe_difference(a, b, "rank 1", "rank 0") == "render.max_pixels: 4096 (rank 1) vs 8192 (rank 0)"
    )
    plain = {"threshold": 0.3, "out_dir": "x", "logger": {"name": "none"}, "batch_size": 4, "limit": 8}
    assert decides(plain, "w") == {"threshold": 0.3, "limit": 8, "weights": "w"}


@pytest.mark.slow
def test_records_rebuilt_in_place_are_streamed_again_not_scored_stale(
    tiny_checkpoint, toy_dir, tmp_path, capsys
):
    """Two evaluations on one records file, rebuilt in between (same path, same ids, one record's
    instruction and target changed): the second, ``python -m eval.run``, streams that record again,
    sets its old line aside, and its metrics are those of a fresh run on the new records (the first
    run and the fresh one: in this process)."""
    from eval.run import evaluate, load_config

    streams = [
        replace(s, video=str((toy_dir / s.video).resolve()))
        for s in load_streams(toy_dir / "records.jsonl")[:3]
    ]
    records = tmp_path / "records.jsonl"
    write_jsonl(records, streams)
    common = eval_overrides(tiny_checkpoint, records, tmp_path, "timelines=0", "view=false", "threshold=0.47")
    out = tmp_path / "out"
    capsys.readouterr()
    evaluate(load_config([*common, f"out_dir={out}"]))
    assert "(3 records, 3 streamed, 0 reused" in capsys.readouterr().out
    old = {r["id"]: r for r in PredictionLog(out / "predictions.jsonl").rows()}
    assert {r[RECORD_FIELD] for r in old.values()} == {record_fingerprint(s) for s in streams}

    k = next(i for i, s in enumerate(streams) if s.targets)
    t = streams[k].targets[0]
    end = streams[k].clip_end
    streams[k] = replace(
        streams[k],
        instruction="Say when the clip is about to end.",
        targets=[Target(time=end - 0.5, content="It ends now.", window=(end - 1.0, end))],
    )
    assert streams[k].targets[0].time != t.time
    write_jsonl(records, streams)
    second = eval_run(*common, f"out_dir={out}")
    assert second.returncode == 0, second.stderr
    assert "(3 records, 1 streamed, 0 reused" in second.stdout
    assert "1 prediction line(s) were made for other contents of their record" in second.stderr
    rows = {r["id"]: r for r in PredictionLog(out / "predictions.jsonl").rows()}
    assert rows[streams[k].id][RECORD_FIELD] == record_fingerprint(streams[k])
    kept = [r for i, r in rows.items() if i != streams[k].id]
    assert kept == [old[i] for i in rows if i != streams[k].id]  # the others resumed as they were
    (aside,) = (out / "superseded").glob("records-*/predictions.jsonl")
    assert PredictionLog(aside).rows() == [old[streams[k].id]]  # nothing lost
    gt = [json.loads(line) for line in (out / "gt.jsonl").read_text().splitlines()]
    assert gt[k]["targets"][0]["time"] == end - 0.5
    fresh = evaluate(load_config([*common, f"out_dir={tmp_path / 'fresh'}"]), echo=False)
    assert json.loads(second.stdout.splitlines()[-1]) == json.loads(json.dumps(fresh))
