"""The frames of a stream, and the frames stage that decodes every clip once into the frame cache.

    python -m data_builders frames data=mix_p3i data.dir=/data/mix_p3i            # every split, render=hd
    python -m data_builders frames records=/data/built/nexar render=toy workers=16

One rule, used by the frames stage, SFT, GRPO and evaluation alike:

- A stream's decision steps are ``stream_steps.step_times(stream, steps_per_second)`` (record clock); the
  frame of a step is the one on screen at ``time - video_offset`` on the file's own clock.
- Frames are sized by the run's :class:`~data_builders.config.RenderConfig` (``max_pixels``, aspect
  kept) and read with its ``video_backend``.
- The cache entry of a stream is keyed by the video file, the file times of *all* its steps, the
  pixel budget and the entry format (``render.frame_format``) (:class:`~data_builders.frame_cache.FrameCache`): a training window is cut from the whole
  stream's frames (:func:`stream_frames` with ``window``), so every stage reads the entry the frames
  stage wrote, under ``paths.frame_cache_dir``.

The stage spreads clips over ``workers`` processes with a progress bar. Over many nodes, ``shard=i/n``
(``slurm/frames.sh``, a Slurm array job: task ``i`` of ``n``) decodes only the clips whose
:func:`clip_shard` is ``i``: the SHA-1 of the clip's identity (the video's resolved absolute path,
``clip_start``, ``clip_end`` and ``video_offset``, the four that decide its cache entry besides the
render) modulo ``n``. The split depends on the clip alone, not on the record order or on which
record file lists it, so the ``n`` shards together decode every clip once, and a clip listed by two
splits of a mixture falls in the same shard for both. Each shard writes into the one shared cache:
an entry is written to a temp file named by its host, process and a random token, and renamed into
place once whole, so concurrent writers on a shared file system never cut or lose an entry (two
writers of one key both rename a whole, identical entry; the last rename stays). Unreadable videos, and
clips that run past the end of their video, are listed (file, record, clip and reason) and make the
stage fail after every other clip is cached. A disk that runs out of space stops the stage at once,
naming the cache folder: the entries written are whole, so a rerun decodes only the rest. The stage
first removes the temp files of cache entries whose writer died mid-write (a killed frames stage or
training run: the entry's lock is free), naming each in the log; a live writer's are left alone. A
temp file another host writes is removed only once it has not changed for
:data:`FOREIGN_TMP_STALE_S` (file locks are not seen across nodes on every shared file system), so a
shard killed part way leaves nothing behind that its rerun, or any later stage, trips over: the
rerun decodes the clips it had not renamed into place, and every other entry stays.
"""

from __future__ import annotations

import gc
import hashlib
import logging
import math
import os
import re
import signal
import sys
import threading
import time
from concurrent.futures import CancelledError, ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import numpy as np

from data_builders.config import RenderConfig
from data_builders.frame_cache import FrameCache, FrameCacheError, load_frames, writer_host
from data_builders.record_io import load_streams, resolve_video
from data_builders.records import Stream
from data_builders.splits import records_file
from data_builders.stream_steps import step_times
from data_builders.video import VideoError
from infra.files import remove_dead_writes
from infra.progress import Progress

log = logging.getLogger("data_builders")
#: A cache temp file written by another host is treated as dead once unchanged this long (s): a live
#: writer appends every frame as it is decoded.
FOREIGN_TMP_STALE_S = 3600.0
#: ``prctl``'s option: the signal a process gets when its parent dies (linux/prctl.h).
PR_SET_PDEATHSIG = 1
_SHARD = re.compile(r"\s*(\d+)\s*/\s*(\d+)\s*")


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
            frame_format=render.frame_format,
        )
    except VideoError as exc:
        offset = f", video_offset {stream.video_offset:g} s" if stream.video_offset else ""
        clip = f"clip {stream.clip_start:.3f}-{stream.clip_end:.3f} s{offset}"
        raise VideoError(exc.path, f"{exc.reason} (record {stream.id}, {clip})") from None
    if window is None:
        return frames
    return np.ascontiguousarray(frames[window[0] : window[1]])  # decodes a compressed entry's window only


def clip_jobs(data: str | Path) -> list[tuple[int, Path, Stream]]:
    """(first record line, video path, stream) of each distinct clip of a record set, in record
    order: streams with the same video and step times share one cache entry."""
    records = records_file(data)
    jobs, seen = [], set()
    for k, s in enumerate(load_streams(records)):
        video = resolve_video(s, records)
        key = (str(video), s.clip_start, s.clip_end, s.video_offset)
        if key not in seen:
            seen.add(key)
            jobs.append((k, video, s))
    return jobs


def parse_shard(shard: str | None) -> tuple[int, int]:
    """``"i/n"`` -> ``(i, n)`` (``None``: ``(0, 1)``, the whole set); ``ValueError`` naming the option
    unless ``n >= 1`` and ``0 <= i < n``.

    >>> parse_shard("2/4"), parse_shard(None)
    ((2, 4), (0, 1))
    """
    if shard is None:
        return 0, 1
    m = _SHARD.fullmatch(str(shard))
    if not m:
        raise ValueError(f"shard={shard}: expected i/n, two whole numbers (shard i of n, e.g. shard=0/4)")
    i, n = int(m.group(1)), int(m.group(2))
    if n < 1:
        raise ValueError(f"shard={shard}: the number of shards n must be at least 1")
    if i >= n:
        raise ValueError(f"shard={shard}: the shard index must be 0 to {n - 1} (shards count from 0)")
    return i, n


def clip_shard(video: str | Path, stream: Stream, n: int) -> int:
    """The shard (``0 .. n-1``) of a clip: SHA-1 of its video's resolved path and its clip bounds and
    offset, modulo ``n`` (see the module docstring)."""
    ident = f"{Path(video).resolve()}|{stream.clip_start!r}|{stream.clip_end!r}|{stream.video_offset!r}"
    return int.from_bytes(hashlib.sha1(ident.encode()).digest()[:8], "big") % n


def dead_cache_writes(cache: str | Path) -> list[Path]:
    """The cache's temp files that may be a dead writer's: this host's (their lock tells), and
    other hosts' unchanged for :data:`FOREIGN_TMP_STALE_S`."""
    here, now, out = writer_host(), time.time(), []
    for tmp in sorted(Path(cache).glob("*/*.tmp")):
        writer = tmp.name.split(".")[-2]  # <host>_<pid>_<random>; a bare pid before hosts were named
        host = writer.rsplit("_", 2)[0] if writer.count("_") == 2 else here
        try:
            if host == here or now - os.stat(tmp).st_mtime > FOREIGN_TMP_STALE_S:
                out.append(tmp)
        except FileNotFoundError:  # renamed into place meanwhile
            continue
    return out


def end_with_parent(parent: int) -> None:
    """A worker's start: it ends when ``parent`` (the stage) dies, even by SIGKILL, instead of waiting
    on its task pipe for ever (the workers hold that pipe's other end, so it never closes). On Linux
    the kernel sends it SIGKILL then (``prctl(PR_SET_PDEATHSIG)``); elsewhere, and for a parent that
    died before the call, a thread checks every second that its parent is still ``parent``."""
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    if os.getppid() != parent:  # gone already
        os._exit(1)
    threading.Thread(target=watch, name="end-with-parent", daemon=True).start()


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


def _decode_all(
    jobs: list[tuple[int, Path, Stream]],
    cache: str,
    render: RenderConfig,
    steps_per_second: float,
    workers: int,
    bar: Progress | None,
) -> tuple[int, int, list[tuple[str, str]], FrameCacheError | None]:
    """Decode the jobs' clips into the cache in ``workers`` processes: the frames decoded, the
    clips cached, the (video, reason) of those that failed, and the error of a full disk, after
    which the jobs not started are cancelled."""
    failed: list[tuple[str, str]] = []
    n_frames = cached = 0
    full: FrameCacheError | None = None
    # the workers are forked: garbage PyAV objects of this process (a build's probes) must be freed
    # here, where their decoder threads live; a worker collecting one hangs for good
    gc.collect()
    with ProcessPoolExecutor(
        max_workers=workers, initializer=end_with_parent, initargs=(os.getpid(),)
    ) as pool:
        futures = [
            pool.submit(_cache_one, cache, path, stream, render, steps_per_second) for _, path, stream in jobs
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
    return n_frames, cached, failed, full


def cache_frames(
    data: str | Path,
    cache: str | Path,
    render: RenderConfig | None = None,
    steps_per_second: float = 1.0,
    workers: int = 4,
    progress: bool = True,
    shard: str | None = None,
) -> dict[str, Any]:
    """Fill the frame cache ``cache`` (``paths.frame_cache_dir``) for ``data`` (a build dir or a
    records file), or with ``shard="i/n"`` for the clips of shard ``i`` (:func:`clip_shard`); returns
    a summary (``clips``: those of this shard, ``clips_total``: of the whole set). Raises
    ``RuntimeError`` listing the videos that could not be decoded, after caching all the others; ``RuntimeError`` naming the cache folder at once when its
    disk cannot take an entry (:class:`~data_builders.frame_cache.FrameCacheError`); ``ValueError`` for
    bad options, before any work."""
    check_frames_options(steps_per_second, workers)
    index, n_shards = parse_shard(shard)
    remove_dead_writes(dead_cache_writes(cache))
    render = render or RenderConfig()
    every = clip_jobs(data)
    jobs = [job for job in every if clip_shard(job[1], job[2], n_shards) == index]
    bar = Progress(len(jobs), "frames", unit="clip") if progress else None
    n_frames, cached, failed, full = _decode_all(jobs, str(cache), render, steps_per_second, workers, bar)
    if bar is not None:
        bar.close()
    if full is not None:
        raise FrameCacheError(
            f"{full}. {cached} of {len(jobs)} clips are cached; make room and run the frames stage "
            "again: it decodes only the clips not cached yet"
        )
    summary = {
        "clips": len(jobs),
        "clips_total": len(every),
        "frames": n_frames,
        "failed": len(failed),
        "cache": str(cache),
        "shard": f"{index}/{n_shards}",
    }
    if failed:
        for path, err in sorted(failed):
            log.error("cannot decode %s: %s", path, err)
        raise RuntimeError(
            f"{len(failed)} of {len(jobs)} clips could not be decoded (first: {sorted(failed)[0][1]})"
        )
    return summary
