"""A retrain into the same run dir (``sft.resume=none``), then ``eval.run`` and ``eval.watch``: an
evaluation belongs to the weights it streamed (their sha256 in its ``config.yaml`` and in the watch
ledger), so new weights at the same path are evaluated afresh, never answered with the old model's
numbers and never mixed with its predictions; the old evaluation is kept under ``superseded/``."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import yaml

from data_builders.mixture import build_toy_mixture
from engine.checkpoints import weights_fingerprint
from eval.run import default_out_dir, evaluate, load_config
from eval.store import PredictionLog
from eval.watch import load_config as watch_config
from eval.watch import read_ledger, watch
from tests.conftest import by_checkpoint
from train.sft.run import compose_config, train


def sft(data: Path, out: Path, *extra: str) -> Path:
    return train(
        compose_config(
            [
                "experiment=toy_sft",
                f"paths.data_dir={data}",
                f"paths.cache_dir={data / 'cache'}",
                f"sft.output_dir={out}",
                "sft.per_device_batch_size=4",
                "sft.max_steps=2",
                "sft.save_steps=2",
                "sft.logging_steps=1",
                "sft.time_budget_s=null",
                "sft.num_threads=2",
                *extra,
            ]
        )
    )


def p_response(out: Path) -> dict[str, list[float]]:
    return {r["id"]: r["p_response"] for r in PredictionLog(out / "predictions.jsonl").rows()}


@pytest.mark.slow  # two SFT runs and their evaluations (44 s loaded)
def test_a_retrain_into_the_same_run_dir_is_evaluated_afresh_by_eval_run_and_eval_watch(
    toy_dir, tmp_path, capsys
):
    build_toy_mixture(tmp_path / "built", tmp_path / "toy", n=8, seed=0)
    records = toy_dir / "records.jsonl"
    run = tmp_path / "runs" / "sft"
    final = sft(tmp_path, run)
    common = [
        f"records={records}",
        f"paths.cache_dir={tmp_path / 'cache'}",
        "max_new_tokens=4",
        "limit=2",
        "timelines=0",
    ]
    ev = [f"checkpoint={final}", f"paths.runs_dir={tmp_path / 'runs'}", *common]
    metrics_a = evaluate(load_config(ev))
    out = default_out_dir(load_config(ev))  # the default folder of checkpoint=<run>/final
    assert out.parent == tmp_path / "runs" / "eval" / "sft_final" and out.name.startswith("p3i@")
    old = p_response(out)
    sha_a = weights_fingerprint(final)["sha256"]
    assert yaml.safe_load((out / "config.yaml").read_text())["weights"] == sha_a
    killed = tmp_path / "killed"  # what a kill mid-evaluation leaves: one of the two records
    shutil.copytree(out, killed)
    lines = (killed / "predictions.jsonl").read_text().splitlines(keepends=True)
    (killed / "predictions.jsonl").write_text(lines[0])
    watcher = watch_config([f"run_dir={run}", "once=true", "logger_from_run=false", *common])
    assert by_checkpoint(watch(watcher)) == ["p3i/checkpoint-2"]
    entry_a = by_checkpoint(read_ledger(run))["p3i/checkpoint-2"]
    assert entry_a["weights"]["sha256"] == weights_fingerprint(run / "checkpoint-2")["sha256"]

    sft(tmp_path, run, "sft.resume=none", "sft.seed=1")  # the restart the trainer's error suggests
    sha_b = weights_fingerprint(final)["sha256"]
    assert sha_b != sha_a
    capsys.readouterr()

    metrics_b = evaluate(load_config(ev))  # the same command as before, on the new weights
    assert "2 streamed, 0 reused" in capsys.readouterr().out
    new = p_response(out)
    assert set(new) == set(old) and all(new[i] != old[i] for i in old)
    assert yaml.safe_load((out / "config.yaml").read_text())["weights"] == sha_b
    assert json.loads((out / "metrics.json").read_text()) == metrics_b
    kept = out / "superseded" / sha_a[:12]  # the old evaluation, whole
    assert p_response(kept) == old and json.loads((kept / "metrics.json").read_text()) == metrics_a
    assert yaml.safe_load((kept / "config.yaml").read_text())["weights"] == sha_a

    evaluate(load_config([*ev, f"out_dir={killed}"]))  # the killed evaluation of A, resumed on B
    assert "2 streamed, 0 reused" in capsys.readouterr().out
    assert p_response(killed) == new  # restarted on B, nothing of A mixed in
    first = json.loads(lines[0])["id"]
    assert p_response(killed / "superseded" / sha_a[:12]) == {first: old[first]}

    assert by_checkpoint(watch(watcher)) == ["p3i/checkpoint-2"]  # same name, new weights: evaluated again
    entry_b = by_checkpoint(read_ledger(run))["p3i/checkpoint-2"]
    assert entry_b["weights"]["sha256"] == weights_fingerprint(run / "checkpoint-2")["sha256"]
    assert entry_b["weights"]["sha256"] != entry_a["weights"]["sha256"]
    assert entry_b["metrics"] == json.loads(
        (run / "eval" / "p3i" / "checkpoint-2" / "metrics.json").read_text()
    )
    assert [e["weights"] for e in entry_b["superseded"]] == [entry_a["weights"]]
    assert by_checkpoint(watch(watcher)) == []  # and only once
    weights = run / "checkpoint-2" / "model.safetensors"
    os.utime(weights, ns=(10**18, 10**18))  # the same bytes, rewritten or copied: no new evaluation
    assert by_checkpoint(watch(watcher)) == []
    entry = by_checkpoint(read_ledger(run))["p3i/checkpoint-2"]
    assert entry["weights"]["sha256"] == entry_b["weights"]["sha256"]
    assert entry["weights"]["files"]["model.safetensors"] == [weights.stat().st_size, 10**18]
