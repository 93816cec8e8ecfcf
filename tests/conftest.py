"""Shared fixtures: the tiny Qwen3-VL (built once per session) and a small toy data set."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]


def tiny_model_config() -> dict:
    return yaml.safe_load((ROOT / "conf" / "model" / "tiny.yaml").read_text())


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory) -> Path:
    from eval.model import build_tiny_checkpoint

    return build_tiny_checkpoint(tiny_model_config(), tmp_path_factory.mktemp("tiny") / "ckpt")


@pytest.fixture(scope="session")
def tiny_model_and_processor(tiny_checkpoint):
    from eval.model import load_model_and_processor

    cfg = tiny_model_config() | {"path": str(tiny_checkpoint)}
    model, processor = load_model_and_processor(cfg)
    model.eval()
    return model, processor


@pytest.fixture(scope="session")
def toy_dir(tmp_path_factory) -> Path:
    from data_builders.records import write_jsonl
    from data_builders.synthetic.toy import generate_toy

    out = tmp_path_factory.mktemp("toy")
    write_jsonl(out / "records.jsonl", generate_toy(out, n=8, seed=0))
    return out
