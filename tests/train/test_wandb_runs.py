"""One W&B run per training run, its evaluations beside it, offline: a tiny SFT with checkpoints at
steps 10 and 20, the watcher and an eval.run on them, then the offline run files read back."""

from __future__ import annotations

from pathlib import Path

import pytest

from data_builders.mixture import build_toy_mixture
from eval.run import evaluate
from eval.run import load_config as eval_config
from eval.watch import load_config as watch_config
from eval.watch import watch
from infra.tracking import training_run
from tests.conftest import by_checkpoint
from train.sft.run import compose_config, train

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def toy_data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("wandbdata")
    build_toy_mixture(root / "built", root / "toy", n=8, seed=0)
    return root


def test_checkpoint_evaluations_draw_curves_beside_the_training_run(
    toy_data, tmp_path, monkeypatch, offline_run
):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_DIR", raising=False)
    monkeypatch.delenv("WANDB_RUN_GROUP", raising=False)
    run = tmp_path / "sft_tiny"
    train(
        compose_config(
            [
                "experiment=toy_sft",
                "run_name=sft_tiny",
                f"paths.data_dir={toy_data}",
                f"paths.cache_dir={toy_data / 'cache'}",
                f"sft.output_dir={run}",
                "sft.per_device_batch_size=2",
                "sft.max_steps=20",
                "sft.save_steps=10",
                "sft.save_total_limit=null",
                "sft.logging_steps=5",
                "sft.num_threads=2",
                "logger=wandb",
            ]
        )
    )
    trained = training_run(run)
    assert trained["name"] == "sft_tiny" and trained["group"] == "sft_tiny"
    test = toy_data / "toy" / "test" / "records.jsonl"
    common = [f"records={test}", f"paths.cache_dir={toy_data / 'cache'}", "limit=2", "max_new_tokens=4"]
    assert by_checkpoint(watch(watch_config([f"run_dir={run}", "once=true", "timelines=1", *common]))) == [
        "p3i/checkpoint-10",
        "p3i/checkpoint-20",
    ]
    # a later eval.run of one of its checkpoints lands in the same paired run
    out = f"out_dir={tmp_path / 'eval20'}"
    cfg = eval_config([f"checkpoint={run / 'checkpoint-20'}", "logger=wandb", "threshold=0.4", out, *common])
    assert cfg.render.max_pixels == 4096  # read back from the checkpoint
    evaluate(cfg, echo=False)
    runs = {}
    for folder in sorted((run / "wandb").glob("offline-run-*")):  # one W&B folder: the run's own
        found = offline_run(folder)
        runs.setdefault(found["run"]["id"], []).append(found)
    assert set(runs) == {trained["id"], f"{trained['id']}-eval"}
    [training] = runs[trained["id"]]
    assert training["run"]["group"] == "sft_tiny"
    config = training["config"]  # the whole Hydra config, beside the Trainer's arguments
    assert config["loss"]["gamma"] == 2.0 and config["render"]["max_pixels"] == 4096
    assert config["sft"]["save_steps"] == 10 and config["data"]["name"] == "toy"
    assert any("train/loss" in row for row in training["history"])
    evals = runs[f"{trained['id']}-eval"]  # resumed at every evaluation: one id, several files
    assert {e["run"]["group"] for e in evals} == {"sft_tiny"}
    assert {e["run"]["name"] for e in evals} == {"sft_tiny-eval"}
    points = {
        row["train/global_step"]: row["eval/p3i/prs_b"]
        for e in evals
        for row in e["history"]
        if "eval/p3i/prs_b" in row
    }
    assert sorted(points) == [10, 20]  # one curve over the checkpoints' steps
