"""The build driver: one source's annotation files + video root -> checked stream records on disk.

``python -m data_builders build source=nexar annotations=/data/nexar/train.csv videos=/data/nexar/train out=/data/built/nexar``

Stages, in order (each source module only does the first):

1. **Parse** the annotations with the source's registered builder into pending records; records
   that cannot be parsed become errors. No record at all is an error (an empty file builds nothing).
2. **Find videos** for every pending record before anything is probed or decoded: the source's
   pattern path first; when that file is absent, the video root is indexed once
   (:mod:`data_builders.video_index`) and the record is looked up by file name and by its own
   names, so a layout of the user's own works without a pattern. A missing video, or a name that
   matches two files, is an error naming them (the count is logged first, so a wrong ``videos=``
   root shows at once).
3. **Probe** videos (header, and the last frames to catch truncated files) when ``check_videos``
   is on, and otherwise only for records whose annotation does not state what they need (the
   clip's duration or fps): with ``check_videos=false`` and stated durations no video is opened.
4. **Convert** (the source's ``make``), fit targets to the clip (:data:`CLAMP_TOLERANCE`), then
   validate each stream with the record type itself, check the clip fits in the video, and reject
   duplicate ids.
5. **Write** ``records.jsonl``, parquet shards, ``stats.json`` and ``errors.jsonl`` (video paths
   rewritten relative to ``out``, or absolute) into a staging folder inside ``out``, and move them
   into ``out`` only when the build succeeded: a crash, a full disk or a failed build leaves the
   previous build as it was (the staging folder of a build killed outright is removed by the next
   one). A build over ``max_error_rate`` puts its files in ``out/failed_build/``
   (so its ``errors.jsonl`` can be read) and raises.

Tolerances that keep data: a target up to :data:`CLAMP_TOLERANCE` (1 s) past the clip end is moved
to the end and counted (``clamped_targets`` in ``stats.json``); a target further out, or before the
clip start, is dropped alone and listed in ``errors.jsonl`` (scope ``event``); inverted events are
the sources' (``registry.event_span``). A stream whose targets were all dropped is not kept as a
negative (silence would be the wrong answer there): its record fails, naming why.

Nothing here writes timestamps, so two builds of the same inputs are byte-identical.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from data_builders.outputs import FAILED_DIR, BuildFailed, commit, staging_dir, write_files, write_outputs
from data_builders.records import TIME_EPS, RecordError, Stream, Target
from data_builders.sources import get_source
from data_builders.splits import RECORDS_JSONL
from data_builders.toolkit import (
    RECORD_EXCEPTIONS,
    BuildInputs,
    ConversionError,
    Pending,
    SourceSpec,
    record_reason,
)
from data_builders.video import PAST_END_SLACK_S, VideoError, VideoInfo, probe_video
from data_builders.video_index import AmbiguousVideo, VideoIndex
from infra.progress import Progress

log = logging.getLogger("data_builders")
#: Re-exported: the experiments write through the same staged writer.
__all__ = [
    "BuildFailed",
    "BuildReport",
    "build_source",
    "convert",
    "locate_videos",
    "write_outputs",
    "FAILED_DIR",
]

#: Slack (s) when checking that a clip ends inside its video: container durations are rounded.
#: Decoding allows frames as far past the end (``data_builders.video.PAST_END_SLACK_S``).
DURATION_SLACK = PAST_END_SLACK_S
#: A target at most this many seconds past the clip end is moved to the end (and counted).
CLAMP_TOLERANCE = 1.0
#: Counts every build reports in ``stats.json`` (``conversion``), zero or not.
BASE_COUNTS = ("clamped_targets", "dropped_events", "repaired_inversions", "skipped_records")


@dataclass
class BuildReport:
    """What a build produced: records, errors, the number of source records seen, output paths,
    and the conversion counts (repairs, drops, skips) written to ``stats.json``."""

    records: list[Stream]
    errors: list[ConversionError]
    n_source_records: int
    out: Path
    files: list[Path] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def n_failed(self) -> int:
        """Source records that made no stream (errors of scope ``record``)."""
        return len({(e.source_file, e.record) for e in self.errors if e.scope == "record"})

    @property
    def error_rate(self) -> float:
        return self.n_failed / self.n_source_records if self.n_source_records else 0.0


def _probe_all(
    paths: list[Path], check_end: bool, workers: int, probe: Callable[..., VideoInfo]
) -> dict[Path, VideoInfo | VideoError]:
    """Probe each path once (threads, with a progress line); a VideoError is kept as the path's result."""

    def one(path: Path) -> VideoInfo | VideoError:
        try:
            return probe(path, check_end=check_end)
        except VideoError as exc:
            return exc

    if not paths:
        return {}
    bar = Progress(len(paths), "probe", unit="video")
    out = {}
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for path, info in zip(paths, pool.map(one, paths), strict=True):
            out[path] = info
            bar.update(1)
    bar.close()
    return out


class _Rebase:
    """Stream video paths made relative to ``out`` (or absolute); a file written into the staging
    folder (the toy source's videos) is named where it will be once the build is moved in."""

    def __init__(self, root: Path, out: Path, video_paths: str, staging: Path | None):
        self.root, self.out = os.path.abspath(root), os.path.abspath(out)
        self.staging = None if staging is None else os.path.abspath(staging) + os.sep
        self.absolute = video_paths == "absolute"

    def __call__(self, stream: Stream) -> Stream:
        path = os.path.abspath(os.path.join(self.root, stream.video))
        if self.staging is not None and path.startswith(self.staging):
            path = os.path.join(self.out, path[len(self.staging) :])
        video = path if self.absolute else os.path.relpath(path, self.out)
        return Stream.from_dict({**stream.to_dict(), "video": video})


def _fit_targets(stream: Stream, pending: Pending) -> Stream:
    """Targets up to CLAMP_TOLERANCE past the clip end moved to the end (counted); targets further
    out or before the clip start dropped (listed); windows cut to the clip."""
    start, end = stream.clip_start, stream.clip_end
    kept: list[Target] = []
    changed = False
    for i, t in enumerate(stream.targets):
        lo = min(t.time, t.window[0]) if t.window else t.time
        hi = max(t.time, t.window[1]) if t.window else t.time
        if t.time < start - TIME_EPS or hi > end + CLAMP_TOLERANCE:
            where = "before the clip start" if t.time < start - TIME_EPS else "past the clip end"
            pending.tally.drop(
                f"stream {stream.id}: target {i} at {t.time:.3f}s (window {t.window}) lies {where} "
                f"[{start:.3f}, {end:.3f}] by more than the tolerance; target dropped"
            )
            changed = True
            continue
        if hi > end + TIME_EPS or lo < start - TIME_EPS:
            if hi > end + TIME_EPS:
                pending.tally.count("clamped_targets")
            window = None if t.window is None else (max(t.window[0], start), min(t.window[1], end))
            if window is not None and window[0] > window[1]:
                window = (end, end)
            t = replace(t, time=min(t.time, end), window=window)
            changed = True
        kept.append(t)
    return replace(stream, targets=kept) if changed else stream


def locate_videos(
    pendings: list[Pending], root: Path, exists: Callable[[Path], bool]
) -> tuple[dict[int, str], list[ConversionError]]:
    """The video (root-relative, or absolute) of each pending record, keyed by list position;
    records whose video is not found, or is ambiguous, get an error instead. The root is indexed
    (once) only when some pattern path is absent."""
    found: dict[int, str] = {}
    errors: list[ConversionError] = []
    present = {v: exists(Path(os.path.join(root, v))) for v in {p.video for p in pendings}}
    absent = [k for k, p in enumerate(pendings) if not present[p.video]]
    for k, p in enumerate(pendings):
        if present[p.video]:
            found[k] = p.video
    if not absent:
        return found, errors
    t0 = time.perf_counter()
    index = VideoIndex(root)
    log.info("indexed %d video files under %s in %.2fs", index.n_files, root, time.perf_counter() - t0)
    missing = 0
    for k in absent:
        p = pendings[k]
        try:
            hit = index.find(p.video, p.lookup)
        except AmbiguousVideo as exc:
            errors.append(ConversionError(p.source_file, p.record, f"ambiguous video: {exc}"))
            continue
        if hit is None:
            missing += 1
            path = Path(os.path.join(root, p.video))
            names = ", ".join(repr(n) for n in dict.fromkeys((Path(p.video).stem, *p.lookup)))
            errors.append(
                ConversionError(
                    p.source_file,
                    p.record,
                    f"video file missing: {path} (no video named {names} under {root})",
                )
            )
        else:
            found[k] = hit
    if missing:
        first = next(e for e in errors if e.reason.startswith("video file missing"))
        log.warning(
            "%d of %d records have no video under %s%s (first: %s)",
            missing,
            len(pendings),
            root,
            "" if root.is_dir() else " (the folder does not exist)",
            first.reason,
        )
    return found, errors


def _make_streams(p: Pending, info: VideoInfo | None, video: str, seen: dict[str, str]) -> list[Stream]:
    """Stage 3-4 for one parsed record whose video was found at ``video``: its streams, targets
    fitted to the clip, each checked against the file's length, the ids made so far (``seen``:
    id -> record) and the targets the source dropped. Raises :class:`RecordError`."""
    streams = []
    for s in p.make(info):
        if s.video == p.video != video:
            s = replace(s, video=video)
        s = _fit_targets(s, p)
        if info is not None and s.clip_end - s.video_offset > info.duration + DURATION_SLACK:
            raise RecordError(
                f"stream {s.id}: clip ends at {s.clip_end - s.video_offset:.3f}s of the file "
                f"but the video lasts {info.duration:.3f}s"
            )
        if s.id in seen:
            raise RecordError(f"duplicate id {s.id!r} (first made from record {seen[s.id]})")
        if p.tally.lost and not s.targets:
            raise RecordError(
                f"stream {s.id}: all its targets were dropped or left out ({p.tally.lost}); "
                "not kept as a negative: " + "; ".join(p.tally.dropped or [str(dict(p.tally.counts))])
            )
        if p.tally.lost:
            s = replace(s, meta={**s.meta, "dropped_targets": p.tally.lost})
        streams.append(s)
    return streams


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
    staging: Path | None = None,
) -> tuple[list[Stream], list[ConversionError], Counter]:
    """Stages 2-4 for parsed records: video lookup, probing, conversion, target fitting,
    validation, dedup. Returns the streams, the errors and the summed conversion counts."""
    if video_paths not in ("relative", "absolute"):
        raise BuildFailed(f"video_paths must be 'relative' or 'absolute', got {video_paths!r}")
    found, errors = locate_videos(pendings, root, exists)
    files = {k: Path(os.path.join(root, v)) for k, v in found.items()}
    to_probe = sorted(
        {files[k] for k, p in enumerate(pendings) if k in files and (check_videos or p.needs_info)}
    )
    infos = _probe_all(to_probe, check_videos, workers, probe)
    rebase = _Rebase(root, out, video_paths, staging)
    records: list[Stream] = []
    counts: Counter = Counter()
    seen: dict[str, str] = {}
    for k, p in enumerate(pendings):
        if k not in found:
            continue
        info = infos.get(files[k])
        if isinstance(info, VideoError):
            errors.append(ConversionError(p.source_file, p.record, f"unreadable video: {info}"))
            continue
        try:
            rebased = [rebase(s) for s in _make_streams(p, info, found[k], seen)]
        except RECORD_EXCEPTIONS as exc:
            errors.append(ConversionError(p.source_file, p.record, record_reason(exc)))
            continue
        for s in rebased:
            seen[s.id] = p.record
        records.extend(rebased)
        counts.update(p.tally.counts)
        errors.extend(ConversionError(p.source_file, p.record, r, scope="event") for r in p.tally.dropped)
    return records, errors, counts


def _check_settings(max_error_rate: float, shard_size: int, workers: int, video_paths: str) -> None:
    if (
        isinstance(max_error_rate, bool)
        or not isinstance(max_error_rate, (int, float))
        or not 0 <= max_error_rate <= 1
    ):
        raise BuildFailed(f"max_error_rate must be a share between 0 and 1, got {max_error_rate!r}")
    if isinstance(shard_size, bool) or not isinstance(shard_size, int) or shard_size < 1:
        raise BuildFailed(f"shard_size must be a whole number of records >= 1, got {shard_size!r}")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise BuildFailed(f"workers must be a whole number >= 1, got {workers!r}")
    if video_paths not in ("relative", "absolute"):
        raise BuildFailed(f"video_paths must be 'relative' or 'absolute', got {video_paths!r}")


def _check_out(out: Path, annotations: Path | None) -> None:
    """Refuse an ``out`` that is, or contains, the annotation input: the build would replace it."""
    if annotations is None:
        return
    a, o = Path(os.path.realpath(annotations)), Path(os.path.realpath(out))
    if a == o or a.is_relative_to(o):
        raise BuildFailed(
            f"out={out} is or contains the annotations {annotations}; the build would overwrite its "
            "own input: choose another out"
        )


def _check_inputs(
    spec: SourceSpec, source: str, out: Path, annotations: str | Path | None, videos: str | Path | None
) -> Path | None:
    """The annotations path, once the inputs the source needs are given, exist, and are not ``out``."""
    if spec.needs_annotations and (annotations is None or videos is None):
        raise BuildFailed(f"source {source!r} needs annotations=PATH and videos=DIR")
    annotations = None if annotations is None else Path(annotations)
    if annotations is not None and not annotations.exists():
        raise BuildFailed(f"annotations {annotations} do not exist")
    _check_out(out, annotations)
    return annotations


def _parse_source(
    spec: SourceSpec, source: str, inputs: BuildInputs, opts: Any
) -> tuple[list[Pending], list[ConversionError], int]:
    """Stage 1: the source's parsed records, its per-record errors, and how many source records
    there were (parsed or failed). Raises :class:`BuildFailed` when there were none."""
    pendings: list[Pending] = []
    errors: list[ConversionError] = []
    try:
        for item in spec.build(inputs, opts):
            (errors if isinstance(item, ConversionError) else pendings).append(item)
    except RecordError as exc:  # a whole annotation file is unreadable
        raise BuildFailed(f"source {source!r}: {exc}") from None
    n_source = len(pendings) + len({(e.source_file, e.record) for e in errors})
    if n_source == 0:
        raise BuildFailed(f"source {source!r}: no records in {inputs.annotations}")
    return pendings, errors, n_source


def _report_counts(errors: list[ConversionError], counts: Counter) -> dict[str, int]:
    """The report's counts: the conversion's, the skipped records and dropped events, every base key."""
    counts["skipped_records"] = len({(e.source_file, e.record) for e in errors if e.scope == "skipped"})
    counts["dropped_events"] = sum(e.scope == "event" for e in errors)
    return {k: counts[k] for k in sorted(set(counts) | set(BASE_COUNTS))}


def _log_report(source: str, report: BuildReport) -> None:
    log.info(
        "%s: %d records from %d source records, %d failed (%.2f%%), %s -> %s",
        source,
        len(report.records),
        report.n_source_records,
        report.n_failed,
        100 * report.error_rate,
        ", ".join(f"{k}={v}" for k, v in report.counts.items() if v),
        report.out,
    )


#: Reasons a failed build's message shows (the rest are counted, all are in ``errors.jsonl``).
SHOWN_REASONS = 3


def _reasons(report: BuildReport) -> str:
    """The first :data:`SHOWN_REASONS` reasons of the records that made no stream, one clause each."""
    lost = [e for e in report.errors if e.scope == "record"] or list(report.errors)
    shown = [
        f"{Path(e.source_file).name} {e.record}: {' '.join(e.reason.split())}" for e in lost[:SHOWN_REASONS]
    ]
    rest = f" (and {len(lost) - SHOWN_REASONS} more)" if len(lost) > SHOWN_REASONS else ""
    return "; ".join(shown) + rest


def _keep_failed(tmp: Path, out: Path, report: BuildReport, max_error_rate: float) -> None:
    """Move the staged files of a failed build to ``out/failed_build/`` and raise :class:`BuildFailed`
    naming the first reasons, whether a previous build is kept, and the option that lets it through."""
    failed = out / FAILED_DIR
    previous = any((out / name).exists() for name in (RECORDS_JSONL, "stats.json")) or any(
        out.glob("*.parquet")
    )
    if failed.exists():
        shutil.rmtree(failed)
    os.replace(tmp, failed)
    tmp.mkdir()  # for the cleanup
    share = f"{report.n_failed} of {report.n_source_records} source records ({100 * report.error_rate:.2f}%)"
    why = (
        f"no record was built ({share} failed)"
        if not report.records
        else f"{share} could not be converted, above max_error_rate={max_error_rate} "
        f"(max_error_rate={min(1.0, round(report.error_rate + 0.005, 2)):g} lets this build through)"
    )
    kept = f"the previous build in {out} is kept" if previous else f"no previous build in {out}"
    first = _reasons(report)
    raise BuildFailed(
        f"{why}: {first or 'no reason recorded'}; every reason in {failed / 'errors.jsonl'} ({kept})"
    )


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

    ``options`` are the source's own keys (its config dataclass). Raises :class:`BuildFailed`
    when the settings or inputs are unusable, when no record was built, or (after leaving the
    files in ``out/failed_build/``) when more than ``max_error_rate`` of the source records failed.
    ``probe`` and ``exists`` are injectable for benchmarks of the conversion alone.
    """
    spec = get_source(source)
    try:
        opts = spec.make_config(options)
    except ValueError as exc:
        raise BuildFailed(str(exc)) from None
    _check_settings(max_error_rate, shard_size, workers, video_paths)
    out = Path(out)
    annotations = _check_inputs(spec, source, out, annotations, videos)
    with staging_dir(out) as tmp:
        inputs = BuildInputs(
            annotations=annotations, videos=None if videos is None else Path(videos), out=tmp
        )
        pendings, errors, n_source = _parse_source(spec, source, inputs, opts)
        root = inputs.videos if inputs.videos is not None else tmp
        records, conv_errors, counts = convert(
            pendings,
            root,
            out,
            check_videos=check_videos,
            workers=workers,
            video_paths=video_paths,
            probe=probe,
            exists=exists,
            staging=tmp,
        )
        all_errors = errors + conv_errors
        counts = _report_counts(all_errors, counts)
        report = BuildReport(records, all_errors, n_source, out, counts=counts)
        write_files(tmp, records, report.errors, shard_size=shard_size, counts=counts)
        _log_report(source, report)
        if not records or report.error_rate > max_error_rate:
            _keep_failed(tmp, out, report, max_error_rate)
        report.files = commit(tmp, out)
    return report
