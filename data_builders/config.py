"""Typed schemas under the configs, so a typo or a wrong type fails at once.

``conf/build.yaml`` + ``conf/source/<name>.yaml`` -> :class:`BuildConfig` + the source's options
dataclass (see ``registry.SourceSpec``); ``conf/frames.yaml`` -> :class:`FramesConfig`;
``conf/mix.yaml`` + ``conf/data/<name>.yaml`` -> ``mixture.MixtureConfig``.

The blocks every stage shares are defined here, at the lowest layer that reads them:
:class:`PathsConfig` (``conf/paths/``) and :class:`RenderConfig` (``conf/render/``, chosen by the
model config). Merging a composed config into a schema is ``infra.schema``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from data_builders.mixture import MixtureConfig
from data_builders.sources import SOURCES
from data_builders.video import DEFAULT_MAX_PIXELS
from infra.schema import CONF_DIR, bounded, compose, store_schema


@dataclass
class PathsConfig:
    """Where data, runs and caches live (``conf/paths/default.yaml``)."""

    root_dir: str = "."
    data_dir: str = "data"
    runs_dir: str = "runs"
    cache_dir: str = ".cache"
    frame_cache_dir: str = ".cache/frames"
    """The one frame cache of every stage (the frames stage, SFT, GRPO, eval): see ``data_builders.frames``."""


@dataclass
class RenderConfig:
    """How a stream's frames and context become model input (``conf/render/*.yaml``).

    The model config picks the option (``model=tiny``: ``render=toy``; the Qwen3-VL configs:
    ``render=hd``), so training and evaluation of one model see the same frames. Training saves it
    into every checkpoint (``render.json``) and ``eval.run`` / ``eval.watch`` read it back.
    """

    max_pixels: int = bounded(DEFAULT_MAX_PIXELS, ge=1)
    """Pixel budget of one frame (height x width, aspect kept) before the processor's own resizing.
    Part of the frame-cache key."""
    video_backend: str = "decord"
    """``decord`` or ``pyav`` (``data_builders.video``)."""
    frame_format: str = "raw"
    """Frame-cache entry format (``data_builders.frame_codec.parse_frame_format``): ``raw``, ``png``,
    ``jpeg<q>`` or ``webp<q>``. Part of the frame-cache key, and of the pixels the model sees when
    lossy: training saves it in ``render.json`` and evaluation reads the same. A ``render.json``
    written before the option existed means ``raw``."""
    history_budget_tokens: int = bounded(2048, ge=0)
    """Personal history given as text: the most recent lines that fit in this many tokens."""


def model_render(model_yaml: str | Path) -> RenderConfig:
    """The render option a model config picks (its ``/render@_global_.render: <name>`` default,
    ``conf/render/<name>.yaml``), as a :class:`RenderConfig`: the frames the model trains and is
    evaluated on, for code that reads a model YAML without composing (the benches)."""
    model = yaml.safe_load(Path(model_yaml).read_text())
    picked = [d for d in model.get("defaults", []) if isinstance(d, dict) and "/render@_global_.render" in d]
    if len(picked) != 1:
        raise ValueError(
            f"{model_yaml}: no render option in its defaults (expected '/render@_global_.render')"
        )
    name = picked[0]["/render@_global_.render"]
    return RenderConfig(**yaml.safe_load((CONF_DIR / "render" / f"{name}.yaml").read_text()))


@dataclass
class BuildConfig:
    """Keys every ``python -m data_builders build`` run has (the source adds its own)."""

    annotations: str | None = None
    """The source's annotation file or folder (not used by ``toy``)."""
    videos: str | None = None
    """Root the records' video paths are relative to (``toy``: the output dir)."""
    out: str | None = None
    """Output dir (required): records.jsonl, parquet shards, stats.json, errors.jsonl. Files are written
    to a staging folder inside it and moved in at the end: a failed build leaves the previous one intact
    (a build over ``max_error_rate`` goes to ``out/failed_build/``). It must not be, or contain, the
    annotations."""
    check_videos: bool = True
    """Probe every video (header + last frames, catches truncation); off, only sources that need a
    clip's duration or fps probe theirs. Missing files are always checked: every record's video is
    looked up first (the source's pattern, else an index of the videos folder by file and folder name)."""
    max_error_rate: float = 0.01
    """Fail when more than this share (0-1) of source records could not be converted."""
    shard_size: int = 10_000
    """Records per parquet shard."""
    workers: int = 8
    """Threads probing videos."""
    video_paths: str = "relative"
    """Record video paths ``relative`` to ``out`` or ``absolute``."""


@dataclass
class FramesConfig:
    """Keys of ``python -m data_builders frames`` (``conf/frames.yaml``)."""

    records: str | None = None
    """A build or mixture-split dir, or a records file (else every split of ``data``'s mixture)."""
    steps_per_second: float = 1.0
    """Decision steps per second: the frames cached are those of the streams' steps."""
    workers: int = 4
    """Decoding processes."""
    shard: str | None = None
    """``i/n``: decode only shard ``i`` of ``n`` of the clips (``data_builders.frames.clip_shard``),
    one task of a Slurm array (``slurm/frames.sh``); null: every clip."""
    render: RenderConfig = field(default_factory=RenderConfig)
    """Frame size and video backend: the training run's, from its model group (``model=tiny``: toy,
    the Qwen3-VL models: hd), or ``render=toy|hd`` given."""
    model: dict[str, Any] = field(default_factory=dict)
    """The training run's model group (``model=qwen3_vl_4b``), as in every stage: only its render
    block is used here (the default, as in every stage, is the tiny model)."""
    paths: PathsConfig = field(default_factory=PathsConfig)
    """``paths.frame_cache_dir`` is the cache filled."""
    data: MixtureConfig | None = None
    """A mixture (``data=<name> data.dir=DIR``): every split of it is cached."""


@dataclass
class MixConfig:
    """``conf/mix.yaml``: the ``data`` group only."""

    data: MixtureConfig = field(default_factory=MixtureConfig)


store_schema("build", BuildConfig)
# frames.yaml's data is its group (null: none); each data option lists data_schema first, so the
# mixture's defaults are there in every root, frames.yaml included.
store_schema("frames", FramesConfig, keys=[f.name for f in fields(FramesConfig) if f.name != "data"])
store_schema("mix", MixConfig)
store_schema("data", MixtureConfig)

#: The source ``conf/build.yaml`` builds when the command line names none.
DEFAULT_SOURCE = "toy"


def named_source(overrides: list[str]) -> str:
    """The source a build's overrides name (its last ``source=``), else :data:`DEFAULT_SOURCE`."""
    named = [o.partition("=")[2] for o in overrides if o.partition("=")[0].lstrip("+") == "source"]
    return named[-1] if named else DEFAULT_SOURCE


def with_source_schema(overrides: list[str]) -> list[str]:
    """``overrides`` as they are, once the schema of the source they name is stored as the Hydra
    config ``source_<name>_schema`` (``conf/source/<name>.yaml`` lists it): that source's module is
    imported now, and no other. An unknown source is left to the composition to refuse."""
    name = named_source(overrides)
    if name in SOURCES:
        store_schema(f"source_{name}", SOURCES.get(name).config)
    return overrides


def compose_build(overrides: list[str]) -> Any:
    """``conf/build.yaml`` composed with ``overrides`` (as ``python -m data_builders build`` does)."""
    return compose("build", with_source_schema(list(overrides)))
