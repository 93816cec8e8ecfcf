"""The on-disk frame cache: a clip decoded once (:func:`data_builders.video.read_frames`), its frames
served from one entry file per clip and pixel budget, written whole under a writer lock.

:class:`FrameCache` keys and writes entries (raw ``.npy`` or compressed ``.frames``, checked before
they are served); :class:`EncodedFrames` serves a compressed entry, decoding only the frames
indexed; :func:`load_frames` is :func:`~data_builders.video.read_frames` through a cache when one
is given. The frames stage that fills the cache: :mod:`data_builders.frames`.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import logging
import os
import re
import secrets
import socket
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from data_builders.frame_codec import decode_frame, encode_frame, parse_frame_format
from data_builders.video import DEFAULT_MAX_PIXELS, check_file, decoded_frames, prepare_read, read_frames
from infra.files import WriterLock

log = logging.getLogger("data_builders")

#: errno values that mean the frame cache's disk cannot take a write (full, over quota, read-only,
#: not writable): :class:`FrameCacheError` names the folder.
_DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EFBIG})

#: A compressed entry (``<key>.frames``): this magic, the format (16 bytes, ASCII, NUL-padded) and the
#: frame count, height and width (little-endian int64); then one (offset, length) int64 pair per
#: frame, offsets counted from the end of that table; then the encoded frames.
#: Version 2: the frame table holds each frame's crc32 (version 1, ``FRMCACHE``, held none: dropped).
ENCODED_MAGIC = b"FRMCACH2"

_ENCODED_MAGIC_V1 = b"FRMCACHE"

#: Columns of an entry's frame table: offset, length, crc32 of the stored bytes.
_TABLE_COLS = 3

_HEADER = 8 + 16 + 3 * 8


class FrameCacheError(RuntimeError):
    """The frame cache could not be written (a full disk, ...): the message names the folder, the
    entry and the video. Entries already in the cache are complete (each is renamed into place only
    once written whole) and a partial one is deleted, so a rerun redoes only what is missing."""


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
        check_file(Path(path))
        target = self.entry(path, times, max_pixels, frame_format)
        load = self._load if frame_format == "raw" else functools.partial(self._load_encoded, frame_format)
        if target.exists():
            cached = load(target, len(times), max_pixels, path)
            if cached is not None:
                self.hits += 1
                return cached
        self.misses += 1
        path, info = prepare_read(path, backend)
        times = [float(t) for t in times]
        tmp = _tmp_name(target)
        held = None
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            held = WriterLock.file(tmp)  # a frames stage removes the temp file only once its writer died
            if frame_format != "raw":
                _write_encoded(
                    tmp, decoded_frames(path, times, max_pixels, backend, info), len(times), frame_format
                )
            elif times:
                _write_npy(tmp, decoded_frames(path, times, max_pixels, backend, info), len(times))
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
