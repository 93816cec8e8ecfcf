"""Typed schemas under the data-builder configs, so a typo or a wrong type fails at once.

``conf/build.yaml`` + ``conf/source/<name>.yaml`` -> :class:`BuildConfig` + the source's options
dataclass (see ``registry.register_source``); ``conf/frames.yaml`` -> :class:`FramesConfig`;
``conf/mix.yaml`` + ``conf/data/<name>.yaml`` -> ``mixture.MixtureConfig``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from omegaconf import DictConfig, OmegaConf

from data_builders.video import DEFAULT_MAX_PIXELS


@dataclass
class BuildConfig:
    """Keys every ``python -m data_builders build`` run has (the source adds its own)."""

    annotations: str | None = None
    """The source's annotation file or folder (not used by ``toy``)."""
    videos: str | None = None
    """Root the records' video paths are relative to (``toy``: the output dir)."""
    out: str | None = None
    """Output dir: records.jsonl, parquet shards, stats.json, errors.jsonl."""
    check_videos: bool = True
    """Probe every video (header + last frames, catches truncation); off, only sources that need a
    clip's duration or fps probe theirs. Missing files are always checked."""
    max_error_rate: float = 0.01
    """Fail when more than this share of source records could not be converted."""
    shard_size: int = 10_000
    """Records per parquet shard."""
    workers: int = 8
    """Threads probing videos."""
    video_paths: str = "relative"
    """Record video paths ``relative`` to ``out`` or ``absolute``."""


@dataclass
class FramesConfig:
    """Keys of ``python -m data_builders frames``."""

    records: str | None = None
    """A build or mixture-split dir, or a records file (else every split of ``data``'s mixture)."""
    fps: float = 1.0
    """Decision steps per second (frames per second cached)."""
    cache: str | None = None
    """Cache root (null: ``<records dir>/frame_cache``)."""
    max_pixels: int = DEFAULT_MAX_PIXELS
    """Pixel budget per frame (aspect kept)."""
    backend: str = "decord"
    """``decord`` or ``pyav``."""
    workers: int = 4
    """Decoding processes."""


def typed(schema: type, values: DictConfig | dict[str, Any], what: str) -> Any:
    """``values`` checked against the dataclass ``schema`` and returned as an instance of it.
    Unknown keys and wrong types raise ``ValueError`` naming ``what`` and the key."""
    try:
        merged = OmegaConf.merge(OmegaConf.structured(schema), values)
        return OmegaConf.to_object(merged)
    except Exception as exc:  # omegaconf raises several error types; normalize them
        known = ", ".join(f.name for f in fields(schema))
        raise ValueError(f"bad {what} config: {exc}\nknown keys: {known}") from None
