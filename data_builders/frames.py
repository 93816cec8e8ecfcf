"""The frames of a stream, and the frames stage that decodes every clip once into the frame cache.

    python -m data_builders frames data=mix_p3i data.dir=/data/mix_p3i            # every split, render=hd
    python -m data_builders frames records=/data/built/nexar render=toy workers=16

One rule, used by the frames stage, SFT, GRPO and evaluation alike:

- A stream's decision steps are ``records.step_times(stream, steps_per_second)`` (record clock); the
  frame of a step is the one on screen at ``time - video_offset`` on the file's own clock.
- Frames are sized by the run's :class:`~data_builders.config.RenderConfig` (``max_pixels``, aspect
  kept) and read with its ``video_backend``.
- The cache entry of a stream is keyed by the video file, the file times of *all* its steps and the
  pixel budget (:class:`~data_builders.video.FrameCache`): a training window is cut from the whole
  stream's frames (:func:`stream_frames` with ``window``), so every stage reads the entry the frames
  stage wrote, under ``paths.frame_cache_dir``.

The stage spreads clips over ``workers`` processes with a progress bar. Unreadable videos, and
clips that run past the end of their video, are listed (file, record, clip and reason) and make the
stage fail after every other clip is cached. A disk that runs out of space stops the stage at once,
naming the cache folder: the entries written are whole, so a rerun decodes only the rest. The stage
first removes the temp files of cache entries whose writer died mid-write (a killed frames stage or
training run: the entry's lock is free), naming each in the log; a live writer's are left alone.
"""

from __future__ import annotations

import gc
import logging
import math
from concurrent.futures import CancelledError, ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import numpy as np

from data_builders.config import RenderConfig
from data_builders.files import remove_dead_writes
from data_builders.progress import Progress
from data_builders.records import Stream, load_streams, resolve_video, step_times
from data_builders.video import FrameCache, FrameCacheError, VideoError, load_frames

log = logging.getLogger("data_builders")


def stream_file_times(stream: Stream, steps_per_second: float = 1.0) -> list[float]:
    """The file-clock times of a stream's decision steps (record time - ``video_offset``)."""
    return [t - stream.video_offset for t in step_times(stream, steps_per_second)]


def stream_frames(
    stream: Stream,
    video_path: str | Path,
    render: RenderConfig,
    steps_per_second: float = 1.0,
    cache: FrameCache | None = None,
    window: tuple[int, int] | None = None,
) -> np.ndarray:
    """``(N, H, W, 3)`` uint8 frames of a stream's steps, or of steps ``window = [start, end)``.

    Through ``cache`` the whole stream is decoded once (one entry per clip, whatever the window) and
    a hit is memory-mapped, so a window reads only its own frames from disk. A
    :class:`~data_builders.video.VideoError` names the file, the record and its clip."""
    try:
        frames = load_frames(
            video_path,
            stream_file_times(stream, steps_per_second),
            max_pixels=render.max_pixels,
            backend=render.video_backend,
            cache=cache,
        )
    except VideoError as exc:
        offset = f", video_offset {stream.video_offset:g} s" if stream.video_offset else ""
        clip = f"clip {stream.clip_start:.3f}-{stream.clip_end:.3f} s{offset}"
        raise VideoError(exc.path, f"{exc.reason} (record {stream.id}, {clip})") from None
    if window is None:
        return frames
    return np.ascontiguousarray(frames[window[0] : window[1]])


def _records_file(data: Path) -> Path:
    return data / "records.jsonl" if data.is_dir() else data


def clip_jobs(data: str | Path) -> list[tuple[int, Path, Stream]]:
    """(first record line, video path, stream) of each distinct clip of a record set, in record
    order: streams with the same video and step times share one cache entry."""
    records = _records_file(Path(data))
    jobs, seen = [], set()
    for k, s in enumerate(load_streams(records)):
        video = resolve_video(s, records)
        key = (str(video), s.clip_start, s.clip_end, s.video_offset)
        if key not in seen:
            seen.add(key)
            jobs.append((k, video, s))
    return jobs


def _cache_one(
    cache_root: str, path: Path, stream: Stream, render: RenderConfig, steps_per_second: float
) -> tuple[str, int, str | None]:
    try:
        frames = stream_frames(stream, path, render, steps_per_second, FrameCache(cache_root))
    except VideoError as exc:
        return str(path), 0, str(exc)
    return str(path), int(frames.shape[0]), None


def check_frames_options(steps_per_second: float, workers: int) -> None:
    """Refuse options the frames stage cannot run with, naming the option: ``steps_per_second``
    must be a finite number above 0 and ``workers`` at least 1."""
    if not (math.isfinite(steps_per_second) and steps_per_second > 0):
        raise ValueError(f"steps_per_second={steps_per_second}: must be a finite number more than 0")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers={workers}: must be a whole number, at least 1")


def cache_frames(
    data: str | Path,
    cache: str | Path,
    render: RenderConfig | None = None,
    steps_per_second: float = 1.0,
    workers: int = 4,
    progress: bool = True,
) -> dict[str, Any]:
    """Fill the frame cache ``cache`` (``paths.frame_cache_dir``) for ``data`` (a build dir or a
    records file); returns a summary. Raises ``RuntimeError`` listing the videos that could not be
    decoded, after caching all the others; ``RuntimeError`` naming the cache folder at once when its
    disk cannot take an entry (:class:`~data_builders.video.FrameCacheError`); ``ValueError`` for
    bad options, before any work."""
    check_frames_options(steps_per_second, workers)
    remove_dead_writes(sorted(Path(cache).glob("*/*.tmp")))
    render = render or RenderConfig()
    jobs = clip_jobs(data)
    failed: list[tuple[str, str]] = []
    n_frames = cached = 0
    full: FrameCacheError | None = None
    bar = Progress(len(jobs), "frames", unit="clip") if progress else None
    # the workers are forked: garbage PyAV objects of this process (a build's probes) must be freed
    # here, where their decoder threads live; a worker collecting one hangs for good
    gc.collect()
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = [
            pool.submit(_cache_one, str(cache), path, stream, render, steps_per_second)
            for _, path, stream in jobs
        ]
        for fut in as_completed(futures):
            try:
                path, n, err = fut.result()
            except CancelledError:
                continue
            except FrameCacheError as exc:  # the disk is full: stop, the clips in flight finish
                full = full or exc
                for other in futures:
                    other.cancel()
                continue
            n_frames += n
            cached += err is None
            if err:
                failed.append((path, err))
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    if full is not None:
        raise RuntimeError(
            f"{full}. {cached} of {len(jobs)} clips are cached; make room and run the frames stage "
            "again: it decodes only the clips not cached yet"
        )
    summary = {"clips": len(jobs), "frames": n_frames, "failed": len(failed), "cache": str(cache)}
    if failed:
        for path, err in sorted(failed):
            log.error("cannot decode %s: %s", path, err)
        raise RuntimeError(
            f"{len(failed)} of {len(jobs)} clips could not be decoded (first: {sorted(failed)[0][1]})"
        )
    return summary
