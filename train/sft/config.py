"""Typed schema of ``conf/sft.yaml`` (``python -m train.sft``): every key, its unit and why.

The root composes ``paths``, ``model``, ``data`` (a :class:`data_builders.mixture.MixtureConfig`:
the built mixture at ``<data.dir>/<split>/records.jsonl`` + ``stats.json``), ``logger`` and an
optional ``experiment``; the blocks below hold the stage's own knobs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.config import DataRootConfig
from infra.schema import bounded, store_schema
from train.stage_config import StageConfig


@dataclass
class SFTStageConfig(StageConfig):
    """Optimization, checkpointing and run-control knobs (the ``sft`` block)."""

    output_dir: str = "runs/sft"
    """Run directory: checkpoints, ``final/``, the resolved config and ``run_info.json``."""
    eval_split: str | None = None
    """Split for the trainer's eval loss (None: none)."""
    window_steps: int | None = bounded(None, ge=1)
    """Split long streams into training windows of at most this many steps (None: one window per
    stream). Windows keep the clip clock (``data_builders.stream_steps.step_windows``), as GRPO's do."""
    num_epochs: float = bounded(1.0, gt=0)
    max_steps: int = -1
    """Optimizer steps; -1: ``num_epochs`` over the training split."""
    per_device_batch_size: int = bounded(8, ge=1)
    gradient_accumulation_steps: int = bounded(1, ge=1)
    global_batch_size: int | None = bounded(None, ge=1)
    """Windows per optimizer step over all processes; when set, the accumulation steps are derived
    from it (``train.steps.accumulation_steps``: global / (per-device x processes)), so one config
    gives the same steps on 8 or 16 GPUs. None: ``gradient_accumulation_steps`` as given."""
    learning_rate: float = bounded(1e-5, ge=0)
    lr_scheduler: str = "cosine"
    """Any ``transformers`` scheduler name (``constant``, ``linear``, ``cosine``, ...)."""
    warmup_steps: int = bounded(0, ge=0)
    logging_steps: int = bounded(10, ge=1)
    save_steps: int = bounded(500, ge=1)
    save_total_limit: int | None = bounded(2, ge=1)
    dataloader_num_workers: int = bounded(0, ge=0)
    keep_rendered: bool = True
    """Keep rendered windows in memory after their first use (small data sets)."""


#: The focal exponent's default (the recipe's 2): the schema's, the trainer's and the loss functions'.
FOCAL_GAMMA = 2.0


@dataclass
class LossConfig:
    """The decision loss (``train.sft.losses``)."""

    gamma: float = bounded(FOCAL_GAMMA, ge=0)
    """Focal exponent on the decision tokens ``</Silence>`` / ``</Response>`` (0: plain cross-entropy)."""
    balance: str = "static"
    """Class weights: ``static`` (from the training split's stats.json), ``dynamic`` (per batch) or
    ``none``."""
    balance_power: float = bounded(1.0, ge=0)
    """Weights proportional to count ** -power (1: fully frequency-balanced)."""
    decision_weight: float = bounded(1.0, ge=0)
    text_weight: float = bounded(1.0, ge=0)


@dataclass
class SFTLoraConfig:
    """LoRA on the language model instead of full fine-tuning (``enabled: true``)."""

    enabled: bool = False
    r: int = bounded(16, ge=1)
    alpha: int = 32
    dropout: float = bounded(0.05, ge=0, le=1)
    target_modules: str = r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)"
    """Regex over module names."""
    train_merger: bool = True
    """Keep the vision merger fully trainable alongside the adapters."""
    merge_on_save: bool = True
    """Write ``final/`` with the adapters merged (a plain checkpoint the engine loads)."""


@dataclass
class SFTConfig(DataRootConfig):
    """Root of ``conf/sft.yaml``."""

    run_name: str = "sft"
    sft: SFTStageConfig = field(default_factory=SFTStageConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    lora: SFTLoraConfig = field(default_factory=SFTLoraConfig)


store_schema("sft", SFTConfig)
