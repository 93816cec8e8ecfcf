"""Video reading: RGB frames of a clip at given times, with an optional on-disk frame cache.

One function, :func:`read_frames`, serves the renderer, the streaming engine, the builders and the
frame-cache stage (through :class:`FrameCache`).

- **Time axis.** A time ``t`` (seconds) counts from the video stream's first presentation time
  (``VideoInfo.start_time``), as players show it: ``t = 0`` is the first frame, also in an MPEG-TS
  file whose timestamps start at 1.48 s.
- **Frame rule.** The frame returned for ``t`` is the one on screen at ``t``: the last frame whose
  presentation time (from the start) is ``<= t`` (the first frame for times before it).
- **Orientation.** A display matrix (phones store portrait video sideways with a 90-degree
  rotation) is applied: frames come out upright, as players show them, and ``VideoInfo.width`` /
  ``height`` are the displayed size.
- **Size.** Frames are resized (aspect kept, PIL bilinear) so that ``height * width <= max_pixels``,
  each as it is decoded: :func:`read_frames` holds its output and one source frame, and
  :class:`FrameCache` writes each frame to disk as it comes, so peak memory does not grow with the
  source's resolution times its duration.
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
import errno
import functools
import hashlib
import logging
import math
import os
import re
import secrets
import socket
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from infra.files import WriterLock

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
#: errno values that mean the frame cache's disk cannot take a write (full, over quota, read-only,
#: not writable): :class:`FrameCacheError` names the folder.
_DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EFBIG})
#: Containers decord reads right (checked frame by frame against PyAV); others go to PyAV.
DECORD_FORMATS = frozenset({"mov,mp4,m4a,3gp,3g2,mj2", "matroska,webm"})
_EPS = 1e-6  # seconds: timestamps within this of a requested time count as at it


class VideoError(RuntimeError):
    """A video that cannot be read: the message names the file and the reason."""

    def __init__(self, path: str | Path, reason: str):
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


class FrameCacheError(RuntimeError):
    """The frame cache could not be written (a full disk, ...): the message names the folder, the
    entry and the video. Entries already in the cache are complete (each is renamed into place only
    once written whole) and a partial one is deleted, so a rerun redoes only what is missing."""


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
    _check_file(path)
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


def _frames(
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


def _prepare(path: str | Path, backend: str) -> tuple[Path, VideoInfo]:
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
    path, info = _prepare(path, backend)
    if times is None:
        times = clip_times(start, info.duration if end is None else end, fps)
    times = [float(t) for t in times]
    if not times:
        return np.zeros((0, 0, 0, 3), dtype=np.uint8)
    out = None
    for idx, frame in _frames(path, times, max_pixels, backend, info):
        if out is None:
            out = np.empty((len(times), *frame.shape), dtype=np.uint8)
        out[idx] = frame
    return out


def writer_host() -> str:
    """This host's name as cache temp files carry it (``[A-Za-z0-9-]`` only, no dots)."""
    return re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname().split(".")[0]) or "host"


def _tmp_name(target: Path) -> Path:
    """A temp file beside ``target`` no other writer can pick, on any host of a shared file system:
    ``<entry>.<host>_<pid>_<random>.tmp`` (process ids repeat across nodes)."""
    return target.with_name(f"{target.name}.{writer_host()}_{os.getpid()}_{secrets.token_hex(4)}.tmp")


def _write_npy(tmp: Path, frames: Iterator[tuple[list[int], np.ndarray]], n: int) -> None:
    """Write ``n`` frames to ``tmp`` as one ``.npy`` array, each frame as it comes."""
    written: set[int] = set()
    with tmp.open("wb") as fh:
        data = None
        for idx, frame in frames:
            if data is None:
                header = {"descr": "|u1", "fortran_order": False, "shape": (n, *frame.shape)}
                np.lib.format.write_array_header_1_0(fh, header)
                data = fh.tell()
            for i in idx:
                fh.seek(data + i * frame.nbytes)
                fh.write(frame.data)  # C-contiguous: written without a copy
                written.add(i)
    if len(written) != n:  # every reader serves every time; a gap would be a bug, never a black frame
        raise RuntimeError(f"{tmp}: {n - len(written)} of {n} frames were not written")


#: Frame-cache entry formats (``render.frame_format``): ``raw`` (``.npy``, memory-mapped), ``png``
#: (lossless), ``jpeg<q>`` / ``webp<q>`` (lossy at quality ``q``, 1-100; JPEG with 4:2:0 chroma).
FRAME_FORMAT_HELP = "raw, png, jpeg<quality> or webp<quality> (quality 1-100, e.g. jpeg90)"
_FORMAT = re.compile(r"(raw|png)|(jpeg|webp)(\d{1,3})")
_PIL_NAMES = {"png": "PNG", "jpeg": "JPEG", "webp": "WEBP"}
#: A compressed entry (``<key>.frames``): this magic, the format (16 bytes, ASCII, NUL-padded) and the
#: frame count, height and width (little-endian int64); then one (offset, length) int64 pair per
#: frame, offsets counted from the end of that table; then the encoded frames.
#: Version 2: the frame table holds each frame's crc32 (version 1, ``FRMCACHE``, held none: dropped).
ENCODED_MAGIC = b"FRMCACH2"
_ENCODED_MAGIC_V1 = b"FRMCACHE"
#: Columns of an entry's frame table: offset, length, crc32 of the stored bytes.
_TABLE_COLS = 3
_HEADER = 8 + 16 + 3 * 8


def parse_frame_format(frame_format: str) -> tuple[str, int | None]:
    """``(codec, quality)`` of a ``render.frame_format``; ``ValueError`` naming the option.

    >>> parse_frame_format("jpeg90"), parse_frame_format("raw")
    (('jpeg', 90), ('raw', None))
    """
    m = _FORMAT.fullmatch(str(frame_format))
    if m and m.group(1):
        return m.group(1), None
    if m and 1 <= int(m.group(3)) <= 100:
        return m.group(2), int(m.group(3))
    raise ValueError(f"render.frame_format={frame_format}: expected {FRAME_FORMAT_HELP}")


def encode_frame(frame: np.ndarray, frame_format: str) -> bytes:
    """One ``(H, W, 3)`` uint8 frame as a PNG, JPEG or WebP file's bytes (PIL)."""
    import io

    from PIL import Image

    codec, quality = parse_frame_format(frame_format)
    buf = io.BytesIO()
    options = {"quality": quality} if quality is not None else {}
    Image.fromarray(frame).save(buf, format=_PIL_NAMES[codec], **options)
    return buf.getvalue()


def decode_frame(blob: bytes) -> np.ndarray:
    """The ``(H, W, 3)`` uint8 frame of :func:`encode_frame`'s bytes."""
    import io

    from PIL import Image

    with Image.open(io.BytesIO(blob)) as img:
        return np.asarray(img.convert("RGB") if img.mode != "RGB" else img)


def _write_encoded(
    tmp: Path, frames: Iterator[tuple[list[int], np.ndarray]], n: int, frame_format: str
) -> None:
    """Write ``n`` frames to ``tmp`` as one compressed entry, each frame encoded as it comes (a frame
    serving several times is stored once)."""
    table = np.full((n, _TABLE_COLS), -1, dtype="<i8")
    shape = (0, 0)
    with tmp.open("wb") as fh:
        fh.write(bytes(_HEADER + table.nbytes))
        start = fh.tell()
        for idx, frame in frames:
            shape = frame.shape[:2]
            blob = encode_frame(frame, frame_format)
            table[idx] = (fh.tell() - start, len(blob), zlib.crc32(blob))
            fh.write(blob)
        if (table[:, 0] < 0).any():  # every reader serves every time; a gap would be a bug
            raise RuntimeError(f"{tmp}: {int((table[:, 0] < 0).sum())} of {n} frames were not written")
        fh.seek(0)
        fh.write(ENCODED_MAGIC + frame_format.encode().ljust(16, b"\0"))
        fh.write(np.array([n, *shape], dtype="<i8").tobytes() + table.tobytes())


def _read_table(fh, n: int) -> np.ndarray:
    """The frame table of ``n`` frames (offset, length, crc32 per row), read from ``fh``'s position."""
    return np.frombuffer(fh.read(8 * _TABLE_COLS * n), dtype="<i8").reshape(-1, _TABLE_COLS)


def _bad_frame(fh, table: np.ndarray, size: int) -> int | None:
    """The first frame whose stored bytes fail their crc32 (or lie past the file's ``size``), else None.
    Each distinct stored frame is read once (a frame serving several times is stored once)."""
    start = _HEADER + table.nbytes
    seen = set()
    for k, (offset, length, crc) in enumerate(table.tolist()):
        if (offset, length) in seen:
            continue
        seen.add((offset, length))
        if offset < 0 or length < 0 or start + offset + length > size:
            return k
        fh.seek(start + offset)
        if zlib.crc32(fh.read(length)) != crc:
            return k
    return None


class EncodedFrames:
    """The frames of a compressed cache entry, decoded when indexed: ``frames[k]`` is one
    ``(H, W, 3)`` uint8 frame, ``frames[a:b]`` (or a list of indices) an ``(N, H, W, 3)`` array, and
    ``np.asarray(frames)`` all of them. Only the frames asked are read and decoded, so a training
    window or the engine's chunk costs its own frames, like a slice of a memory-mapped raw entry.
    ``shape``, ``dtype``, ``ndim`` and ``len`` are those of the whole array."""

    dtype = np.dtype(np.uint8)
    ndim = 4

    def __init__(self, path: Path, frame_format: str, shape: tuple[int, int, int], table: np.ndarray):
        self.path, self.frame_format, self.table = path, frame_format, table
        self.shape = (*shape, 3)
        self._start = _HEADER + table.nbytes
        self._fd = os.open(path, os.O_RDONLY)

    def __len__(self) -> int:
        return self.shape[0]

    def __del__(self) -> None:
        fd, self._fd = getattr(self, "_fd", None), None
        if fd is not None:
            os.close(fd)

    def _frame(self, k: int) -> np.ndarray:
        offset, length, crc = (int(v) for v in self.table[k])
        blob = os.pread(self._fd, length, self._start + offset)
        try:
            if zlib.crc32(blob) != crc:
                raise ValueError(f"its bytes fail their crc32 ({zlib.crc32(blob):08x}, stored {crc:08x})")
            frame = decode_frame(blob)
        except Exception as exc:  # PIL raises several types for a damaged image
            self.path.unlink(missing_ok=True)  # damaged since it was checked: never a hit again
            raise FrameCacheError(
                f"frame cache entry {self.path}: frame {k} does not decode ({exc}); the entry is "
                "deleted, run again to decode the clip afresh"
            ) from None
        if frame.shape != self.shape[1:]:
            raise FrameCacheError(
                f"frame cache entry {self.path}: frame {k} is {frame.shape}, not {self.shape[1:]}"
            )
        return frame

    def __getitem__(self, key):
        if isinstance(key, tuple):
            return self[key[0]][(slice(None),) * (not isinstance(key[0], (int, np.integer))) + key[1:]]
        if isinstance(key, (int, np.integer)):
            k = int(key) + len(self) * (key < 0)
            if not 0 <= k < len(self):
                raise IndexError(f"frame {key} of {len(self)}")
            return self._frame(k)
        ks = range(len(self))[key] if isinstance(key, slice) else [int(i) for i in np.asarray(key).ravel()]
        out = np.empty((len(ks), *self.shape[1:]), dtype=np.uint8)
        for j, k in enumerate(ks):
            out[j] = self[k]
        return out

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        frames = self[:]
        return frames if dtype is None else frames.astype(dtype)


class FrameCache:
    """Decode a clip once, then serve its frames from disk (``.npy``, no pickle).

    The key covers the file (absolute path, size, mtime), the sampled times (which encode fps and
    clip bounds) and the pixel budget, so a re-encoded file or another resolution misses the cache.
    Frames are returned memory-mapped (copy on write), on a miss too: a miss streams each frame to
    a temp file as it is decoded and renames it into place once every frame is written, so peak
    memory is one frame, concurrent workers and crashed runs are safe, and a failed read (a
    :class:`VideoError`) leaves nothing behind. A disk that cannot take the entry (full, read-only)
    raises :class:`FrameCacheError` naming the folder.

    ``frame_format`` (``render.frame_format``, :func:`parse_frame_format`) picks the entry: ``raw``
    (``<key>.npy``, memory-mapped; the key of caches written before formats existed) or a compressed
    ``<key>.frames`` (PNG, JPEG or WebP per frame, the format in the key), served as
    :class:`EncodedFrames`, which decodes only the frames indexed. Temp files are named by host,
    process and a random token, so writers on several nodes of a shared file system never share one.

    An entry is checked before it is served: one that does not load, or holds another number of
    frames than the times asked (a short or emptied file), is dropped, logged naming the file, and
    the clip decoded again (counted in ``dropped`` and as a miss).
    """

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.hits = 0
        self.misses = 0
        self.dropped = 0

    def key(
        self, path: str | Path, times: Sequence[float], max_pixels: int, frame_format: str = "raw"
    ) -> str:
        p = Path(path).resolve()
        st = p.stat()
        parts = [
            str(p),
            str(st.st_size),
            str(st.st_mtime_ns),
            str(max_pixels),
            ",".join(f"{t:.6f}" for t in times),
        ]
        if frame_format != "raw":  # raw keys are those of the caches written before formats existed
            parts.append(frame_format)
        return hashlib.sha1("|".join(parts).encode()).hexdigest()

    def entry(
        self, path: str | Path, times: Sequence[float], max_pixels: int, frame_format: str = "raw"
    ) -> Path:
        """The file of a clip's entry: ``<root>/<key[:2]>/<key>.npy`` (raw) or ``.frames`` (compressed)."""
        key = self.key(path, times, max_pixels, frame_format)
        return self.root / key[:2] / f"{key}{'.npy' if frame_format == 'raw' else '.frames'}"

    def frames(
        self,
        path: str | Path,
        times: Sequence[float],
        max_pixels: int = DEFAULT_MAX_PIXELS,
        backend: str = "decord",
        frame_format: str = "raw",
    ) -> np.ndarray | EncodedFrames:
        """Frames as :func:`read_frames` returns them, decoded at most once per key; a compressed
        ``frame_format`` returns :class:`EncodedFrames` (decoded when indexed)."""
        parse_frame_format(frame_format)
        _check_file(Path(path))
        target = self.entry(path, times, max_pixels, frame_format)
        load = self._load if frame_format == "raw" else functools.partial(self._load_encoded, frame_format)
        if target.exists():
            cached = load(target, len(times), max_pixels, path)
            if cached is not None:
                self.hits += 1
                return cached
        self.misses += 1
        path, info = _prepare(path, backend)
        times = [float(t) for t in times]
        tmp = _tmp_name(target)
        held = None
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            held = WriterLock.file(tmp)  # a frames stage removes the temp file only once its writer died
            if frame_format != "raw":
                _write_encoded(tmp, _frames(path, times, max_pixels, backend, info), len(times), frame_format)
            elif times:
                _write_npy(tmp, _frames(path, times, max_pixels, backend, info), len(times))
            else:
                with tmp.open("wb") as fh:
                    np.save(fh, np.zeros((0, 0, 0, 3), dtype=np.uint8), allow_pickle=False)
            os.replace(tmp, target)
        except OSError as exc:
            if exc.errno not in _DISK_ERRNOS:
                raise
            why = (exc.strerror or os.strerror(exc.errno)).lower()
            raise FrameCacheError(
                f"{why} writing the frame cache in {self.root} (entry {target}, {len(times)} frames of "
                f"{path}); the entries already there are whole and the partial one is deleted"
            ) from None
        finally:
            tmp.unlink(missing_ok=True)
            if held is not None:
                held.release()
        if frame_format != "raw":
            return self._load_encoded(frame_format, target, len(times), max_pixels, path, fresh=True)
        if not times:
            return np.load(target, allow_pickle=False)
        return np.load(target, allow_pickle=False, mmap_mode="c")

    def _load_encoded(
        self, frame_format: str, target: Path, n: int, max_pixels: int, path: str | Path, fresh: bool = False
    ) -> EncodedFrames | None:
        """The compressed entry ``target``, or None after dropping it when its header or frame table
        is not that of ``n`` frames of ``frame_format`` within the pixel budget, whole on disk."""
        try:
            with target.open("rb") as fh:
                head = fh.read(_HEADER)
                size = os.fstat(fh.fileno()).st_size
                ok = len(head) == _HEADER and head[:8] == ENCODED_MAGIC
                stored = head[8:24].rstrip(b"\0").decode("ascii", "replace") if ok else ""
                count, h, w = (int(v) for v in np.frombuffer(head[24:], dtype="<i8")) if ok else (-1, 0, 0)
                table = _read_table(fh, n) if count == n else None
                bad = _bad_frame(fh, table, size) if table is not None and len(table) == n else None
        except FileNotFoundError:  # another worker dropped it a moment ago
            return None
        reason = None
        if not ok and head[:8] == _ENCODED_MAGIC_V1:
            reason = "is of the first entry format (no frame checksums)"
        elif not ok:
            reason = "is not a compressed frame-cache entry (cut short or damaged)"
        elif stored != frame_format or count != n or h * w > max_pixels or (n and min(h, w) < 1):
            reason = f"holds {count} {stored} frames of {h} x {w} px, not {n} {frame_format} frames of at most {max_pixels} px"
        elif len(table) != n or (
            n and ((table < 0).any() or (table[:, :2].sum(1) > size - _HEADER - table.nbytes).any())
        ):
            reason = f"is cut short: its frame table points past its {size} bytes"
        elif bad is not None:
            reason = f"holds a damaged frame {bad} (its bytes fail their crc32)"
        if reason is None:
            return EncodedFrames(target, frame_format, (n, h, w), table)
        if fresh:  # just written by this process: never the disk's fault
            raise RuntimeError(f"frame cache entry {target} {reason}")
        self.dropped += 1
        log.warning("frame cache entry %s %s: dropped, decoding %s again", target, reason, path)
        target.unlink(missing_ok=True)
        return None

    def _load(self, target: Path, n: int, max_pixels: int, path: str | Path) -> np.ndarray | None:
        """The entry ``target`` memory-mapped (copy on write: a caller slicing a window reads only
        those frames), or None after dropping it when it does not load or is not ``n`` RGB frames
        within the pixel budget."""
        try:
            frames = np.load(target, allow_pickle=False, mmap_mode="c" if n else None)
        except FileNotFoundError:  # another worker dropped it a moment ago
            return None
        except (OSError, ValueError, EOFError) as exc:  # empty, cut short, not an array
            reason = f"does not load: {exc}"
        else:
            shape = frames.shape
            if n == 0 and shape[:1] == (0,):
                return frames
            whole = len(shape) == 4 and shape[0] == n and shape[3] == 3 and frames.dtype == np.uint8
            if whole and shape[1] * shape[2] <= max_pixels:
                return frames
            reason = (
                f"holds {frames.dtype} frames of shape {shape}, not {n} RGB frames of at most {max_pixels} px"
            )
            del frames
        self.dropped += 1
        log.warning("frame cache entry %s %s: dropped, decoding %s again", target, reason, path)
        target.unlink(missing_ok=True)
        return None


def load_frames(
    path: str | Path,
    times: Sequence[float],
    *,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    backend: str = "decord",
    cache: FrameCache | None = None,
    frame_format: str = "raw",
) -> np.ndarray | EncodedFrames:
    """:func:`read_frames` through ``cache`` when one is given, its entries in ``frame_format``.
    Without a cache the frames are those a ``frame_format`` entry would serve (decoded, and for a
    lossy format encoded and decoded again), so a run without a cache sees the pixels of one with."""
    if cache is not None:
        return cache.frames(path, times, max_pixels=max_pixels, backend=backend, frame_format=frame_format)
    frames = read_frames(path, times, max_pixels=max_pixels, backend=backend)
    if parse_frame_format(frame_format)[0] in ("raw", "png"):  # lossless: the same pixels
        return frames
    for k in range(len(frames)):
        frames[k] = decode_frame(encode_frame(frames[k], frame_format))
    return frames
