"""Hydra entry points of ``python -m data_builders {build,mix,frames}`` (see ``__main__``).

``python -m data_builders build source=ucf_crime annotations=/data/ucf/Temporal_Anomaly_Annotation_for_Testing_Videos.txt videos=/data/ucf/videos out=/data/built/ucf_crime``

Hydra writes nothing here (no outputs dir, no logs): the run dir is the cwd and logging is left to
us, so two identical runs produce identical files and nothing lands in the cwd.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from data_builders.build import BuildFailed, build_source
from data_builders.config import BuildConfig, FramesConfig, MixConfig
from data_builders.mixture import build_mixture
from data_builders.sources import get_source
from infra.files import FolderWriteError, OutputLock, OutputLocked
from infra.schema import CONF_DIR, typed

#: The repo's conf/ dir (absolute: Hydra resolves relative paths against the module under ``-m``).
CONF = str(CONF_DIR)


def _logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s", stream=sys.stderr, force=True)


def split_build_config(cfg: DictConfig, source: str) -> tuple[BuildConfig, object]:
    """The common keys as :class:`BuildConfig` and the rest as the source's config dataclass."""
    plain = OmegaConf.to_container(cfg, resolve=True)
    plain.pop("hydra", None)
    common = {f.name for f in dataclasses.fields(BuildConfig)}
    base = typed(BuildConfig, {k: v for k, v in plain.items() if k in common}, "build")
    options = typed(
        get_source(source).config, {k: v for k, v in plain.items() if k not in common}, f"source={source}"
    )
    return base, options


def run_build(cfg: DictConfig, source: str) -> int:
    """Build one source from a composed config; returns the process exit code (0 built, 1 the build
    failed, 2 the configuration is unusable), the reason on stderr."""
    try:
        base, options = split_build_config(cfg, source)
    except ValueError as exc:
        print(f"build config error: {exc}", file=sys.stderr)
        return 2
    if not base.out:
        print("build config error: out=DIR is required", file=sys.stderr)
        return 2
    try:
        report = _build_locked(source, base, options)
    except OutputLocked as exc:
        print(f"build failed: {exc}", file=sys.stderr)
        return 1
    except BuildFailed as exc:
        print(f"build failed: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        if not FolderWriteError.refused(exc, base.out):
            raise
        kept = f"the previous build in {base.out} is kept as it was"
        print(f"build failed: {FolderWriteError(base.out, exc, kept)}", file=sys.stderr)
        return 2
    print(
        json.dumps(
            {
                "source": ", ".join(sorted({r.source for r in report.records})) or source,
                "builder": source,
                "records": len(report.records),
                "errors": len(report.errors),
                "error_rate": round(report.error_rate, 6),
                "conversion": report.counts,
                "out": str(report.out),
            }
        )
    )
    return 0


def _build_locked(source: str, base: BuildConfig, options: object):
    """:func:`build_source` holding ``base.out``'s output lock."""
    lock = OutputLock(base.out, f"data_builders build source={source}").acquire()
    try:
        return build_source(
            source,
            base.out,
            annotations=base.annotations,
            videos=base.videos,
            options=dataclasses.asdict(options),
            check_videos=base.check_videos,
            max_error_rate=base.max_error_rate,
            shard_size=base.shard_size,
            workers=base.workers,
            video_paths=base.video_paths,
        )
    finally:
        lock.release()


@hydra.main(config_path=CONF, config_name="build", version_base=None)
def build_main(cfg: DictConfig) -> None:
    """``python -m data_builders build ... -m`` (or with another Hydra flag): Hydra composed the config."""
    build_command(cfg)


def build_command(cfg: DictConfig, _checked: object = None) -> None:
    """``python -m data_builders build source=NAME annotations=PATH videos=DIR out=DIR [keys]``: the
    composed config typed once, as the build's keys and the source's (:func:`split_build_config`)."""
    _logging()
    code = run_build(cfg, HydraConfig.get().runtime.choices["source"])
    if code:
        sys.exit(code)


@hydra.main(config_path=CONF, config_name="mix", version_base=None)
def mix_main(cfg: DictConfig) -> None:
    """``python -m data_builders mix ... -m`` (or with another Hydra flag): Hydra composed the config."""
    mix(typed(MixConfig, _plain(cfg), "mix"))


def _plain(cfg: DictConfig) -> dict:
    plain = OmegaConf.to_container(cfg, resolve=True)
    plain.pop("hydra", None)
    return plain


def mix_command(cfg: DictConfig, _checked: object = None) -> None:
    """``python -m data_builders mix data=mix_p3i data.root=DIR data.dir=DIR``: the config composed
    and validated once (``infra.entry.run_command``)."""
    mix(OmegaConf.to_object(cfg))


def mix(config: MixConfig) -> None:
    """Sample and split the mixture ``config.data``; its summary on stdout."""
    _logging()
    mixture = config.data
    try:
        summary = build_mixture(mixture)  # holds data.dir's output lock, as a build holds its out
    except (BuildFailed, OutputLocked) as exc:  # a missing source is the user's to fix: exit 2
        print(f"mixture failed: {exc}", file=sys.stderr)
        sys.exit(1 if isinstance(exc, OutputLocked) else 2)
    except OSError as exc:  # a read-only or full data.dir: the mixture there is kept whole
        if not mixture.dir or not FolderWriteError.refused(exc, mixture.dir):
            raise
        kept = f"the mixture in {mixture.dir} is kept as it was"
        print(f"mixture failed: {FolderWriteError(mixture.dir, exc, kept)}", file=sys.stderr)
        sys.exit(2)
    print(json.dumps(summary, sort_keys=True))


@hydra.main(config_path=CONF, config_name="frames", version_base=None)
def frames_main(cfg: DictConfig) -> None:
    """``python -m data_builders frames ... -m`` (or with another Hydra flag): Hydra composed the config."""
    frames(typed(FramesConfig, _plain(cfg), "frames"))


def frames_command(cfg: DictConfig, _checked: object = None) -> None:
    """``python -m data_builders frames data=mix_p3i data.dir=DIR`` or ``... frames records=DIR``: the
    config composed and validated once (``infra.entry.run_command``)."""
    frames(OmegaConf.to_object(cfg))


def frames(c: FramesConfig) -> None:
    """Fill the frame cache for ``c.records`` or every split of ``c.data``; a summary on stdout."""
    from data_builders.frame_cache import FrameCacheError
    from data_builders.frames import cache_frames

    _logging()
    if c.records:
        targets = [c.records]
    elif c.data:
        if not c.data.dir:
            raise ValueError("data.dir=DIR (the mixture's output dir) is required")
        targets = [str(Path(c.data.dir) / split) for split in c.data.splits]
    else:
        raise ValueError("give records=PATH (a build dir or records file) or data=<mixture> data.dir=DIR")
    summaries = []
    try:
        for target in targets:
            summaries.append(
                cache_frames(
                    target,
                    c.paths.frame_cache_dir,
                    render=c.render,
                    steps_per_second=c.steps_per_second,
                    workers=c.workers,
                    shard=c.shard,
                )
            )
    except FrameCacheError as exc:  # the disk is full: the folder named, the entries there whole
        print(f"frames failed: {exc}", file=sys.stderr)
        sys.exit(2)
    except (RuntimeError, ValueError) as exc:  # ValueError: a bad option, before any work
        print(f"frames failed: {exc}", file=sys.stderr)
        sys.exit(1)
    summary = {k: sum(s[k] for s in summaries) for k in ("clips", "clips_total", "frames", "failed")}
    summary |= {"cache": c.paths.frame_cache_dir, "shard": c.shard or "0/1"}
    print(json.dumps(summary, sort_keys=True))
