"""W&B logging of an evaluation, offline: metric keys against the training step, tables, timelines."""

from __future__ import annotations

import json

from eval.app.view import TABLE_COLUMNS
from eval.run import evaluate, load_config
from eval.store import PredictionLog
from infra.tracking import LOGGERS, EvalLogger, flatten, make_logger


def test_offline_wandb_run_holds_metrics_table_and_timeline(
    tiny_checkpoint, toy_dir, tmp_path, monkeypatch, offline_run
):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wb"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("JUDGE_API_KEY", "sentinel-secret")
    (tmp_path / "wb").mkdir()
    (tmp_path / "ckpt").symlink_to(tiny_checkpoint, target_is_directory=True)
    ckpt = tmp_path / "ckpt"
    cfg = load_config(
        [
            f"checkpoint={ckpt}",
            f"records={toy_dir / 'records.jsonl'}",
            f"paths.cache_dir={tmp_path / 'cache'}",
            f"out_dir={tmp_path / 'out'}",
            "render.max_pixels=4096",
            "max_new_tokens=4",
            "threshold=0.47",
            "limit=3",
            "timelines=2",
            "step=1234",
            "logger=wandb",
        ]
    )
    assert cfg.logger.mode == "offline"
    metrics = evaluate(cfg, echo=False)
    [run] = list((tmp_path / "wb" / "wandb").glob("offline-run-*"))
    # wandb 0.31 keeps summary and config in the run's .wandb log (no files/wandb-summary.json offline),
    # written by a separate process: wait for its exit record
    found = offline_run(run)
    summary, config = found["summary"], found["config"]
    assert summary["train/global_step"] == 1234
    assert summary["eval/p3i/prs_b"] == metrics["prs_b"]
    for task, scores in metrics["per_task"].items():
        assert summary[f"eval/p3i/per_task/{task}/prs_u"] == scores["prs_u"]
    assert summary["eval/p3i/per_task/_type"] == "table-file"
    assert summary["eval/p3i/timeline/count"] == 2
    images = list((run / "files" / "media" / "images").rglob("*.png"))
    assert len(images) == 2 and all(p.stat().st_size > 1000 for p in images)
    assert config["step"] == 1234 and config["threshold"] == 0.47
    assert "sentinel-secret" not in json.dumps(config)  # the key's value is never logged (only its env name)
    tables = [json.loads(p.read_text()) for p in (run / "files" / "media" / "table").rglob("*.table.json")]
    assert [t["columns"][:4] for t in tables if t["columns"][0] == "task"] == [
        ["task", "n", "with_negatives/prs_b", "prs_u"]
    ]
    # the viewer's rows (eval.app.view): one per stream, worst first, the timeline an image per row
    assert summary["eval/p3i/streams/_type"] == "table-file"
    [rows] = [t for t in tables if t["columns"] == TABLE_COLUMNS]
    predictions = PredictionLog(tmp_path / "out" / "predictions.jsonl").rows()
    fires = {r["id"]: len(r["replies"]) for r in predictions}
    assert sorted(r[0] for r in rows["data"]) == sorted(fires)
    assert all(r[3] == fires[r[0]] for r in rows["data"])
    # an image cell: the run's copy names its type, the table's artifact holds the PNG
    assert [r[-1] for r in rows["data"]] == ["Image"] * 3 and summary["eval/p3i/streams/nrows"] == 3
    pngs = sorted((tmp_path / "out" / "view_timelines").glob("*.png"))
    assert len(pngs) == 3 and all(p.stat().st_size > 200 for p in pngs)


def test_none_logger_needs_no_wandb():
    class Cfg:
        name = "none"

    assert type(make_logger(Cfg(), "x")) is EvalLogger and LOGGERS.names() == ["none", "wandb"]
    assert flatten({"a": 1, "b": {"c": 2.5, "d": "x"}, "e": True}, "eval") == {"eval/a": 1.0, "eval/b/c": 2.5}
