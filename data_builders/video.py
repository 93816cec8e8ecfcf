"""Video reading: RGB frames of a clip at given times, with an optional on-disk frame cache.

One function, :func:`read_frames`, serves the renderer, the streaming engine, the builders and the
frame-cache stage. The frame returned for a time ``t`` (seconds, file timeline) is the one on
screen at ``t``: the last decoded frame whose presentation time is ``<= t`` (the first frame for
times before it). Frames are resized (aspect kept) so that ``height * width <= max_pixels``.

Back ends: ``decord`` (fast random access) first, ``pyav`` as the fallback, selectable in config.
Missing, zero-length and truncated files raise :class:`VideoError` naming the file and the reason.

>>> import tempfile, pathlib
>>> read_frames(pathlib.Path(tempfile.gettempdir()) / "no-such-video.mp4", [0.0])
Traceback (most recent call last):
...
data_builders.video.VideoError: ...no-such-video.mp4: file does not exist
"""

from __future__ import annotations

import bisect
import hashlib
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

BACKENDS = ("decord", "pyav")
#: Default frame pixel budget (448 x 448): a Qwen3-VL frame of ~196 visual tokens after merging.
DEFAULT_MAX_PIXELS = 448 * 448


class VideoError(RuntimeError):
    """A video that cannot be read: the message names the file and the reason."""

    def __init__(self, path: str | Path, reason: str):
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


@dataclass(frozen=True)
class VideoInfo:
    """What :func:`probe_video` learns about a file: duration (s), average fps, frames, size (px)."""

    duration: float
    fps: float
    n_frames: int
    width: int
    height: int


def _check_file(path: Path) -> None:
    if not path.exists():
        raise VideoError(path, "file does not exist")
    if not path.is_file():
        raise VideoError(path, "not a regular file")
    if path.stat().st_size == 0:
        raise VideoError(path, "file is empty (zero length)")


def _open_pyav(path: Path):
    import av

    try:
        container = av.open(str(path))
    except Exception as exc:  # av raises many error types for broken containers
        raise VideoError(path, f"cannot open container (truncated or not a video?): {exc}") from None
    if not container.streams.video:
        container.close()
        raise VideoError(path, "no video stream in the file")
    return container


def probe_video(path: str | Path, check_end: bool = True) -> VideoInfo:
    """Open a video and read its header; with ``check_end`` also decode its last frames, which
    catches files cut short after a valid header. Raises :class:`VideoError`."""
    path = Path(path)
    _check_file(path)
    container = _open_pyav(path)
    try:
        stream = container.streams.video[0]
        fps = float(stream.average_rate or stream.guessed_rate or 0.0)
        if stream.duration is not None and stream.time_base is not None:
            duration = float(stream.duration * stream.time_base)
        elif container.duration is not None:
            duration = container.duration / 1_000_000
        else:
            duration = 0.0
        n_frames = int(stream.frames or round(duration * fps))
        if n_frames <= 0 or duration <= 0 or fps <= 0:
            raise VideoError(path, f"zero-length video stream ({n_frames} frames, {duration:.3f} s)")
        if check_end:
            last_time = None
            try:
                container.seek(max(0, int((duration - 2.0) / stream.time_base)), stream=stream, backward=True)
                for frame in container.decode(stream):
                    last_time = frame.time
            except Exception as exc:
                raise VideoError(path, f"decoding the end of the stream failed (truncated?): {exc}") from None
            if last_time is None or last_time < duration - 2.0 - 1.0 / fps:
                raise VideoError(
                    path,
                    f"stream ends at {last_time}s before its stated duration {duration:.3f}s (truncated?)",
                )
        return VideoInfo(
            duration=duration, fps=fps, n_frames=n_frames, width=stream.width, height=stream.height
        )
    finally:
        container.close()


def fit_pixels(height: int, width: int, max_pixels: int) -> tuple[int, int]:
    """(h, w) scaled down, aspect kept, so that h * w <= max_pixels; never scaled up.

    >>> fit_pixels(480, 640, 64 * 64)
    (55, 73)
    """
    if height * width <= max_pixels:
        return height, width
    scale = math.sqrt(max_pixels / (height * width))
    h, w = max(1, int(height * scale)), max(1, int(width * scale))
    return h, w


def _resize(frames: np.ndarray, max_pixels: int) -> np.ndarray:
    h, w = fit_pixels(frames.shape[1], frames.shape[2], max_pixels)
    if (h, w) == frames.shape[1:3]:
        return frames
    from PIL import Image

    return np.stack([np.asarray(Image.fromarray(f).resize((w, h), Image.BILINEAR)) for f in frames])


def _pick(frame_times: Sequence[float], times: Sequence[float]) -> list[int]:
    """Index of the frame on screen at each time (last with pts <= t, else the first)."""
    eps = 1e-6
    return [max(0, bisect.bisect_right(frame_times, t + eps) - 1) for t in times]


def _read_decord(path: Path, times: Sequence[float]) -> np.ndarray:
    import decord

    try:
        reader = decord.VideoReader(str(path), ctx=decord.cpu(0), num_threads=1)
        n = len(reader)
        if n == 0:
            raise VideoError(path, "zero-length video stream (0 frames)")
        starts = reader.get_frame_timestamp(np.arange(n))[:, 0].tolist()
        return reader.get_batch(_pick(starts, times)).asnumpy()
    except VideoError:
        raise
    except Exception as exc:  # decord raises its own error type for broken files
        raise VideoError(path, f"decoding failed (truncated or corrupt?): {exc}") from None


def _read_pyav(path: Path, times: Sequence[float]) -> np.ndarray:
    container = _open_pyav(path)
    try:
        stream = container.streams.video[0]
        order = sorted(range(len(times)), key=lambda i: times[i])
        out: list[np.ndarray | None] = [None] * len(times)
        start = times[order[0]]
        if start > 1.0:
            container.seek(int((start - 1.0) / stream.time_base), stream=stream, backward=True)
        prev = None
        k = 0
        try:
            for frame in container.decode(stream):
                t = float(frame.time)
                while k < len(order) and t > times[order[k]] + 1e-6:
                    out[order[k]] = prev if prev is not None else frame.to_ndarray(format="rgb24")
                    k += 1
                if k == len(order):
                    break
                prev = frame.to_ndarray(format="rgb24")
        except Exception as exc:
            raise VideoError(path, f"decoding failed (truncated or corrupt?): {exc}") from None
        if prev is None and k < len(order):
            raise VideoError(path, "no frame could be decoded")
        for i in order[k:]:
            out[i] = prev
        return np.stack(out)
    finally:
        container.close()


_READERS = {"decord": _read_decord, "pyav": _read_pyav}


def clip_times(start: float, end: float, fps: float) -> list[float]:
    """Times ``start + k / fps`` for ``k = 0 .. n-1``, ``n = max(1, floor((end - start) * fps))``."""
    n = max(1, math.floor((end - start) * fps + 1e-6))
    return [start + k / fps for k in range(n)]


def read_frames(
    path: str | Path,
    times: Sequence[float] | None = None,
    *,
    fps: float | None = None,
    start: float = 0.0,
    end: float | None = None,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    backend: str = "decord",
) -> np.ndarray:
    """RGB frames ``(N, H, W, 3) uint8`` of a video at ``times`` (seconds, file timeline), or at
    ``fps`` between ``start`` and ``end`` (the end defaults to the file's duration).

    ``backend`` is ``"decord"`` or ``"pyav"``; when decord fails on a file that PyAV can read,
    PyAV's frames are returned (decord is missing on some platforms and picky on some codecs).
    """
    path = Path(path)
    if backend not in _READERS:
        raise ValueError(f"unknown video backend {backend!r}; choose one of {BACKENDS}")
    _check_file(path)
    if times is None:
        if fps is None:
            raise ValueError("read_frames needs times or fps")
        if end is None:
            end = probe_video(path, check_end=False).duration
        times = clip_times(start, end, fps)
    if len(times) == 0:
        return np.zeros((0, 0, 0, 3), dtype=np.uint8)
    try:
        frames = _READERS[backend](path, list(times))
    except VideoError:
        if backend != "decord":
            raise
        frames = _read_pyav(path, list(times))
    return _resize(frames, max_pixels)


class FrameCache:
    """Decode a clip once, then serve its frames from disk (``.npy``, no pickle).

    The key covers the file (absolute path, size, mtime), the sampled times (which encode fps and
    clip bounds) and the pixel budget, so a re-encoded file or another resolution misses the cache.
    Writes are atomic (temp file + rename), so concurrent workers and crashed runs are safe.
    """

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.hits = 0
        self.misses = 0

    def key(self, path: str | Path, times: Sequence[float], max_pixels: int) -> str:
        p = Path(path).resolve()
        st = p.stat()
        parts = [
            str(p),
            str(st.st_size),
            str(st.st_mtime_ns),
            str(max_pixels),
            ",".join(f"{t:.6f}" for t in times),
        ]
        return hashlib.sha1("|".join(parts).encode()).hexdigest()

    def frames(
        self,
        path: str | Path,
        times: Sequence[float],
        max_pixels: int = DEFAULT_MAX_PIXELS,
        backend: str = "decord",
    ) -> np.ndarray:
        """Frames as :func:`read_frames` returns them, decoded at most once per key."""
        _check_file(Path(path))
        key = self.key(path, times, max_pixels)
        target = self.root / key[:2] / f"{key}.npy"
        if target.exists():
            self.hits += 1
            # memory-mapped (copy on write): a caller slicing a window reads only those frames
            return np.load(target, allow_pickle=False, mmap_mode="c")
        self.misses += 1
        frames = read_frames(path, times, max_pixels=max_pixels, backend=backend)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(f".{os.getpid()}.tmp")
        with tmp.open("wb") as fh:
            np.save(fh, frames, allow_pickle=False)
        os.replace(tmp, target)
        return frames


def load_frames(
    path: str | Path,
    times: Sequence[float],
    *,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    backend: str = "decord",
    cache: FrameCache | None = None,
) -> np.ndarray:
    """:func:`read_frames` through ``cache`` when one is given."""
    if cache is None:
        return read_frames(path, times, max_pixels=max_pixels, backend=backend)
    return cache.frames(path, times, max_pixels=max_pixels, backend=backend)
