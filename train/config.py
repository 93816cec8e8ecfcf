"""Typed schemas under the Hydra YAML, so that a typo or a wrong type fails at once.

Every entry point merges its composed config into the schema of its root (``validate``): unknown
keys and mistyped values raise before any work starts. Free-form blocks (the model architecture,
the image processor) stay open dictionaries, since they are handed to ``transformers`` as they are.
"""

from __future__ import annotations

import importlib
import logging
import os
from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, OmegaConf

from train.render import RenderConfig


@dataclass
class ModelConfig:
    name: str = "tiny"
    """Short name used in run directories."""
    kind: str = "tiny"
    """``tiny`` (built from config) or ``pretrained`` (hub id or local path)."""
    path: str | None = None
    """Checkpoint directory or hub id; for ``tiny``, where the built checkpoint is kept."""
    random_init: bool = False
    """Build ``architecture`` with random weights instead of loading ``path`` (GPU benchmarks)."""
    init_device: str = "cpu"
    dtype: str = "float32"
    attn_implementation: str = "sdpa"
    trust_remote_code: bool = False
    """Off by default: only enable for checkpoints whose code you have read."""
    freeze_vision: bool = True
    train_merger: bool = True
    seed: int = 0
    tokenizer: dict[str, Any] = field(default_factory=dict)
    image_processor: dict[str, Any] = field(default_factory=dict)
    architecture: dict[str, Any] = field(default_factory=dict)


@dataclass
class PathsConfig:
    root_dir: str = "."
    data_dir: str = "data"
    runs_dir: str = "runs"
    cache_dir: str = ".cache"
    frame_cache_dir: str = ".cache/frames"


@dataclass
class LoggerConfig:
    name: str = "none"
    """``none`` or ``wandb``."""
    project: str = "proactive-vlm"
    entity: str | None = None
    mode: str = "disabled"
    """W&B mode: ``online``, ``offline`` or ``disabled``."""
    tags: list[str] = field(default_factory=list)


@dataclass
class DemoSettings:
    n_streams: int = 512
    """Toy clips to generate (split by video into ``splits``)."""
    splits: dict[str, float] = field(default_factory=lambda: {"train": 0.75, "val": 0.125, "test": 0.125})
    seed: int = 0
    show_stream: int = 0
    """Which toy stream the demo renders and runs step by step."""
    threshold: float = 0.5
    """Fire when P(</Response>) at the decision position is at least this."""
    sft_overrides: list[str] = field(default_factory=lambda: ["experiment=toy_sft"])
    """Overrides of ``conf/sft.yaml`` for the SFT stage."""
    grpo_overrides: list[str] = field(default_factory=list)
    """Overrides of ``conf/grpo.yaml`` for the GRPO stage."""


@dataclass
class DemoConfig:
    run_name: str = "demo"
    paths: PathsConfig = field(default_factory=PathsConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    render: RenderConfig = field(default_factory=RenderConfig)
    demo: DemoSettings = field(default_factory=DemoSettings)


def validate(cfg: DictConfig, schema: type) -> DictConfig:
    """``cfg`` merged into ``schema`` (struct mode): unknown keys and wrong types raise here."""
    base = OmegaConf.structured(schema)
    OmegaConf.set_struct(base, True)
    _open_free_form(base)
    plain = OmegaConf.to_container(cfg, resolve=True)
    plain.pop("hydra", None)
    return OmegaConf.merge(base, plain)


def _open_free_form(node: DictConfig) -> None:
    """Plain ``dict`` fields of a schema (architecture, tokenizer, ...) accept any key."""
    for key in node.keys():
        child = node._get_node(key)
        if isinstance(child, DictConfig):
            if child._metadata.object_type in (None, dict):
                OmegaConf.set_struct(child, False)
            else:
                _open_free_form(child)


def quiet_libraries() -> None:
    """Keep entry points' output to what they print themselves (no progress bars, no banners)."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    logging.getLogger("DeepSpeed").setLevel(logging.ERROR)


#: The typed schema of each root config in ``conf/`` (the composition test validates against these).
SCHEMAS: dict[str, type] = {"demo": DemoConfig}
# eval.config and train.sft_config build on the dataclasses above and add "eval" / "sft" to SCHEMAS;
# imported last, so either module can be imported first.
importlib.import_module("eval.config")
importlib.import_module("train.sft_config")
importlib.import_module("train.grpo_config")
