"""Typed schema of ``conf/eval.yaml`` (``python -m eval.run``): a typo or a wrong type fails at once.

    python -m eval.run checkpoint=runs/sft/checkpoint-500 benchmark=p3i data=toy split=test

The schema registers itself in ``train.config.SCHEMAS`` (which imports this module last), so the
config composition test validates ``eval.yaml`` like every other root.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field

from data_builders.mixture import MixtureConfig
from eval.memory.config import MemoryConfig
from train.config import SCHEMAS, LoggerConfig, ModelConfig, PathsConfig
from train.render import RenderConfig


@dataclass
class BenchmarkConfig:
    """One benchmark's protocol knobs (``conf/benchmark/*.yaml``)."""

    name: str = "p3i"
    """Short name used in output dirs and W&B keys."""
    protocol: str = "p3i"
    """Scoring protocol of ``eval.score`` and the runner of ``eval.runners``: p3i, egoserve, propermem."""
    steps_per_second: float = 1.0
    """Decision steps per second of video (P3I, EgoServe: 1; ProPerMem: 0.5)."""
    content: str = "label"
    """Content scorer: ``label`` scores targets that carry a structured label (the structured tasks)
    by that label and every other target with ``open_content``."""
    open_content: str = "exact"
    """Scorer of open (unlabelled) targets: exact, embedding, judge or any."""
    alpha: float = 0.05
    """PRS timing decay, 1/s."""
    tolerance: float | None = None
    """Seconds: EgoServe's matching delta (null: per dataset), ProPerMem's late tolerance (null: 2 s)."""
    dataset: str | None = None
    """EgoServe dataset (egolife, holoassist, captaincook4d); null: from each record's meta/source."""
    history_budget_tokens: int = 2048
    """Personal history given as text: the most recent lines that fit in this many tokens."""
    categories: list[str] | None = None
    """Allowed category tags of a response (EgoServe: its subtypes); null: any tag."""
    embedding_model: str | None = None
    """Sentence-embedding model folder for ``open_content=embedding`` (null: the packaged one)."""


@dataclass
class EvalConfig:
    """``python -m eval.run``: stream every record through a checkpoint, score, log."""

    checkpoint: str | None = None
    """Checkpoint dir to evaluate; null: the ``model`` group (``model=tiny``: the untrained tiny model)."""
    split: str = "test"
    """Which split of the mixture ``data`` to read: ``<data.dir>/<split>/records.jsonl``."""
    records: str | None = None
    """A records file or build dir to read instead of the mixture split."""
    video_root: str | None = None
    """Root of relative video paths (null: next to the records file)."""
    threshold: float = 0.5
    """Fire when P(</Response>) at the decision position is at least this."""
    max_new_tokens: int = 32
    """Longest response text, in tokens."""
    frame_window: int | None = None
    """Keep only the last N steps' frames in the KV cache (null: all)."""
    batch_size: int = 8
    """Streams run in lock step by the engine."""
    limit: int | None = None
    """Evaluate only the first N records."""
    blank_frames: bool = False
    """Replace every frame by a uniform grey one: the control for a model that reads the timestamps
    and its own past turns but ignores the video."""
    out_dir: str | None = None
    """Where predictions.jsonl and metrics.json go (null: ``<runs>/eval/<checkpoint>/<benchmark>[_memory]``;
    a ``-m`` sweep puts each threshold in ``threshold_<t>/`` below it)."""
    step: int | None = None
    """The checkpoint's training step, the x axis in W&B (null: ``trainer_state.json``, else 0)."""
    sweep_mode: str = "exact"
    """How a threshold sweep reuses other points' passes: ``exact`` reuses a record's recorded
    probabilities only where they give the same decisions at every step (so the whole trajectory is
    the one this threshold would produce) and re-runs the rest; ``reuse`` re-thresholds the
    lowest-threshold pass for every record (approximate, see eval.sweep)."""
    timelines: int = 4
    """Records whose timeline (fires vs target windows) is plotted and logged."""
    paths: PathsConfig = field(default_factory=PathsConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    data: MixtureConfig = field(default_factory=MixtureConfig)
    benchmark: BenchmarkConfig = field(default_factory=BenchmarkConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    render: RenderConfig = field(default_factory=RenderConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    """Long-horizon memory (``memory=on|off``, ``conf/memory/``; see ``eval.memory``)."""


SCHEMAS["eval"] = EvalConfig
importlib.import_module("eval.watch")  # registers SCHEMAS["watch"] (its WatchConfig extends EvalConfig)
