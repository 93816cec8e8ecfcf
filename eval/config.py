"""Typed schemas of the model, the logger and ``conf/eval.yaml`` (``python -m eval.run``): a typo or a
wrong type fails at once.

    python -m eval.run checkpoint=runs/sft/checkpoint-500 benchmark=p3i data=toy split=test

:class:`ModelConfig` and :class:`LoggerConfig` are shared by every stage (the training stages build
on this module); the render and paths blocks come from ``data_builders.config``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.config import BenchmarkConfig
from data_builders.splits import split_records
from engine.config import DataRootConfig
from engine.memory.config import MemoryConfig
from infra.schema import bounded, store_schema


@dataclass
class EvalConfig(DataRootConfig):
    """``python -m eval.run``: stream every record through a checkpoint, score, log."""

    checkpoint: str | None = None
    """Checkpoint dir to evaluate; null: the ``model`` group (``model=tiny``: the untrained tiny model)."""
    split: str = "test"
    """Which split of the mixture ``data`` to read: ``<data.dir>/<split>/records.jsonl``."""
    records: str | None = None
    """A records file or build dir to read instead of the mixture split."""
    video_root: str | None = None
    """Root of relative video paths (null: next to the records file)."""
    threshold: float = bounded(0.5, ge=0, le=1)
    """Fire when P(</Response>) at the decision position is at least this."""
    max_new_tokens: int = bounded(32, ge=1)
    """Longest response text, in tokens."""
    frame_window: int | None = bounded(None, ge=1)
    """Keep only the last N steps' frames in the KV cache (null: all)."""
    compile: bool = False
    """Run the language model's forward through ``torch.compile``: faster steps once its graphs are
    built (four, on first use in the process: minutes for a 4B model), for long evaluations."""
    engine_step: str = "auto"
    """The engine's step (``EngineConfig.step``): ``auto`` (the compiled static step where it applies
    and the device gains from it, else eager: on CPU eager, on a GPU static; with probes eager;
    ``engine.step_choice``, the choice logged once), ``eager`` (a growing cache), or ``static`` (a
    fixed-capacity cache and fixed-shape steps, compiled with ``compile=true`` as one graph each,
    ``engine.static_step``; tested on CPU against the naive re-run, not yet measured on a GPU)."""
    batch_size: int = bounded(8, ge=1)
    """Streams run in lock step by the engine."""
    limit: int | None = bounded(None, ge=1)
    """Evaluate only the first N records."""
    blank_frames: bool = False
    """Replace every frame by a uniform grey one: the control for a model that reads the timestamps
    and its own past turns but ignores the video."""
    out_dir: str | None = None
    """Where predictions.jsonl and metrics.json go (null: ``<runs>/eval/<checkpoint>/<benchmark>[_memory]``
    for the default config, the checkpoint named ``<run>_final``, ``<run>_best`` or ``<run>_checkpoint-N``
    for a run's folders; another config beside it in ``<benchmark>@<label>``: ``p3i@threshold-0.05``,
    ``p3i@blank_frames-true``, or the config's sha256[:12] for a path or a long label
    (``eval.run.out_label``); a ``-m`` sweep puts each threshold in ``threshold_<t>/`` below one such
    folder). An explicit ``out_dir`` holding an evaluation of another config is refused."""
    step: int | None = bounded(None, ge=0)
    """The checkpoint's training step, the x axis in W&B (null: ``trainer_state.json``, else 0)."""
    sweep_mode: str = "exact"
    """How a threshold sweep reuses other points' passes: ``exact`` reuses a record's recorded
    probabilities only where they give the same decisions at every step (so the whole trajectory is
    the one this threshold would produce) and re-runs the rest; ``reuse`` re-thresholds the
    lowest-threshold pass for every record (approximate, see eval.threshold_sweep)."""
    timelines: int = bounded(4, ge=0)
    """Records whose timeline (fires vs target windows) is plotted and logged."""
    view: bool = True
    """Write ``<out>/view.html`` (``eval.app.view``) and log its rows as a W&B Table."""
    benchmark: BenchmarkConfig = field(default_factory=BenchmarkConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    """Long-horizon memory (``memory=on|off``, ``conf/memory/``; see ``engine.memory``)."""


store_schema("eval", EvalConfig)


def records_path(cfg: Any) -> Path:
    """The records an ``eval.run`` config reads: ``records``, else the split ``data.dir/<split>`` (its
    ``records.jsonl``, else its parquet shards)."""
    if cfg.records is not None:
        return Path(cfg.records)
    if cfg.data.dir is None:
        raise ValueError("give records=PATH or a data mixture with data.dir set")
    return split_records(Path(cfg.data.dir) / cfg.split)
