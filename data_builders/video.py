"""Video reading: RGB frames of a clip at given times (decoding; the on-disk cache of decoded frames
is :mod:`data_builders.frame_cache`).

One function, :func:`read_frames`, serves the renderer, the streaming engine, the builders and the
frame-cache stage (through :class:`~data_builders.frame_cache.FrameCache`).

- **Time axis.** A time ``t`` (seconds) counts from the video stream's first presentation time
  (``VideoInfo.start_time``), as players show it: ``t = 0`` is the first frame, also in an MPEG-TS
  file whose timestamps start at 1.48 s.
- **Frame rule.** The frame returned for ``t`` is the one on screen at ``t``: the last frame whose
  presentation time (from the start) is ``<= t`` (the first frame for times before it).
- **Orientation.** A display matrix (phones store portrait video sideways with a 90-degree
  rotation) is applied: frames come out upright, as players show them, and ``VideoInfo.width`` /
  ``height`` are the displayed size.
- **Size.** Frames are resized (aspect kept, PIL bilinear) so that ``height * width <= max_pixels``,
  each as it is decoded: :func:`read_frames` holds its output and one source frame, and the frame
  cache writes each frame to disk as it comes, so peak memory does not grow with the source's
  resolution times its duration.
- **Back ends.** ``decord`` (fast random access) reads unrotated mp4/mov and mkv/webm files; every
  other file is read with PyAV (``pyav``), which also serves when decord is missing or fails. decord
  returns wrong frames, silently, from MPEG-TS/PS files (it seeks by a timestamp it got wrong: one
  second off with B-frames) and rotates mp4 but not mkv, so both back ends return the same frames
  only this way. decord also scrambles some narrow frames (1 to 72 px wide: an ``(H, W, 4..96)``
  array of misplaced bytes); every frame it returns is checked against the probed size, and a file
  whose frames do not match is read with PyAV instead (logged, naming the file).
- **Broken files** raise :class:`VideoError` naming the file and the reason: missing, empty, not a
  video, undecodable, or ending more than :data:`END_SLACK_S` before the duration its header states
  when later frames are asked (the message gives the last good frame's time). A failed read leaves
  nothing in the frame cache.
- **Past the end.** Frames asked more than :data:`PAST_END_SLACK_S` after the end of a complete
  video raise :class:`VideoError` (the last time asked and the video's duration): a clip that runs
  past its video is never padded with the last frame.
- **Aspect ratio.** A video, or a frame sized to the pixel budget, longer than
  :data:`MAX_ASPECT_RATIO` times its width (or wider than that times its height) raises
  :class:`VideoError`: the model's image processor refuses such frames.

>>> import tempfile, pathlib
>>> read_frames(pathlib.Path(tempfile.gettempdir()) / "no-such-video.mp4", [0.0])
Traceback (most recent call last):
...
data_builders.video.VideoError: ...no-such-video.mp4: file does not exist
"""

from __future__ import annotations

import bisect
import logging
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

log = logging.getLogger("data_builders")

BACKENDS = ("decord", "pyav")

#: Default frame pixel budget (448 x 448): a Qwen3-VL frame of ~196 visual tokens after merging.
DEFAULT_MAX_PIXELS = 448 * 448

#: A stream may end this many seconds before its stated duration (audio outlasting the video, a
#: rounded header) before it counts as truncated.
END_SLACK_S = 1.0

#: Frames may be asked this many seconds past the end of the video (its stated duration, or its
#: last frame's end if later): container durations are rounded. The build allows a clip to end as
#: far past the probed duration (``data_builders.build.DURATION_SLACK``).
PAST_END_SLACK_S = 0.5

#: The longest side of a frame may be at most this many times its shortest (Qwen-VL image
#: processors refuse frames beyond 200:1).
MAX_ASPECT_RATIO = 200

#: Containers decord reads right (checked frame by frame against PyAV); others go to PyAV.
DECORD_FORMATS = frozenset({"mov,mp4,m4a,3gp,3g2,mj2", "matroska,webm"})

_EPS = 1e-6  # seconds: timestamps within this of a requested time count as at it


class VideoError(RuntimeError):
    """A video that cannot be read: the message names the file and the reason."""

    def __init__(self, path: str | Path, reason: str):
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


@dataclass(frozen=True)
class VideoInfo:
    """What :func:`probe_video` learns about a file: duration (s), average fps, frames, and the
    displayed size (px, after the display rotation); ``rotation`` is the display matrix's
    counter-clockwise angle (degrees) that frames are turned by, ``start_time`` the first
    presentation time (s; the origin of frame times) and ``container`` the demuxer's name."""

    duration: float
    fps: float
    n_frames: int
    width: int
    height: int
    rotation: int = 0
    start_time: float = 0.0
    container: str = ""


def check_file(path: Path) -> None:
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


def _stated_duration(container, stream) -> float:
    """The video stream's duration from the header: the stream's own, else its Matroska
    ``DURATION`` tag, else the container's (which may include a longer audio track)."""
    if stream.duration is not None and stream.time_base is not None:
        return float(stream.duration * stream.time_base)
    tag = stream.metadata.get("DURATION")
    if tag:
        h, m, s = tag.split(":")
        return int(h) * 3600 + int(m) * 60 + float(s)
    if container.duration is not None:
        return container.duration / 1_000_000
    return 0.0


def probe_video(path: str | Path, check_end: bool = True) -> VideoInfo:
    """Open a video, read its header and decode its first frame (for the display rotation); with
    ``check_end`` also decode its last seconds, which catches files cut short after a valid header.
    Raises :class:`VideoError`."""
    path = Path(path)
    check_file(path)
    container = _open_pyav(path)
    try:
        stream = container.streams.video[0]
        tb = stream.time_base
        fps = float(stream.average_rate or stream.guessed_rate or 0.0)
        if stream.start_time is not None and tb is not None:
            start = float(stream.start_time * tb)
        else:
            start = (container.start_time or 0) / 1_000_000
        duration = _stated_duration(container, stream)
        n_frames = int(stream.frames or round(duration * fps))
        if n_frames <= 0 or duration <= 0 or fps <= 0:
            raise VideoError(path, f"zero-length video stream ({n_frames} frames, {duration:.3f} s)")
        try:
            first = next(iter(container.decode(stream)), None)
        except Exception as exc:
            raise VideoError(path, f"decoding the first frame failed (corrupt?): {exc}") from None
        if first is None:
            raise VideoError(path, "no frame could be decoded")
        rotation = int(first.rotation)
        if rotation % 90:
            raise VideoError(path, f"display rotation of {rotation} degrees (only multiples of 90 are read)")
        width, height = stream.width, stream.height
        if rotation % 180:
            width, height = height, width
        _check_aspect(path, width, height)
        info = VideoInfo(duration, fps, n_frames, width, height, rotation, start, container.format.name)
        if check_end:
            last = None
            try:
                container.seek(int((start + max(0.0, duration - 2.0)) / tb), stream=stream, backward=True)
                for frame in container.decode(stream):
                    last = frame.time - start if frame.time is not None else last
            except Exception as exc:
                raise VideoError(path, f"decoding the end of the stream failed (truncated?): {exc}") from None
            if last is None or last + 1.0 / fps < duration - END_SLACK_S:
                raise VideoError(path, _ends_early(info, last))
        return info
    finally:
        container.close()


def _ends_early(info: VideoInfo, last: float | None, asked: float | None = None) -> str:
    if last is None:
        where = "no frame decodes in its last 2 s"
    else:
        where = f"it ends at {last + 1.0 / info.fps:.3f} s: last good frame at {last:.3f} s"
    more = f", frames asked up to {asked:.3f} s" if asked is not None else ""
    return (
        f"the video stream ends before its stated duration {info.duration:.3f} s (truncated?): {where}{more}"
    )


def _check_end(path: Path, info: VideoInfo, last: float, asked: float) -> None:
    """Raise when a frame is asked after the stream's end: from a stream that ends before its stated
    duration (serving the last frame there would pass a truncated file off as a still scene), or
    more than :data:`PAST_END_SLACK_S` past the end of a complete one (a clip that runs past its
    video would be padded with its last frame)."""
    end = last + 1.0 / info.fps
    if asked > end + END_SLACK_S and end < info.duration - END_SLACK_S:
        raise VideoError(path, _ends_early(info, last, asked))
    if asked > max(end, info.duration) + PAST_END_SLACK_S:
        raise VideoError(
            path,
            f"frames asked up to {asked:.3f} s but the video lasts {info.duration:.3f} s (its last frame "
            f"ends at {end:.3f} s): the clip runs past the end of the video",
        )


def _check_aspect(path: Path, width: int, height: int, budget: str = "") -> None:
    """Raise for a frame the model's image processor refuses (beyond :data:`MAX_ASPECT_RATIO`)."""
    ratio = max(width, height) / max(1, min(width, height))
    if ratio > MAX_ASPECT_RATIO:
        raise VideoError(
            path,
            f"frames of {width} x {height} px{budget} have an aspect ratio of {ratio:.0f}:1; the model's "
            f"image processor takes at most {MAX_ASPECT_RATIO}:1",
        )


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


def _pick(frame_times: Sequence[float], times: Sequence[float]) -> list[int]:
    """Index of the frame on screen at each time (last with pts <= t, else the first)."""
    return [max(0, bisect.bisect_right(frame_times, t + _EPS) - 1) for t in times]


class _DecordFailed(Exception):
    """decord is missing or could not read the file right: PyAV reads it instead (logged, unless
    decord is not installed)."""

    def __init__(self, reason: str, warn: bool = True):
        super().__init__(reason)
        self.warn = warn


def _decord_groups(path: Path, info: VideoInfo, times: Sequence[float]) -> Iterator[tuple[list[int], object]]:
    """(indices into ``times``, full-size RGB frame) per distinct frame, in file order."""
    try:
        import decord
    except ImportError:
        raise _DecordFailed("decord is not installed", warn=False) from None
    try:
        reader = decord.VideoReader(str(path), ctx=decord.cpu(0), num_threads=1)
        n = len(reader)
        if n == 0:
            raise _DecordFailed("zero frames")
        # decord's timestamps count from the stream's first presentation time, as ours do
        starts = reader.get_frame_timestamp(np.arange(n))[:, 0].tolist()
    except Exception as exc:  # decord raises its own error type for broken files
        raise _DecordFailed(str(exc)) from None
    _check_end(path, info, starts[-1], max(times))
    serves: dict[int, list[int]] = {}
    for i, p in enumerate(_pick(starts, times)):
        serves.setdefault(p, []).append(i)
    # one frame per call: decord's batch buffers, freed between resizes, fragment the heap (8-frame
    # batches peaked at 430 MB on a 10-minute 720p file, single frames at ~170 MB, and ran no faster)
    for p in sorted(serves):
        try:
            frame = reader[p].asnumpy()
        except Exception as exc:
            raise _DecordFailed(str(exc)) from None
        if frame.shape != (info.height, info.width, 3):  # scrambled (narrow frames): never served
            raise _DecordFailed(
                f"decord returned frames of shape {frame.shape}, not ({info.height}, {info.width}, 3)"
            )
        yield serves[p], frame


def _pyav_groups(
    path: Path, info: VideoInfo, times: Sequence[float], seek: bool = True
) -> Iterator[tuple[list[int], object]]:
    """(indices into ``times``, decoded ``av.VideoFrame``) per frame on screen, in file order:
    decodes forward from a keyframe before the first time, keeping only the frame on screen."""
    order = sorted(range(len(times)), key=times.__getitem__)
    first = times[order[0]]
    container = _open_pyav(path)
    try:
        stream = container.streams.video[0]
        seek = seek and first > 1.0
        if seek:
            target = int((info.start_time + first - 1.0) / stream.time_base)
            container.seek(target, stream=stream, backward=True)
        prev, prev_t, k = None, None, 0
        try:
            for frame in container.decode(stream):
                if frame.time is None:
                    raise VideoError(path, f"a frame without a presentation time after {prev_t} s")
                t = float(frame.time) - info.start_time
                if prev is None and seek and t > first + _EPS:  # the seek overshot: read from the start
                    break
                serve = []
                while k < len(order) and t > times[order[k]] + _EPS:
                    serve.append(order[k])
                    k += 1
                if serve:
                    yield serve, prev if prev is not None else frame
                if k == len(order):
                    return
                prev, prev_t = frame, t
        except VideoError:
            raise
        except Exception as exc:
            raise VideoError(
                path, f"decoding failed after {prev_t} s (truncated or corrupt?): {exc}"
            ) from None
    finally:
        container.close()
    if prev is None and seek:
        yield from _pyav_groups(path, info, times, seek=False)
        return
    if prev is None:
        raise VideoError(path, "no frame could be decoded")
    _check_end(path, info, prev_t, times[order[-1]])
    yield order[k:], prev


def decoded_frames(
    path: Path, times: Sequence[float], max_pixels: int, backend: str, info: VideoInfo
) -> Iterator[tuple[list[int], np.ndarray]]:
    """(indices into ``times``, upright resized frame) per distinct frame; every index comes once,
    except after a decord failure, when PyAV serves every index again."""
    disp_h, disp_w = fit_pixels(info.height, info.width, max_pixels)
    _check_aspect(path, disp_w, disp_h, f" (sized to max_pixels={max_pixels})")
    turns = (info.rotation // 90) % 4
    size = (disp_h, disp_w) if turns % 2 == 0 else (disp_w, disp_h)  # stored orientation (h, w)
    groups = None
    if backend == "decord" and info.rotation == 0 and info.container in DECORD_FORMATS:
        groups = _decord_groups(path, info, times)
    while True:
        if groups is None:
            groups = _pyav_groups(path, info, times)
        try:
            for idx, raw in groups:
                frame = raw if isinstance(raw, np.ndarray) else raw.to_ndarray(format="rgb24")
                yield idx, np.ascontiguousarray(np.rot90(_resize(frame, size), turns))
            return
        except _DecordFailed as exc:
            (log.warning if exc.warn else log.debug)("%s: %s; read with PyAV instead", path, exc)
            groups = None


def _resize(frame: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    if frame.shape[:2] == size:
        return frame
    from PIL import Image

    return np.asarray(Image.fromarray(frame).resize((size[1], size[0]), Image.BILINEAR))


def clip_times(start: float, end: float, fps: float) -> list[float]:
    """Times ``start + k / fps`` for ``k = 0 .. n-1``, ``n = max(1, floor((end - start) * fps))``."""
    n = max(1, math.floor((end - start) * fps + 1e-6))
    return [start + k / fps for k in range(n)]


def prepare_read(path: str | Path, backend: str) -> tuple[Path, VideoInfo]:
    path = Path(path)
    if backend not in BACKENDS:
        raise ValueError(f"unknown video backend {backend!r}; choose one of {BACKENDS}")
    return path, probe_video(path, check_end=False)


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
    """RGB frames ``(N, H, W, 3) uint8`` of a video at ``times`` (seconds from the first frame), or
    at ``fps`` between ``start`` and ``end`` (the end defaults to the file's duration).

    ``backend`` is ``"decord"`` or ``"pyav"``; files decord does not read right, and files it fails
    on, are read with PyAV (see the module docstring).
    """
    if times is None and fps is None:
        raise ValueError("read_frames needs times or fps")
    path, info = prepare_read(path, backend)
    if times is None:
        times = clip_times(start, info.duration if end is None else end, fps)
    times = [float(t) for t in times]
    if not times:
        return np.zeros((0, 0, 0, 3), dtype=np.uint8)
    out = None
    for idx, frame in decoded_frames(path, times, max_pixels, backend, info):
        if out is None:
            out = np.empty((len(times), *frame.shape), dtype=np.uint8)
        out[idx] = frame
    return out
