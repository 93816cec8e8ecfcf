"""eval.run on the untrained tiny model and toy streams: predictions, scores, protocols, resume."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks.runners import get_runner
from data_builders.record_io import load_streams, write_jsonl
from data_builders.records import HistoryEntry, Target
from engine import step_choice, step_forward
from engine.step_forward import compiled_forward
from engine.streaming import StepDecision, StreamResult
from eval import score
from eval.run import evaluate, load_config
from eval.store import PredictionLog

ROOT = Path(__file__).resolve().parents[2]
# The untrained tiny model sits near P(response) = 0.47: at 0.47 it fires on about half the steps.
FIRING = 0.47


def overrides(ckpt: Path, records: Path, tmp: Path, *extra: str) -> list[str]:
    return [
        f"checkpoint={ckpt}",
        f"records={records}",
        f"paths.cache_dir={tmp / 'cache'}",
        f"paths.runs_dir={tmp / 'runs'}",
        "render.max_pixels=4096",
        "max_new_tokens=6",
        *extra,
    ]


@pytest.mark.slow  # an evaluation end to end, then eval.score (12 s loaded)
def test_p3i_run_writes_predictions_and_the_metrics_eval_score_prints(
    tiny_checkpoint, toy_dir, tmp_path, capsys
):
    out = tmp_path / "out"
    cfg = load_config(
        overrides(
            tiny_checkpoint,
            toy_dir / "records.jsonl",
            tmp_path,
            f"out_dir={out}",
            f"threshold={FIRING}",
            "limit=4",
            "batch_size=3",
        )
    )
    metrics = evaluate(cfg)
    streams = load_streams(toy_dir / "records.jsonl")[:4]
    rows = PredictionLog(out / "predictions.jsonl").rows()
    assert [r["id"] for r in rows] == [s.id for s in streams]
    fires = 0
    for r in rows:
        assert len(r["p_response"]) == 20
        assert r["fired"] == [int(p >= FIRING) for p in r["p_response"]]
        assert [x["time"] for x in r["replies"]] == [float(k) for k, f in enumerate(r["fired"]) if f]
        fires += sum(r["fired"])
    assert 10 < fires < 70  # about half of 80 steps
    assert json.loads((out / "metrics.json").read_text()) == metrics
    capsys.readouterr()
    argv = ["--protocol", "p3i", "--gt", str(out / "gt.jsonl"), "--pred", str(out / "predictions.jsonl")]
    assert score.main(argv + ["--content", "label", "--label-fallback", "exact"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == metrics
    assert set(metrics["per_task"]) == {s.task for s in streams if s.targets}
    assert len(list((out / "timelines").glob("*.png"))) == 4
    assert (out / "config.yaml").exists()


@pytest.mark.slow  # an eager and a compiled evaluation (graphs built on CPU)
def test_compiled_run_writes_the_eager_run_s_predictions(tiny_checkpoint, toy_dir, tmp_path, monkeypatch):
    """``compile=true`` reaches the engine (its language model compiled) and changes no prediction."""
    compiled_models = []

    def spy(lm):
        compiled_models.append(lm)
        return compiled_forward(lm)

    monkeypatch.setattr(step_forward, "compiled_forward", spy)
    rows = {}
    for flag in ("false", "true"):
        out = tmp_path / flag
        argv = [f"out_dir={out}", f"threshold={FIRING}", "limit=3", "batch_size=3", f"compile={flag}"]
        evaluate(load_config(overrides(tiny_checkpoint, toy_dir / "records.jsonl", tmp_path, *argv)))
        rows[flag] = PredictionLog(out / "predictions.jsonl").rows()
        assert bool(compiled_models) == (flag == "true")
    assert len(rows["true"]) == 3 and sum(sum(r["fired"]) for r in rows["true"]) > 0
    for eager, compiled in zip(rows["false"], rows["true"], strict=True):
        assert eager["fired"] == compiled["fired"] and eager["replies"] == compiled["replies"]
        assert max(abs(a - b) for a, b in zip(eager["p_response"], compiled["p_response"])) < 1e-5


@pytest.mark.slow  # two evaluations end to end
def test_the_default_step_is_chosen_logged_and_the_static_step_predicts_the_same(
    tiny_checkpoint, toy_dir, tmp_path, caplog
):
    """``engine_step=auto`` (the default) takes the eager step on CPU and says so once; an
    ``engine_step=static`` run writes the same predictions."""
    step_choice._said.clear()
    rows = {}
    for step in ("auto", "static"):
        out = tmp_path / step
        argv = [f"out_dir={out}", f"threshold={FIRING}", "limit=3", "batch_size=2", f"engine_step={step}"]
        with caplog.at_level(logging.INFO, logger="engine.step_choice"):
            evaluate(load_config(overrides(tiny_checkpoint, toy_dir / "records.jsonl", tmp_path, *argv)))
        rows[step] = PredictionLog(out / "predictions.jsonl").rows()
    said = [r.getMessage() for r in caplog.records if r.name == "engine.step_choice"]
    assert said == [
        "engine step: eager (faster than the static step on cpu: docs/performance.md)",
        "engine step: static",
    ]
    assert len(rows["static"]) == 3 and sum(sum(r["fired"]) for r in rows["static"]) > 0
    for eager, static in zip(rows["auto"], rows["static"], strict=True):
        assert eager["fired"] == static["fired"] and eager["replies"] == static["replies"]
        assert max(abs(a - b) for a, b in zip(eager["p_response"], static["p_response"])) < 1e-5


def test_egoserve_subtype_comes_from_the_leading_tag():
    steps = [
        StepDecision(0, 0.0, 0.9, True, "</Response> [Tool Use] Use the small knife."),
        StepDecision(1, 1.0, 0.9, True, "</Response> no tag at all"),
        StepDecision(2, 2.0, 0.1, False, "</Silence>"),
        StepDecision(3, 3.0, 0.9, True, "</Response> [weather] Rain."),
    ]
    bench = load_config(["benchmark=egoserve"]).benchmark
    row = get_runner("egoserve").prediction_row(
        replace(_toy_stream(), id="u1"), StreamResult("u1", steps), bench
    )
    assert row["replies"] == [{"time": 0.0, "text": "Use the small knife.", "category": "tool_use"}]
    assert row["untagged"] == 2


def _toy_stream():
    from data_builders.records import Stream

    return Stream("s", "toy", "egoserve", "v.mp4", 0.0, 20.0, "Help me.")


@pytest.mark.slow  # two evaluations end to end (24 s loaded)
def test_egoserve_and_propermem_runs(tiny_checkpoint, toy_dir, tmp_path):
    streams = load_streams(toy_dir / "records.jsonl")[:3]
    video = lambda s: str(toy_dir / s.video)  # noqa: E731
    ego = [
        replace(
            s,
            task="egoserve",
            video=video(s),
            meta={"dataset": "holoassist"},
            targets=[replace(t, category="safety") for t in s.targets],
        )
        for s in streams
    ]
    write_jsonl(tmp_path / "ego.jsonl", ego)
    m = evaluate(
        load_config(
            overrides(
                tiny_checkpoint,
                tmp_path / "ego.jsonl",
                tmp_path,
                "benchmark=egoserve",
                f"threshold={FIRING}",
                f"out_dir={tmp_path / 'ego'}",
            )
        )
    )
    rows = PredictionLog(tmp_path / "ego" / "predictions.jsonl").rows()
    n_pred = sum(len(r["replies"]) for r in rows)
    assert sum(sum(r["fired"]) for r in rows) == n_pred + sum(r.get("untagged", 0) for r in rows) > 0
    assert m["protocol"] == "egoserve" and m["per_subtype"]["safety"]["n_gt"] == sum(
        len(s.targets) for s in ego
    )
    assert sum(v["n_pred"] for v in m["per_subtype"].values()) == n_pred

    history = [HistoryEntry(float(-100 + i), f"I left my keys on the table number {i}.") for i in range(50)]
    pm = [
        replace(s, video=video(s), history=history, targets=[Target(7.0, "Keys.", window=(6.0, 9.0))])
        for s in streams[:2]
    ] + [replace(streams[2], video=video(streams[2]), targets=[])]
    write_jsonl(tmp_path / "pm.jsonl", pm)
    cfg = load_config(
        overrides(
            tiny_checkpoint,
            tmp_path / "pm.jsonl",
            tmp_path,
            "benchmark=propermem",
            "render.history_budget_tokens=64",
            f"out_dir={tmp_path / 'pm'}",
        )
    )
    assert cfg.benchmark.steps_per_second == 0.5 and cfg.render.history_budget_tokens == 64
    m = evaluate(cfg)
    rows = PredictionLog(tmp_path / "pm" / "predictions.jsonl").rows()
    assert [len(r["p_response"]) for r in rows] == [10, 10, 10]  # 20 s at one step per 2 s
    assert {"perfect", "perfect_pos", "perfect_neg", "hit", "false_fire", "mean_fires"} <= set(m)
    assert m["mean_fires"] == sum(sum(r["fired"]) for r in rows) / 3


def test_prediction_log_drops_a_torn_last_line(tmp_path):
    log = PredictionLog(tmp_path / "p.jsonl")
    log.append({"id": "a", "replies": []})
    log.append({"id": "b", "replies": []})
    with log.path.open("a") as fh:
        fh.write('{"id": "c", "repl')
    assert log.done_ids() == {"a", "b"}
    assert log.path.read_text().count("\n") == 2
    with log.path.open("a") as fh:
        fh.write('{"id": "c", "repl\n')
    assert log.done_ids() == {"a", "b"}


@pytest.mark.slow
def test_killed_run_resumes_to_the_same_metrics(tiny_checkpoint, toy_dir, tmp_path):
    common = overrides(
        tiny_checkpoint, toy_dir / "records.jsonl", tmp_path, f"threshold={FIRING}", "max_new_tokens=8"
    )
    common += ["batch_size=1", "limit=4"]  # 4 of the 8 streams: killed after 1, the rerun does 3
    ref = tmp_path / "ref"
    evaluate(load_config([*common, f"out_dir={ref}"]), echo=False)

    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "eval.run", *common, f"out_dir={out}"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pred = out / "predictions.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and not (pred.exists() and pred.read_text().count("\n") >= 1):
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    written = pred.read_text().count("\n")
    assert 1 <= written < 4, "the run must be killed part way"
    with pred.open("a") as fh:  # what a kill in the middle of a write leaves
        fh.write('{"id": "toy-0-0000')

    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    ids = [r["id"] for r in PredictionLog(pred).rows()]
    assert sorted(ids) == sorted(s.id for s in load_streams(toy_dir / "records.jsonl")[:4])
    assert len(ids) == len(set(ids)) == 4
    assert (out / "metrics.json").read_text() == (ref / "metrics.json").read_text()
    assert json.loads(done.stdout.strip().splitlines()[-1]) == json.loads((ref / "metrics.json").read_text())


def test_the_default_evaluation_folder_tells_two_runs_final_and_best_apart(tmp_path):
    """``checkpoint=runs/a/final`` and ``runs/b/final`` evaluate into two folders (both went to
    ``runs/eval/final`` and the second refused to run); a downloaded model keeps its own name."""
    from eval.run import evaluated_name

    def name(path):
        return evaluated_name(load_config([f"checkpoint={path}"]))

    assert [name(tmp_path / r / "final") for r in ("sft_a", "sft_b")] == ["sft_a_final", "sft_b_final"]
    assert name(tmp_path / "grpo_a" / "best") == "grpo_a_best"
    assert name(tmp_path / "sft_a" / "checkpoint-40") == "sft_a_checkpoint-40"
    assert name(tmp_path / "Qwen3-VL-4B-Instruct") == "Qwen3-VL-4B-Instruct"
