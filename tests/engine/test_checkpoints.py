"""One render config: the model picks it, training saves it into every checkpoint, evaluation reads it back."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from data_builders.config import RenderConfig
from engine.checkpoints import (
    COMPLETE_MARKER,
    model_dir,
    render_overrides,
    saved_render,
    write_render,
)
from eval.run import load_config
from train.grpo.run import compose_config as grpo_config
from train.sft.run import compose_config as sft_config

ROOT = Path(__file__).resolve().parents[2]
HD = {
    "max_pixels": 200704,
    "video_backend": "decord",
    "history_budget_tokens": 2048,
    "frame_format": "jpeg90",
}


def _job(module: str, *overrides: str) -> tuple[dict, str]:
    """``python -m <module> <overrides> --cfg job``: the composed config and stderr."""
    env = {k: v for k, v in os.environ.items() if k != "WANDB_MODE"}  # deepspeed prints a line for it
    out = subprocess.run(
        [sys.executable, "-m", module, *overrides, "--cfg", "job"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return yaml.safe_load(out.stdout), out.stderr


def _render(cfg) -> dict:
    return OmegaConf.to_container(cfg.render, resolve=True)


def test_a_4b_run_trains_and_evaluates_at_one_frame_budget(tmp_path, caplog):
    """Composed in this process as each entry point composes (its ``compose_config`` /
    ``load_config``: the same ``render_overrides``), and one command line through ``--cfg job``."""
    sft = _render(sft_config(["model=qwen3_vl_4b"]))
    assert sft == _render(grpo_config(["model=qwen3_vl_4b"])) == HD  # 448 x 448, not the toy 64 x 64
    final = tmp_path / "sft_4b" / "final"
    write_render(final, RenderConfig(**sft))  # what train.sft writes next to the weights
    assert _render(load_config([f"checkpoint={final}"])) == sft
    improved, _ = _job("train.grpo", f"init={final}")  # the README's command: model group tiny (toy)
    assert improved["render"] == sft
    assert load_config([]).render.max_pixels == 4096  # no checkpoint: the model group's (tiny) render
    with caplog.at_level(logging.WARNING, logger="engine.checkpoints"):
        explicit = load_config([f"checkpoint={final}", "render=toy"])
    assert explicit.render.max_pixels == 4096 and "render the model was trained with" in caplog.text


def test_render_is_read_from_the_checkpoint_or_its_run(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoint-4").mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump({"render": HD, "sft": {"seed": 0}}))
    assert saved_render(run) == saved_render(run / "checkpoint-4") == HD  # from the run's config.yaml
    write_render(run / "checkpoint-4", RenderConfig(max_pixels=4096))
    assert saved_render(run / "checkpoint-4")["max_pixels"] == 4096  # its own render.json wins
    assert saved_render(tmp_path / "elsewhere") is None
    cfg = load_config([f"checkpoint={run / 'checkpoint-4'}", "model=qwen3_vl_4b"])
    assert cfg.render.max_pixels == 4096  # the checkpoint's, over the model group's hd
    sweep = ["checkpoint=a,b"]
    assert render_overrides(sweep) == sweep  # a sweep is left alone (each run warns if it differs)


def test_model_dir_finds_the_weights_of_a_run(tmp_path):
    run = tmp_path / "run"
    for name in ("checkpoint-2", "checkpoint-10"):
        (run / name).mkdir(parents=True)
        (run / name / COMPLETE_MARKER).write_text("")
    assert model_dir(run) == run / "checkpoint-10"
    (run / "final").mkdir()
    (run / "final" / "config.json").write_text("{}")
    assert model_dir(run) == run / "final" and model_dir(run / "final") == run / "final"
    with pytest.raises(FileNotFoundError, match="does not exist"):
        model_dir(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="holds no model"):
        model_dir(run / "checkpoint-2")
