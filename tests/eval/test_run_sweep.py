"""Threshold sweeps: exact reuse of recorded passes, the approximate mode, the summary, Hydra -m."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from eval.run import default_out_dir, evaluate, load_config
from eval.store import PredictionLog

ROOT = Path(__file__).resolve().parents[2]


def _overrides(ckpt: Path, toy_dir: Path, tmp: Path) -> list[str]:
    return [
        f"checkpoint={ckpt}",
        f"records={toy_dir / 'records.jsonl'}",
        f"paths.cache_dir={tmp / 'cache'}",
        f"paths.runs_dir={tmp / 'runs'}",
        "render.max_pixels=4096",
        "max_new_tokens=4",
        "limit=3",
        "timelines=0",
    ]


@pytest.mark.slow
def test_sweep_reuses_passes_exactly_where_decisions_agree(tiny_checkpoint, toy_dir, tmp_path):
    common = _overrides(tiny_checkpoint, toy_dir, tmp_path) + [f"out_dir={tmp_path / 'sweep'}"]
    point = lambda t, *more: evaluate(load_config([*common, f"threshold={t}", *more]), sweep=True, echo=False)  # noqa: E731
    lines = lambda t: PredictionLog(tmp_path / "sweep" / f"threshold_{t}" / "predictions.jsonl").rows()  # noqa: E731

    point(0.5)  # the untrained model sits near P = 0.47: silent at 0.5
    assert all(sum(r["fired"]) == 0 and "reused" not in r for r in lines(0.5))
    high = point(0.7)  # every P < 0.5 is also < 0.7: the 0.5 pass is the 0.7 run, reused whole
    assert [r.get("reused") for r in lines(0.7)] == ["exact"] * 3
    alone = evaluate(
        load_config(
            [
                *_overrides(tiny_checkpoint, toy_dir, tmp_path),
                "threshold=0.7",
                f"out_dir={tmp_path / 'alone'}",
            ]
        ),
        echo=False,
    )
    assert high == alone
    assert [r["p_response"] for r in lines(0.7)] == [
        r["p_response"] for r in PredictionLog(tmp_path / "alone" / "predictions.jsonl").rows()
    ]

    point(0.3)  # decisions differ from every recorded pass: streamed
    assert all("reused" not in r and sum(r["fired"]) == 20 for r in lines(0.3))

    point(0.47, "sweep_mode=reuse")  # a pass that agrees is reused as is, else the 0.3 pass re-thresholded
    src = {r["id"]: r for r in lines(0.3)}
    kinds = [r["reused"] for r in lines(0.47)]
    assert set(kinds) <= {"exact", "approximate"} and "approximate" in kinds
    for r in lines(0.47):
        assert r["fired"] == [int(p >= 0.47) for p in r["p_response"]]
        assert [x["time"] for x in r["replies"]] == [float(k) for k, f in enumerate(r["fired"]) if f]
        if r["reused"] == "approximate":
            assert r["p_response"] == src[r["id"]]["p_response"]

    summary = json.loads((tmp_path / "sweep" / "sweep.json").read_text())
    assert list(summary["thresholds"]) == ["0.3", "0.47", "0.5", "0.7"]
    assert summary["thresholds"]["0.7"]["prs_b"] == high["prs_b"]


@pytest.mark.slow
def test_hydra_multirun_over_thresholds(tiny_checkpoint, toy_dir, tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "eval.run",
        *_overrides(tiny_checkpoint, toy_dir, tmp_path),
        "threshold=0.5,0.7",
        "-m",
    ]
    done = subprocess.run(
        cmd,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    base = default_out_dir(load_config(_overrides(tiny_checkpoint, toy_dir, tmp_path)), sweep=True)
    assert base.parent == tmp_path / "runs" / "eval" / tiny_checkpoint.name and base.name.startswith("p3i@")
    summary = json.loads((base / "sweep.json").read_text())
    assert set(summary["thresholds"]) == {"0.5", "0.7"}
    assert all("prs_b" in m and "prs_u" in m for m in summary["thresholds"].values())
    rows = PredictionLog(base / "threshold_0.7" / "predictions.jsonl").rows()
    assert [r.get("reused") for r in rows] == ["exact"] * 3

    table = subprocess.run(  # the documented table of a threshold sweep, on the folder the points print
        [sys.executable, "-m", "eval.sweep_table", str(base)], cwd=ROOT, capture_output=True, text=True
    )
    assert table.returncode == 0, table.stderr[-2000:]
    assert f"-> {base / 'threshold_0.7'}" in done.stdout
    shown = json.loads(table.stdout.strip().splitlines()[-1])
    assert shown["swept"] == ["threshold"] and [r["threshold"] for r in shown["rows"]] == [0.5, 0.7]
    for row in shown["rows"]:
        assert row["prs_b"] == summary["thresholds"][f"{row['threshold']:g}"]["prs_b"]
    assert "| threshold |" in table.stdout and (base / "sweep.md").is_file()
