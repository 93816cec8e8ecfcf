"""Mixtures: sample built sources by weight, split by video, write one record set per split.

``python -m data_builders mix data=mix_p3i data.root=/data/built data.dir=/data/mix_p3i``

A mixture (``conf/data/<name>.yaml``) names built sources (``<root>/<source>/records.jsonl`` from
``python -m data_builders build``), each with a ``weight`` and an optional ``count``. With
``total`` set, the per-source counts are ``total`` apportioned by weight (largest remainder, so
each share is within one record of ``total * w / sum(w)``); without it each source takes its
``count`` (null: all its records). Sampling is seeded and keeps the source order of the sampled
records, so a rebuild is identical. Splits are assigned per video from a hash of (seed, video):
records that share a ``Stream.video_key`` or the same video file (by device and inode: a symlink or
a hard link is the file it names) form one group (union-find), so no video is in two splits, even
across sources built from the same clips.
Duplicate record ids across sources are rejected.

A mixture is replaced whole or not at all: every split is written into a staging folder inside
``dir`` first, and only then swapped in for the old mixture (:func:`_swap_in`), so a kill, Ctrl-C
or full disk mid-way leaves the old mixture as it was, never a new split beside old ones (which
would put a video in two splits). ``mixture.json`` is written last: a folder without it holds a
replacement cut short (the splits of one mixture only), which the next ``mix`` run replaces. The stage holds ``dir``'s output lock
(:class:`~infra.files.OutputLock`, as a build holds its ``out``), so a second ``mix`` or a
build into the same folder stops at once, naming the holder.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from data_builders.build import build_source
from data_builders.outputs import BuildFailed, commit, staging_dir, write_files
from data_builders.record_io import load_streams, resolve_video
from data_builders.records import Stream
from data_builders.splits import records_file
from infra.files import OutputLock, write_text_atomic
from infra.schema import bounded

log = logging.getLogger("data_builders")
#: Lists the split folders of the old and the new mixture while one replaces the other.
SWAP_FILE = "mixture.swap.json"


@dataclass
class SourceShare:
    """One source of a mixture."""

    weight: float = bounded(1.0, ge=0)
    """Relative share when the mixture has a ``total``."""
    count: int | None = bounded(None, ge=0)
    """Records to take when the mixture has no ``total`` (null: all)."""
    records: str | None = None
    """Build dir or records file (null: ``<root>/<source name>``)."""


@dataclass
class MixtureConfig:
    """A mixture: its sources, sizes, seed and splits (``conf/data/*.yaml``)."""

    name: str = "mixture"
    """Name, recorded in ``mixture.json``."""
    root: str | None = None
    """Directory holding one build dir per source."""
    dir: str | None = None
    """Where the mixture is written (``<dir>/<split>/records.jsonl`` ...)."""
    seed: int = 0
    """Seed of the sampling and of the split assignment."""
    steps_per_second: float = bounded(1.0, gt=0)
    """Decision steps per second of the streams: the rate of ``stats.json``'s decision counts, of
    the training stages' steps and windows, and of the frames they cache."""
    total: int | None = bounded(None, ge=0)
    """Total records, apportioned by weight (null: each source's ``count``)."""
    splits: dict[str, float] = field(default_factory=lambda: {"train": 1.0})
    """Split name -> share of videos (shares sum to 1)."""
    sources: dict[str, SourceShare] = field(default_factory=dict)
    """Source name -> share."""


def apportion(total: int, weights: dict[str, float]) -> dict[str, int]:
    """Split ``total`` by weight with the largest-remainder rule (ties: name order).

    >>> apportion(20, {"a": 10000, "b": 2000, "c": 600, "d": 768})
    {'a': 15, 'b': 3, 'c': 1, 'd': 1}
    """
    if total < 0 or any(w < 0 for w in weights.values()) or sum(weights.values()) <= 0:
        raise ValueError(
            f"need total >= 0 and non-negative weights with a positive sum, got {total}, {weights}"
        )
    norm = sum(weights.values())
    exact = {k: total * w / norm for k, w in weights.items()}
    counts = {k: math.floor(v) for k, v in exact.items()}
    left = total - sum(counts.values())
    for k in sorted(exact, key=lambda k: (-(exact[k] - counts[k]), k))[:left]:
        counts[k] += 1
    return counts


def split_of(video_key: str, seed: int, splits: dict[str, float]) -> str:
    """The split of a video: a hash of (seed, video) placed on the cumulative split shares."""
    u = int(hashlib.sha1(f"{seed}:{video_key}".encode()).hexdigest()[:15], 16) / 16**15
    acc = 0.0
    names = list(splits)
    for name in names:
        acc += splits[name]
        if u < acc:
            return name
    return names[-1]


def file_identity(video: str) -> str:
    """What names a video file for the split: its device and inode (symlinks followed), so the
    same file under two names (a symlink, a hard link, a path through a linked folder) is one
    video; the resolved path for a file that cannot be read (``check_videos=false`` builds)."""
    try:
        st = os.stat(video)
    except OSError:
        return "path:" + os.path.realpath(video)
    return f"inode:{st.st_dev}:{st.st_ino}"


def video_groups(streams: list[Stream]) -> list[str]:
    """A group key per stream: streams sharing a ``video_key`` or a video file (:func:`file_identity`)
    share a group (the group's smallest video key), so a split by group never puts one video in two
    splits."""
    parent: dict[str, str] = {}
    files = {v: file_identity(v) for v in {s.video for s in streams}}

    def find(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for s in streams:
        a, b = find("key:" + s.video_key), find("file:" + files[s.video])
        if a != b:
            parent[max(a, b)] = min(a, b)
    members: dict[str, str] = {}
    for s in streams:
        root = find("key:" + s.video_key)
        members[root] = min(members.get(root, s.video_key), s.video_key)
    return [members[find("key:" + s.video_key)] for s in streams]


def _records_path(cfg: MixtureConfig, name: str, share: SourceShare) -> Path:
    if share.records:
        path = Path(share.records)
    elif cfg.root:
        path = Path(cfg.root) / name
    else:
        raise BuildFailed(f"mixture {cfg.name}: source {name} has no records path and the mixture no root")
    return records_file(path)


def _plain_split(name: str) -> bool:
    return (
        bool(name)
        and not name.startswith(".")
        and "/" not in name
        and name not in ("mixture.json", SWAP_FILE)
    )


def _old_splits(out: Path) -> list[str]:
    """The split folders of the mixture already in ``out``: those of its ``mixture.json``, and of
    the :data:`SWAP_FILE` a replacement cut short left."""
    names: set[str] = set()
    for record in (out / "mixture.json", out / SWAP_FILE):
        try:
            names |= set(json.loads(record.read_text())["splits"])
        except FileNotFoundError:
            continue
        except (ValueError, KeyError, TypeError) as exc:
            raise BuildFailed(
                f"{record}: not a mixture summary ({exc}); remove it or choose another data.dir"
            ) from None
    return sorted(n for n in names if isinstance(n, str) and _plain_split(n))


def _swap_in(staging: Path, out: Path, splits: list[str], summary: str) -> None:
    """Replace the mixture in ``out`` with the splits written in ``staging``, all of them or none.

    The folders of both mixtures are first listed in :data:`SWAP_FILE`; then the old mixture's
    ``mixture.json`` and every one of its splits are moved into ``staging`` (removed with it), the new
    splits are moved in, and ``mixture.json`` is written last. Cut short anywhere, ``out`` holds
    splits of one mixture only (never a video in two splits) and no ``mixture.json``; the next
    ``mix`` run replaces whatever the list names."""
    old = _old_splits(out)
    write_text_atomic(out / SWAP_FILE, json.dumps({"splits": sorted({*old, *splits})}) + "\n")
    for name in ["mixture.json", *old, *splits]:
        if (out / name).exists():
            os.replace(out / name, staging / f".old-{name}")
    commit(staging, out)
    write_text_atomic(out / "mixture.json", summary)
    (out / SWAP_FILE).unlink()


def build_mixture(cfg: MixtureConfig, out: str | Path | None = None) -> dict[str, Any]:
    """Sample, split and write the mixture; returns the summary also written to ``mixture.json``."""
    out = Path(out or cfg.dir or "")
    if not str(out) or str(out) == ".":
        raise BuildFailed("mixture output dir not set (data.dir=...)")
    _check_mixture(cfg)
    _check_sources(cfg)
    chosen, summary_sources = _sample_sources(cfg)
    by_split: dict[str, list[Stream]] = {name: [] for name in cfg.splits}
    for s, group in zip(chosen, video_groups(chosen), strict=True):
        by_split[split_of(group, cfg.seed, cfg.splits)].append(s)
    summary: dict[str, Any] = {
        "name": cfg.name,
        "seed": cfg.seed,
        "total": len(chosen),
        "sources": summary_sources,
        "splits": {},
    }
    with OutputLock(out, f"data_builders mix data={cfg.name}"), staging_dir(out) as tmp:
        for split, streams in by_split.items():
            split_dir = os.path.abspath(out / split)  # where the split will be once it is moved in
            rel = [
                Stream.from_dict({**s.to_dict(), "video": os.path.relpath(s.video, split_dir)})
                for s in streams
            ]
            write_files(tmp / split, rel, steps_per_second=cfg.steps_per_second)
            summary["splits"][split] = {"records": len(rel), "videos": len({s.video_key for s in rel})}
        _swap_in(tmp, out, list(by_split), json.dumps(summary, indent=1, sort_keys=True) + "\n")
    log.info(
        "mixture %s: %d records -> %s (%s)",
        cfg.name,
        len(chosen),
        out,
        ", ".join(f"{k}={v['records']}" for k, v in summary["splits"].items()),
    )
    _warn_empty(cfg, summary)
    return summary


def _warn_empty(cfg: MixtureConfig, summary: dict[str, Any]) -> None:
    """A warning naming each split with a share but no record: too few videos for the shares (a
    split by video puts each video in one split), and what to do."""
    empty = [k for k, v in summary["splits"].items() if not v["records"] and cfg.splits[k] > 0]
    if not empty:
        return
    videos = sum(v["videos"] for v in summary["splits"].values())
    smallest = min(cfg.splits[k] for k in empty)
    log.warning(
        "mixture %s: split(s) %s got no record: %d video(s) are too few for the shares %s (each video "
        "goes to one split; about %d videos give every split one): add videos and mix again, or "
        "evaluate on a build dir with records=DIR; training and eval.run refuse an empty split",
        cfg.name,
        ", ".join(empty),
        videos,
        ", ".join(f"{k}={v:g}" for k, v in cfg.splits.items()),
        math.ceil(1 / smallest),
    )


def _check_mixture(cfg: MixtureConfig) -> None:
    """Refuse a mixture with no source, split shares that are not a partition, or a split name
    that is not a plain folder name."""
    if not cfg.sources:
        raise BuildFailed(
            f"mixture {cfg.name} lists no sources; name one with data.sources.<name>.weight=1 "
            "(the build dir <data.root>/<name>, or data.sources.<name>.records=DIR)"
        )
    if abs(sum(cfg.splits.values()) - 1.0) > 1e-6 or any(v < 0 for v in cfg.splits.values()):
        raise BuildFailed(
            f"mixture {cfg.name}: split shares must be >= 0 and sum to 1, got {dict(cfg.splits)}"
        )
    bad = [k for k in cfg.splits if not _plain_split(k)]
    if bad:
        raise BuildFailed(
            f"mixture {cfg.name}: split names must be plain folder names (not hidden, no '/', not "
            f"mixture.json or {SWAP_FILE}), got {bad}"
        )


def _check_sources(cfg: MixtureConfig) -> None:
    """Every source's records are there, or one error naming every one that is missing (a mixture of
    four sources built one at a time is told all it lacks at once)."""
    missing = []
    for name in sorted(cfg.sources):
        path = _records_path(cfg, name, cfg.sources[name])
        if not (path.is_file() or (path.is_dir() and any(path.glob("*.parquet")))):
            missing.append(f"{name} ({path})")
    if missing:
        raise BuildFailed(
            f"mixture {cfg.name}: {len(missing)} of {len(cfg.sources)} sources have no records: "
            f"{', '.join(missing)}; build each with python -m data_builders build source=<name> "
            f"out={cfg.root or '<root>'}/<name>"
        )


def _sample_sources(cfg: MixtureConfig) -> tuple[list[Stream], dict[str, dict]]:
    """Each source's sample (seeded by the mixture seed and the source name), videos made
    absolute, and per source what was available and taken."""
    if cfg.total is not None:
        counts: dict[str, int | None] = dict(
            apportion(cfg.total, {k: s.weight for k, s in cfg.sources.items()})
        )
    else:
        counts = {k: s.count for k, s in cfg.sources.items()}
    chosen: list[Stream] = []
    origin: dict[str, str] = {}
    summary_sources = {}
    for name in sorted(cfg.sources):
        path = _records_path(cfg, name, cfg.sources[name])
        streams = load_streams(path)
        want = len(streams) if counts[name] is None else counts[name]
        if want > len(streams):
            raise BuildFailed(
                f"mixture {cfg.name}: source {name} has {len(streams)} records in {path}, "
                f"the mixture asks for {want}"
            )
        picked = sorted(random.Random(f"{cfg.seed}:{name}").sample(range(len(streams)), want))
        for i in picked:
            s = streams[i]
            if s.id in origin:
                raise BuildFailed(
                    f"mixture {cfg.name}: duplicate record id {s.id!r} in sources {origin[s.id]} and {name}"
                )
            origin[s.id] = name
            video = os.path.abspath(resolve_video(s, path))
            chosen.append(Stream.from_dict({**s.to_dict(), "video": video}))
        summary_sources[name] = {"available": len(streams), "taken": want, "records": str(path)}
    return chosen, summary_sources


def build_toy_mixture(
    root: str | Path,
    out: str | Path,
    n: int = 256,
    seed: int = 0,
    splits: dict[str, float] | None = None,
) -> Path:
    """Build ``n`` toy clips into ``<root>/toy`` and split them by video into ``out`` (train / val /
    test by default), exactly as ``python -m data_builders build source=toy`` and ``mix data=toy``
    write them (records, parquet, stats.json); returns ``out``. The demo and the CPU experiments'
    data."""
    build_source("toy", Path(root) / "toy", options={"n": n, "seed": seed}, check_videos=False)
    cfg = MixtureConfig(
        name="toy",
        root=str(root),
        dir=str(out),
        seed=seed,
        splits=splits or {"train": 0.75, "val": 0.125, "test": 0.125},
        sources={"toy": SourceShare()},
    )
    build_mixture(cfg)
    return Path(out)
