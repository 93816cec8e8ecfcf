"""The build driver: one source's annotation files + video root -> checked stream records on disk.

``python -m data_builders build source=nexar annotations=/data/nexar/train.csv videos=/data/nexar/train out=/data/built/nexar``

Stages, in order (each source module only does the first):

1. **Parse** the annotations with the source's registered builder into pending records; records
   that cannot be parsed become errors.
2. **Check videos exist** for every pending record, before anything is probed or decoded, and
   list each missing one as an error (the count is logged first, so a wrong ``videos=`` root shows
   at once).
3. **Probe** videos (header, and the last frames to catch truncated files) when ``check_videos``
   is on, and always for records that need the clip's duration or fps. Probing runs in threads.
4. **Convert** (the source's ``make``), then validate each stream with the record type itself,
   check the clip fits in the video, and reject duplicate ids.
5. **Write** ``records.jsonl``, parquet shards, ``stats.json`` and ``errors.jsonl`` into ``out``
   (video paths are rewritten relative to ``out``, or absolute), then fail when the share of
   source records that could not be converted passes ``max_error_rate``.

Nothing here writes timestamps, so two builds of the same inputs are byte-identical.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from data_builders.records import RecordError, Stream, write_jsonl, write_parquet
from data_builders.registry import BuildInputs, ConversionError, Pending, get_source
from data_builders.stats import compute_stats
from data_builders.video import VideoError, VideoInfo, probe_video

log = logging.getLogger("data_builders")

#: Slack (s) when checking that a clip ends inside its video: container durations are rounded.
DURATION_SLACK = 0.5


class BuildFailed(RuntimeError):
    """The build converted too few records (or could not start); the message says how many and why."""


@dataclass
class BuildReport:
    """What a build produced: records, errors, the number of source records seen, output paths."""

    records: list[Stream]
    errors: list[ConversionError]
    n_source_records: int
    out: Path
    files: list[Path] = field(default_factory=list)

    @property
    def n_failed(self) -> int:
        """Source records with at least one error."""
        return len({(e.source_file, e.record) for e in self.errors})

    @property
    def error_rate(self) -> float:
        return self.n_failed / self.n_source_records if self.n_source_records else 0.0


def _probe_all(
    paths: list[Path], check_end: bool, workers: int, probe: Callable[..., VideoInfo]
) -> dict[Path, VideoInfo | VideoError]:
    """Probe each path once (threads); a VideoError is kept as the path's result."""

    def one(path: Path) -> VideoInfo | VideoError:
        try:
            return probe(path, check_end=check_end)
        except VideoError as exc:
            return exc

    if not paths:
        return {}
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        return dict(zip(paths, pool.map(one, paths), strict=True))


def _rebase(stream: Stream, root: Path, out: Path, video_paths: str) -> Stream:
    """The stream with its video path relative to ``out`` (or absolute)."""
    path = Path(stream.video)
    if not path.is_absolute():
        path = root / path
    path = Path(os.path.abspath(path))
    video = str(path) if video_paths == "absolute" else os.path.relpath(path, os.path.abspath(out))
    return Stream.from_dict({**stream.to_dict(), "video": video})


def convert(
    pendings: list[Pending],
    root: Path,
    out: Path,
    *,
    check_videos: bool = True,
    workers: int = 4,
    video_paths: str = "relative",
    probe: Callable[..., VideoInfo] = probe_video,
    exists: Callable[[Path], bool] = Path.is_file,
) -> tuple[list[Stream], list[ConversionError]]:
    """Stages 2-4 for parsed records: existence check, probing, conversion, validation, dedup."""
    if video_paths not in ("relative", "absolute"):
        raise BuildFailed(f"video_paths must be 'relative' or 'absolute', got {video_paths!r}")
    errors: list[ConversionError] = []
    paths = {p.video: (Path(p.video) if Path(p.video).is_absolute() else root / p.video) for p in pendings}
    missing = sorted({v for v, path in paths.items() if not exists(path)})
    if missing:
        log.warning(
            "%d of %d videos are missing under %s (first: %s)", len(missing), len(paths), root, missing[0]
        )
    missing_set = set(missing)
    ready = [p for p in pendings if p.video not in missing_set]
    for p in pendings:
        if p.video in missing_set:
            errors.append(ConversionError(p.source_file, p.record, f"video file missing: {paths[p.video]}"))
    to_probe = sorted({paths[p.video] for p in ready if check_videos or p.needs_info})
    infos = _probe_all(to_probe, check_videos, workers, probe)
    records: list[Stream] = []
    seen: dict[str, str] = {}
    for p in ready:
        info = infos.get(paths[p.video])
        if isinstance(info, VideoError):
            errors.append(ConversionError(p.source_file, p.record, f"unreadable video: {info}"))
            continue
        try:
            streams = p.make(info)
            for s in streams:
                if info is not None and s.clip_end - s.video_offset > info.duration + DURATION_SLACK:
                    raise RecordError(
                        f"stream {s.id}: clip ends at {s.clip_end - s.video_offset:.3f}s of the file "
                        f"but the video lasts {info.duration:.3f}s"
                    )
                if s.id in seen:
                    raise RecordError(f"duplicate id {s.id!r} (first made from record {seen[s.id]})")
            rebased = [_rebase(s, root, out, video_paths) for s in streams]
        except ValueError as exc:
            errors.append(ConversionError(p.source_file, p.record, str(exc)))
            continue
        for s in rebased:
            seen[s.id] = p.record
        records.extend(rebased)
    return records, errors


def write_outputs(
    out: Path,
    records: list[Stream],
    errors: list[ConversionError] | None = None,
    shard_size: int = 10_000,
    steps_per_second: float = 1.0,
) -> list[Path]:
    """``records.jsonl``, parquet shards ``records-0000k-of-0000n.parquet``, ``stats.json`` and
    (when ``errors`` is given) ``errors.jsonl`` in ``out``; old shards there are removed first."""
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("records-*-of-*.parquet"):
        old.unlink()
    files = [out / "records.jsonl"]
    write_jsonl(files[0], records)
    files += write_parquet(out, records, shard_size=shard_size)
    stats = out / "stats.json"
    stats.write_text(json.dumps(compute_stats(records, steps_per_second), indent=1, sort_keys=True) + "\n")
    files.append(stats)
    if errors is not None:
        files.append(out / "errors.jsonl")
        write_jsonl(files[-1], [e.to_dict() for e in errors])
    return files


def build_source(
    source: str,
    out: str | Path,
    *,
    annotations: str | Path | None = None,
    videos: str | Path | None = None,
    options: dict[str, Any] | None = None,
    check_videos: bool = True,
    max_error_rate: float = 0.01,
    shard_size: int = 10_000,
    workers: int = 4,
    video_paths: str = "relative",
    probe: Callable[..., VideoInfo] = probe_video,
    exists: Callable[[Path], bool] = Path.is_file,
) -> BuildReport:
    """Build one source end to end (see the module docstring) and return the report.

    ``options`` are the source's own keys (its options dataclass). Raises :class:`BuildFailed`
    after writing the outputs when more than ``max_error_rate`` of the source records failed.
    ``probe`` and ``exists`` are injectable for benchmarks of the conversion alone.
    """
    spec = get_source(source)
    opts = spec.make_options(options)
    out = Path(out)
    if spec.needs_annotations and (annotations is None or videos is None):
        raise BuildFailed(f"source {source!r} needs annotations=PATH and videos=DIR")
    inputs = BuildInputs(
        annotations=None if annotations is None else Path(annotations),
        videos=None if videos is None else Path(videos),
        out=out,
    )
    if inputs.annotations is not None and not inputs.annotations.exists():
        raise BuildFailed(f"annotations {inputs.annotations} do not exist")
    pendings: list[Pending] = []
    errors: list[ConversionError] = []
    try:
        for item in spec.build(inputs, opts):
            (errors if isinstance(item, ConversionError) else pendings).append(item)
    except RecordError as exc:  # a whole annotation file is unreadable
        raise BuildFailed(f"source {source!r}: {exc}") from None
    n_source = len(pendings) + len({(e.source_file, e.record) for e in errors})
    root = inputs.videos if inputs.videos is not None else out
    records, conv_errors = convert(
        pendings,
        root,
        out,
        check_videos=check_videos,
        workers=workers,
        video_paths=video_paths,
        probe=probe,
        exists=exists,
    )
    report = BuildReport(records=records, errors=errors + conv_errors, n_source_records=n_source, out=out)
    report.files = write_outputs(out, records, report.errors, shard_size=shard_size)
    log.info(
        "%s: %d records from %d source records, %d failed (%.2f%%) -> %s",
        source,
        len(records),
        n_source,
        report.n_failed,
        100 * report.error_rate,
        out,
    )
    if report.error_rate > max_error_rate:
        raise BuildFailed(
            f"{report.n_failed} of {n_source} source records ({100 * report.error_rate:.2f}%) could not be "
            f"converted, above max_error_rate={max_error_rate}; reasons in {out / 'errors.jsonl'}"
        )
    return report
