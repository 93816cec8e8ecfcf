"""The typed schema of every root config in ``conf/``, and the demo's own.

Every entry point merges its composed config into the schema of its root
(``infra.schema.validate``): unknown keys and mistyped values raise before any work starts.
Free-form blocks (the model architecture, the image processor) stay open dictionaries, since they are
handed to ``transformers`` as they are. :data:`SCHEMAS` lists the roots by name, for the config
composition test; it sits here, at the top layer, because it names the schemas of every layer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from data_builders.config import FramesConfig, MixConfig
from engine.config import ModelRootConfig
from eval.config import EvalConfig
from eval.watch import WatchConfig
from infra.schema import bounded, store_schema
from train.export import ExportConfig
from train.grpo.config import GRPOConfig
from train.sft.config import SFTConfig


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
#: config dataclass, see ``data_builders.cli``).
SCHEMAS: dict[str, type] = {
    "demo": DemoConfig,
    "sft": SFTConfig,
    "grpo": GRPOConfig,
    "eval": EvalConfig,
    "watch": WatchConfig,
    "frames": FramesConfig,
    "mix": MixConfig,
    "export": ExportConfig,
}
