"""The published P3I-Assistant recipe as configs: ``experiment=p3i_4b_sft`` and ``experiment=p3i_4b_grpo``
resolve from the command line with the paper's settings, and their batch arithmetic gives the
published step counts (418 SFT steps on 13,368 samples, 143 GRPO updates over 863 windows) on 8 and on
16 GPUs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from train.steps import accumulation_steps, grpo_updates, sft_steps

ROOT = Path(__file__).resolve().parents[2]
SFT_SAMPLES, RL_WINDOWS = 12_000 + 1_368, 863


def resolved(module: str, *overrides: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", module, *overrides, "--cfg", "job", "--resolve"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if k != "WANDB_MODE"},  # W&B's offline notice goes to stdout
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return yaml.safe_load(out.stdout)


def test_sft_recipe_resolves_and_gives_418_steps_on_8_and_16_gpus():
    cfg = resolved("train.sft", "experiment=p3i_4b_sft")
    model, train, loss = cfg["model"], cfg["sft"], cfg["loss"]
    assert (model["name"], model["path"]) == ("qwen3_vl_4b", "Qwen/Qwen3-VL-4B-Instruct")
    assert model["freeze_vision"] and model["train_merger"]
    assert cfg["render"]["max_pixels"] == 448 * 448  # render=hd, picked by the model
    assert cfg["data"]["name"] == "mix_p3i"
    assert sum(s["count"] for s in cfg["data"]["sources"].values()) == SFT_SAMPLES
    assert (train["learning_rate"], train["num_epochs"], train["max_steps"]) == (1e-5, 1.0, -1)
    assert (loss["gamma"], loss["balance"], loss["balance_power"]) == (2.0, "static", 1.0)
    assert train["gradient_checkpointing"] and train["window_steps"] is None  # one window per sample
    for gpus in (8, 16):
        acc = accumulation_steps(train["global_batch_size"], train["per_device_batch_size"], gpus)
        steps = sft_steps(SFT_SAMPLES, train["per_device_batch_size"], gpus, acc, train["num_epochs"])
        print(
            f"p3i_4b_sft on {gpus} GPUs: {SFT_SAMPLES} samples, {train['per_device_batch_size']} x {gpus} x {acc} "
            f"= {train['global_batch_size']} per step -> {steps} steps"
        )
        assert steps == 418
    with pytest.raises(ValueError, match="not a multiple"):
        accumulation_steps(train["global_batch_size"], 1, 12)  # 12 GPUs cannot make 32


def test_grpo_recipe_resolves_and_gives_143_updates_over_863_windows():
    cfg = resolved("train.grpo", "experiment=p3i_4b_grpo")
    g, reward = cfg["grpo"], cfg["reward"]
    assert cfg["model"]["name"] == "qwen3_vl_4b" and cfg["render"]["max_pixels"] == 448 * 448
    assert cfg["init"].endswith("runs/p3i_4b_sft/final")  # the SFT recipe's final checkpoint
    assert (g["learning_rate"], g["num_generations"], g["beta"]) == (5e-7, 4, 0.0)
    assert g["gradient_checkpointing"] and g["bf16"] == "auto"
    assert reward["prs"]["variant"] == "b" and reward["reward_weights"]["redundancy"] == 1.0
    assert reward["redundancy"]["penalty"] == 0.2
    assert reward["redundancy"]["tasks"] == ["accident_warning", "event_intervention"]
    updates = grpo_updates(RL_WINDOWS, g["windows_per_step"])
    print(
        f"p3i_4b_grpo: {RL_WINDOWS} windows // {g['windows_per_step']} per update = {updates} updates "
        f"x {g['num_generations']} rollouts"
    )
    assert updates == g["max_steps"] == 143


def test_global_batch_size_sets_the_trainers_accumulation(tmp_path):
    from train.sft.run import compose_config
    from train.sft.trainer import training_arguments

    cfg = compose_config(
        ["sft.global_batch_size=8", "sft.per_device_batch_size=2", f"sft.output_dir={tmp_path}"]
    )
    assert training_arguments(cfg, []).gradient_accumulation_steps == 4  # one process: 8 / 2
    cfg = compose_config(["sft.gradient_accumulation_steps=3", f"sft.output_dir={tmp_path}"])
    assert training_arguments(cfg, []).gradient_accumulation_steps == 3  # unset: as given
