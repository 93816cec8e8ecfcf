"""The frame cache stage: decode every clip of a record set once into the on-disk frame cache.

``python -m data_builders frames records=/data/built/nexar fps=1``

For each stream, the frames at its decision steps (``records.step_times`` at ``fps``, shifted by
``video_offset`` onto the file's clock) are decoded once and stored by
:class:`data_builders.video.FrameCache`; the trainers and the evaluator then read them from disk.
Clips are spread over ``workers`` processes with a progress bar. Unreadable videos are listed
(file and reason) and make the stage fail after every other clip is cached.
"""

from __future__ import annotations

import logging
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from data_builders.records import load_streams, resolve_video, step_times
from data_builders.video import DEFAULT_MAX_PIXELS, FrameCache, VideoError

log = logging.getLogger("data_builders")


def _records_file(data: Path) -> Path:
    return data / "records.jsonl" if data.is_dir() else data


def clip_jobs(data: str | Path, fps: float = 1.0) -> list[tuple[str, tuple[float, ...]]]:
    """Unique (video path, file times) pairs of a record set, in record order."""
    records = _records_file(Path(data))
    jobs, seen = [], set()
    for s in load_streams(records):
        times = tuple(round(t - s.video_offset, 6) for t in step_times(s, fps))
        job = (str(resolve_video(s, records)), times)
        if job not in seen:
            seen.add(job)
            jobs.append(job)
    return jobs


def _cache_one(
    cache_root: str, path: str, times: tuple[float, ...], max_pixels: int, backend: str
) -> tuple[str, int, str | None]:
    cache = FrameCache(cache_root)
    try:
        frames = cache.frames(path, list(times), max_pixels=max_pixels, backend=backend)
    except VideoError as exc:
        return path, 0, str(exc)
    return path, int(frames.shape[0]), None


def cache_frames(
    data: str | Path,
    fps: float = 1.0,
    cache: str | Path | None = None,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    backend: str = "decord",
    workers: int = 4,
    progress: bool = True,
) -> dict[str, Any]:
    """Fill the frame cache for ``data`` (a build dir or records file); returns a summary.

    ``cache`` defaults to ``<data dir>/frame_cache``. Raises ``RuntimeError`` listing the videos
    that could not be decoded (after caching all the others).
    """
    from tqdm import tqdm

    data = Path(data)
    cache_root = Path(cache) if cache else _records_file(data).parent / "frame_cache"
    jobs = clip_jobs(data, fps)
    failed: list[tuple[str, str]] = []
    n_frames = 0
    bar = tqdm(total=len(jobs), desc="frames", unit="clip", disable=not progress)
    with ProcessPoolExecutor(max_workers=max(1, workers)) as pool:
        futures = [
            pool.submit(_cache_one, str(cache_root), path, times, max_pixels, backend) for path, times in jobs
        ]
        for fut in as_completed(futures):
            path, n, err = fut.result()
            n_frames += n
            if err:
                failed.append((path, err))
            bar.update(1)
    bar.close()
    summary = {"clips": len(jobs), "frames": n_frames, "failed": len(failed), "cache": str(cache_root)}
    if failed:
        for path, err in sorted(failed):
            log.error("cannot decode %s: %s", path, err)
        raise RuntimeError(
            f"{len(failed)} of {len(jobs)} clips could not be decoded (first: {sorted(failed)[0][1]})"
        )
    return summary
