"""eval.run's summary lines: the headline metric with its clips, and ``before -> after`` against an
earlier evaluation of the same records under runs/eval/; the JSON line led by the headline."""

from __future__ import annotations

import doctest
import json

import pytest

import eval.summary
from benchmarks.runners import get_runner
from data_builders.record_io import load_streams, write_jsonl
from eval.run import evaluate, load_config
from eval.summary import counts, earlier, lead_with, lookup

FIRING = 0.47  # the untrained tiny model fires on about half the steps at this threshold


def test_doctests():
    assert doctest.testmod(eval.summary).failed == 0


def test_lead_with_keeps_every_key_and_value():
    m = {"protocol": "p3i", "prs_u": 1.0, "with_negatives": {"prs_u": 2.0, "prs_b": 3.0, "per_task": {}}}
    led = lead_with(m, "with_negatives/prs_b")
    assert led == m and json.dumps(led).startswith('{"with_negatives": {"prs_b": 3.0')
    assert lookup(m, "with_negatives/prs_b") == 3.0 and lookup(m, "with_negatives/x") is None
    assert lead_with(m, "absent/prs_b") is m


def _run(tmp_path, toy_dir, capsys, *extra: str) -> tuple[dict, list[str]]:
    cfg = load_config(
        [
            f"records={toy_dir / 'records.jsonl'}",
            f"paths.cache_dir={tmp_path / 'cache'}",
            f"paths.runs_dir={tmp_path / 'runs'}",
            "render.max_pixels=4096",
            "max_new_tokens=6",
            "limit=6",
            "view=false",
            "timelines=0",
            *extra,
        ]
    )
    capsys.readouterr()
    metrics = evaluate(cfg)
    return metrics, capsys.readouterr().out.strip().splitlines()


@pytest.mark.slow  # two evaluations of the tiny model (about 20 s loaded)
def test_summary_line_counts_the_clips_and_compares_with_an_earlier_run(
    tiny_checkpoint, toy_dir, tmp_path, capsys
):
    streams = load_streams(toy_dir / "records.jsonl")[:6]
    c = counts(streams)
    assert c["negatives"] >= 1 and c["with_targets"] >= 1  # the fixture holds both
    before, lines = _run(tmp_path, toy_dir, capsys, "checkpoint=null")
    head = before["with_negatives"]["prs_b"]
    assert lines[-1] == (
        f"tiny-untrained on p3i: with_negatives/prs_b {head:.1f} (PRS-B, each negative counted in its "
        f"task (100 when silent)) over 6 clips: {c['with_targets']} with targets, {c['negatives']} negatives"
    )
    after, lines = _run(tmp_path, toy_dir, capsys, f"checkpoint={tiny_checkpoint}", f"threshold={FIRING}")
    now = after["with_negatives"]["prs_b"]
    assert lines[-2].startswith(f"ckpt on p3i: with_negatives/prs_b {now:.1f} ")
    # records= and limit= name the folders (p3i@<sha12>: eval.run's folder of other settings)
    (untrained,) = (tmp_path / "runs" / "eval" / "tiny-untrained").glob("p3i@*")
    assert lines[-1] == (
        f"before -> after, the same 6 records, with_negatives/prs_b: tiny-untrained {head:.1f} -> "
        f"ckpt {now:.1f} ({now - head:+.1f}; {untrained})"
    )
    # the per-task table leads with the headline per task, as metrics.json holds it
    cols, rows = get_runner("p3i").table(after, [], streams)
    assert cols[2] == "with_negatives/prs_b"
    assert {r[0]: r[2] for r in rows if r[0] != "negatives"} == {
        t: v["prs_b"] for t, v in after["with_negatives"]["per_task"].items()
    }


def test_only_the_same_records_are_compared(tmp_path):
    runs = tmp_path / "runs"
    mine, other, changed = (runs / "eval" / name / "p3i" for name in ("b", "a", "c"))
    for d, gt in ((mine, [{"id": "x"}]), (other, [{"id": "x"}]), (changed, [{"id": "y"}])):
        d.mkdir(parents=True)
        write_jsonl(d / "gt.jsonl", gt)
        (d / "metrics.json").write_text(json.dumps({"with_negatives": {"prs_b": 1.0}}))
    assert earlier(mine, runs) == other
    (other / "gt.jsonl").write_text('{"id": "x", "targets": []}\n')
    assert earlier(mine, runs) is None
