"""Typed schemas of the model, the logger and ``conf/eval.yaml`` (``python -m eval.run``): a typo or a
wrong type fails at once.

    python -m eval.run checkpoint=runs/sft/checkpoint-500 benchmark=p3i data=toy split=test

:class:`ModelConfig` and :class:`LoggerConfig` are shared by every stage (the training stages build
on this module); the render and paths blocks come from ``data_builders.config``.
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from data_builders.config import PathsConfig, RenderConfig
from data_builders.mixture import MixtureConfig
from data_builders.splits import split_records
from eval.engine.memory.config import MemoryConfig
from infra.schema import CONF_DIR, bounded, store_schema
from rewards.prs import DEFAULT_ALPHA


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
class LoggerConfig:
    name: str = "none"
    """``none`` or ``wandb``."""
    project: str = "proactive-vlm"
    entity: str | None = None
    mode: str = "disabled"
    """W&B mode: ``online``, ``offline`` or ``disabled``."""
    tags: list[str] = field(default_factory=list)


def quiet_libraries() -> None:
    """Keep entry points' output to what they print themselves (no progress bars, no banners)."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    logging.getLogger("DeepSpeed").setLevel(logging.ERROR)
    if "deepspeed" not in sys.modules and "DS_ACCELERATOR" not in os.environ:
        import torch

        if not torch.cuda.is_available():  # DeepSpeed prints its CPU fallback on stdout, after our JSON
            os.environ["DS_ACCELERATOR"] = "cpu"


@dataclass
class PlanSettings:
    """The pre-flight memory check (``plan`` block of every stage): refuse at start a config whose
    peak memory per GPU (``eval.preflight.plan``) would not fit the GPU."""

    check: bool = True
    """Run the check at start on a GPU (``plan.check=false``: run anyway)."""
    longest_window_steps: int | None = bounded(None, ge=1)
    """Steps of the longest window the plan sizes activations for (null: the window length, else the
    longest clip of ``<data.dir>/<split>/stats.json``, else the 30 steps of the measured H200 step)."""


@dataclass
class ModelBlocks:
    """The blocks of every root that runs the model (``conf/sft.yaml``, ``grpo.yaml``, ``eval.yaml``,
    ``demo.yaml``): where things live, the model, the logger and the render config, defined once."""

    paths: PathsConfig = field(default_factory=PathsConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    render: RenderConfig = field(default_factory=RenderConfig)
    """Frame size and history budget: the model group's (``model=tiny``: ``render=toy``), saved in
    every checkpoint as ``render.json``; ``eval.run`` with a checkpoint reads that back."""
    plan: PlanSettings = field(default_factory=PlanSettings)
    """The memory check each stage runs at start on a GPU (``eval.preflight``)."""


@dataclass
class DataBlocks(ModelBlocks):
    """:class:`ModelBlocks` and the mixture a stage reads (``data``: ``<data.dir>/<split>``)."""

    data: MixtureConfig = field(default_factory=MixtureConfig)


def _knob(default: Any, help: str | None, *, flag: str | None = None, **bounds: float) -> Any:
    """A scoring field: its default and bounds (as :func:`infra.schema.bounded`), and the
    ``python -m eval.score`` flag derived from it (``--<name>`` unless ``flag`` says otherwise)."""
    return field(default=default, metadata={**bounded(None, **bounds).metadata, "help": help, "flag": flag})


@dataclass
class ScoringConfig:
    """How predictions are scored: the content scorer and the protocol's constants. One definition for
    a benchmark config's scoring keys (``conf/benchmark/*.yaml``), ``eval.scoring.ScoreSettings`` and
    the flags of ``python -m eval.score`` (derived from these fields, ``eval.scoring.options.add_scoring_flags``)."""

    content: str = _knob("label", None)
    """Content scorer: ``exact``, ``label`` (targets that carry a structured label, the structured tasks,
    by that label, every other target by ``open_content``), ``embedding``, ``judge`` or ``any``."""
    open_content: str = _knob("exact", "scorer for targets without a label", flag="--label-fallback")
    """Scorer of open (unlabelled) targets under ``content=label``: exact, embedding, judge or any
    (``eval.score --label-fallback``)."""
    alpha: float = _knob(DEFAULT_ALPHA, "PRS timing decay (1/s)", ge=0)
    """PRS timing decay, 1/s."""
    tolerance: float | None = _knob(None, "seconds (EgoServe delta, ProPerMem tol)", ge=0)
    """Seconds: EgoServe's matching delta (null: per dataset), ProPerMem's late tolerance (null: 2 s)."""
    dataset: str | None = _knob(None, None)
    """EgoServe dataset (egolife, holoassist, captaincook4d); null: from each record's meta/source."""
    embedding_model: str | None = _knob(None, "sentence-embedding model folder")
    """Sentence-embedding model folder for ``open_content=embedding`` (null: the packaged one)."""
    judge_backend: str = _knob("http", "http (OpenAI-compatible) or local")
    """LLM judge of ``content``/``open_content=judge``: ``http`` (OpenAI-compatible) or ``local``."""
    judge_url: str | None = _knob(None, "base URL of the judge endpoint, e.g. http://host/v1")
    """Base URL of the judge endpoint, e.g. ``http://127.0.0.1:8000/v1`` (required by the http judge)."""
    judge_model: str | None = _knob(None, "judge model name (http) or folder (local)")
    """Judge model name (http) or folder (local); required when the judge is used."""
    judge_key_env: str = _knob("JUDGE_API_KEY", "env var holding the API key")
    """Environment variable holding the judge's API key (the key itself is never in a config)."""
    judge_cache: str | None = _knob(None, "sqlite cache file of judge answers")
    """sqlite cache of judge answers (null: ``~/.cache/proactive_vlm/judge.sqlite``)."""
    judge_timeout: float = _knob(60.0, "seconds: total deadline of one judge request", gt=0)
    """Seconds: the total deadline of one judge request (connect, send and the whole reply)."""


@dataclass
class BenchmarkConfig(ScoringConfig):
    """One benchmark's protocol knobs (``conf/benchmark/*.yaml``): its scoring (:class:`ScoringConfig`)
    and how it is run."""

    name: str = "p3i"
    """Short name used in output dirs and W&B keys."""
    protocol: str = "p3i"
    """Scoring protocol of ``eval.score`` and the runner of ``eval.runners``: p3i, egoserve, propermem,
    ovo, streamingbench_proactive, proactivevideoqa, estp."""
    protocol_mode: str = "streaming"
    """``streaming``: the question at its ask time, the model's own silence/response decisions are its
    answers; ``official`` (the public benchmarks that poll: ovo, streamingbench_proactive): the
    official harness's protocol (docs/protocols.md). ``metrics.json`` records which."""
    model_key: str = "proactive_vlm"
    """The model's name in a public benchmark's official prediction file or folder (``eval.run`` writes
    it; OVO-Bench: ``results/<model_key>/``)."""
    steps_per_second: float = bounded(1.0, gt=0)
    """Decision steps per second of video (P3I, EgoServe: 1; ProPerMem: 0.5)."""
    categories: list[str] | None = None
    """Allowed category tags of a response (EgoServe: its subtypes); null: any tag."""
    question_time: str = "clip_start"
    """ESTP-Bench: when a single question (the release gives it no time) is asked: ``clip_start``
    (the clip's first step; the benchmark's evaluation harness ships only with the data) or
    ``before_first_answer`` (the rule of EyeWO's released loader, ``data/estp/livechat.py``: a time
    drawn uniformly from the clip start to one step before the midpoint of the qa's first answer,
    seeded by the qa's name, so a run repeats). Written as the user turn of the prediction file."""
    reply_clock: str = "frames_seen"
    """ProactiveVideoQA: the time a reply is written at in ``pred.jsonl``: ``frames_seen`` (the
    benchmark's released inference, MMDuet2's ``proactive_eval/inference.py``: the seconds of video
    seen, one step after the time of the frame the reply follows) or ``frame`` (that frame's time)."""


@dataclass
class EvalConfig(DataBlocks):
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
    batch_size: int = bounded(8, ge=1)
    """Streams run in lock step by the engine."""
    limit: int | None = bounded(None, ge=1)
    """Evaluate only the first N records."""
    blank_frames: bool = False
    """Replace every frame by a uniform grey one: the control for a model that reads the timestamps
    and its own past turns but ignores the video."""
    out_dir: str | None = None
    """Where predictions.jsonl and metrics.json go (null: ``<runs>/eval/<checkpoint>/<benchmark>[_memory]``,
    the checkpoint named ``<run>_final``, ``<run>_best`` or ``<run>_checkpoint-N`` for a run's folders;
    a ``-m`` sweep puts each threshold in ``threshold_<t>/`` below it)."""
    step: int | None = bounded(None, ge=0)
    """The checkpoint's training step, the x axis in W&B (null: ``trainer_state.json``, else 0)."""
    sweep_mode: str = "exact"
    """How a threshold sweep reuses other points' passes: ``exact`` reuses a record's recorded
    probabilities only where they give the same decisions at every step (so the whole trajectory is
    the one this threshold would produce) and re-runs the rest; ``reuse`` re-thresholds the
    lowest-threshold pass for every record (approximate, see eval.sweep)."""
    timelines: int = bounded(4, ge=0)
    """Records whose timeline (fires vs target windows) is plotted and logged."""
    view: bool = True
    """Write ``<out>/view.html`` (``eval.view``) and log its rows as a W&B Table."""
    benchmark: BenchmarkConfig = field(default_factory=BenchmarkConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    """Long-horizon memory (``memory=on|off``, ``conf/memory/``; see ``eval.engine.memory``)."""


store_schema("eval", EvalConfig)


def records_path(cfg: Any) -> Path:
    """The records an ``eval.run`` config reads: ``records``, else the split ``data.dir/<split>`` (its
    ``records.jsonl``, else its parquet shards)."""
    if cfg.records is not None:
        return Path(cfg.records)
    if cfg.data.dir is None:
        raise ValueError("give records=PATH or a data mixture with data.dir set")
    return split_records(Path(cfg.data.dir) / cfg.split)
