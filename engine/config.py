"""The blocks of every root that runs the model: the model block (``ModelConfig``; ``model_preset``
reads a ``conf/model/`` file whole), the memory plan's settings, and the paths, model, logger,
render and plan blocks every stage shares (``ModelRootConfig``; ``DataRootConfig`` adds the data mixture)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from data_builders.config import PathsConfig, RenderConfig
from data_builders.mixture import MixtureConfig
from infra.schema import CONF_DIR, bounded
from infra.tracking import LoggerConfig


@dataclass
class ModelConfig:
    name: str = "tiny"
    """Short name used in run directories."""
    kind: str = "tiny"
    """``tiny`` (built from config) or ``pretrained`` (hub id or local path)."""
    path: str | None = None
    """Checkpoint directory or hub id; for ``tiny``, where the built checkpoint is kept (null: under
    ``${paths.cache_dir}/tiny-<config hash>``)."""
    random_init: bool = False
    """Build ``architecture`` with random weights instead of loading ``path`` (GPU benchmarks)."""
    init_device: str = "cpu"
    dtype: str = "float32"
    attn_implementation: str = "sdpa"
    trust_remote_code: bool = False
    """Off by default: only enable for checkpoints whose code you have read."""
    freeze_vision: bool = True
    """Vision encoder frozen; the merger (``train_merger``) and the language model are trained."""
    train_merger: bool = True
    seed: int = 0
    tokenizer: dict[str, Any] = field(default_factory=dict)
    image_processor: dict[str, Any] = field(default_factory=dict)
    architecture: dict[str, Any] = field(default_factory=dict)


def model_preset(model: str | Path = "tiny") -> dict[str, Any]:
    """A model group file (a name under ``conf/model/`` or a YAML path) as a whole model block: every
    field, the schema's defaults where the file says nothing, without composing a root. What tests
    and benches build a model from."""
    from omegaconf import OmegaConf

    path = Path(model) if str(model).endswith((".yaml", ".yml")) else CONF_DIR / "model" / f"{model}.yaml"
    block = OmegaConf.load(path)
    block.pop("defaults", None)
    return OmegaConf.to_container(OmegaConf.merge(OmegaConf.structured(ModelConfig), block))


@dataclass
class PlanConfig:
    """The pre-flight memory check (``plan`` block of every stage): refuse at start a config whose
    peak memory per GPU (``engine.preflight.plan``) would not fit the GPU."""

    check: bool = True
    """Run the check at start on a GPU (``plan.check=false``: run anyway)."""
    longest_window_steps: int | None = bounded(None, ge=1)
    """Steps of the longest window the plan sizes activations for (null: the window length, else the
    longest clip of ``<data.dir>/<split>/stats.json``, else the 30 steps of the measured H200 step)."""


@dataclass
class ModelRootConfig:
    """The blocks of every root that runs the model (``conf/sft.yaml``, ``grpo.yaml``, ``eval.yaml``,
    ``demo.yaml``): where things live, the model, the logger and the render config, defined once."""

    paths: PathsConfig = field(default_factory=PathsConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    render: RenderConfig = field(default_factory=RenderConfig)
    """Frame size and history budget: the model group's (``model=tiny``: ``render=toy``), saved in
    every checkpoint as ``render.json``; ``eval.run`` with a checkpoint reads that back."""
    plan: PlanConfig = field(default_factory=PlanConfig)
    """The memory check each stage runs at start on a GPU (``engine.preflight``)."""


@dataclass
class DataRootConfig(ModelRootConfig):
    """:class:`ModelRootConfig` and the mixture a stage reads (``data``: ``<data.dir>/<split>``)."""

    data: MixtureConfig = field(default_factory=MixtureConfig)
