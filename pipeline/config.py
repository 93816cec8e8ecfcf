"""The typed schema of every root config in ``conf/``, and the demo's own.

Every entry point merges its composed config into the schema of its root
(``infra.schema.validate``): unknown keys and mistyped values raise before any work starts.
Free-form blocks (the model architecture, the image processor) stay open dictionaries, since they are
handed to ``transformers`` as they are. :data:`SCHEMAS` lists the roots by name (a registry, each
schema's module imported when it is asked for), for ``pipeline.plan`` and the config composition
test; it sits here, at the top layer, because it names the schemas of every layer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.config import ModelRootConfig
from infra.registry import Registry
from infra.schema import bounded, store_schema


@dataclass
class DemoStageConfig:
    n_streams: int = bounded(512, ge=8)
    """Toy clips to generate (split by video into ``splits``)."""
    splits: dict[str, float] = field(default_factory=lambda: {"train": 0.75, "val": 0.125, "test": 0.125})
    seed: int = 0
    show_stream: int = bounded(0, ge=0)
    """Which toy stream the demo renders and runs step by step."""
    threshold: float = bounded(0.5, ge=0, le=1)
    """Fire when P(</Response>) at the decision position is at least this."""
    sft_overrides: list[str] = field(default_factory=lambda: ["experiment=toy_sft"])
    """Overrides of ``conf/sft.yaml`` for the SFT stage."""
    grpo_overrides: list[str] = field(default_factory=lambda: ["experiment=toy_grpo"])
    """Overrides of ``conf/grpo.yaml`` for the GRPO stage."""


@dataclass
class DemoConfig(ModelRootConfig):
    run_name: str = "demo"
    demo: DemoStageConfig = field(default_factory=DemoStageConfig)


store_schema("demo", DemoConfig)

#: The typed schema of each root config in ``conf/`` (``build.yaml`` adds the chosen source's
#: config dataclass, see ``data_builders.cli``). Getting one imports its module, which stores the
#: root's defaults for Hydra (``<root>_schema``, ``infra.schema.store_schema``).
SCHEMAS = Registry(
    "root config schema",
    {
        "demo": "pipeline.config:DemoConfig",
        "sft": "train.sft.config:SFTConfig",
        "grpo": "train.grpo.config:GRPOConfig",
        "eval": "eval.config:EvalConfig",
        "watch": "eval.watch:WatchConfig",
        "frames": "data_builders.config:FramesConfig",
        "mix": "data_builders.config:MixConfig",
        "export": "train.export:ExportConfig",
    },
)
