"""Memory-mapped frame arrays: hand the pages of frames already read back to the OS.

A :class:`~data_builders.frame_cache.FrameCache` hit is a ``.npy`` file mapped copy-on-write. Reading a
long stream's frames front to back (the streaming engine) would keep every page it touched in the
process's resident set: 7,200 steps of 448 x 448 frames are 4.3 GB. :func:`release_frames` drops
them once read; touched again, they are read back from the file.
"""

from __future__ import annotations

import mmap
import sys

import numpy as np

#: Bytes before a released range that go too: on a read fault Linux maps the neighbouring pages
#: already in memory (fault-around, and whole page-cache folios, up to 2 MB), released ones included.
_FAULT_AROUND = 2 * 1024 * 1024


def _mapping(frames: np.ndarray) -> mmap.mmap | None:
    """The ``mmap`` an array's memory belongs to (``np.load(..., mmap_mode=...)``), else None."""
    obj = frames
    while obj is not None and not isinstance(obj, mmap.mmap):
        obj = getattr(obj, "base", None)
    return obj


def release_frames(frames: np.ndarray, start: int, end: int) -> int:
    """Hand the pages of frames ``[start, end)`` of a memory-mapped frame array (a
    :class:`~data_builders.frame_cache.FrameCache` hit, or a view of one) back to the OS; returns the
    bytes released.

    Unmodified pages of the file mapping are dropped (``MADV_DONTNEED``); pages written through
    the copy-on-write mapping are kept, found in ``/proc/self/pagemap``, so nothing written is
    lost. The 2 MB before ``start`` go too: the kernel maps the pages around a read fault
    (fault-around, whole page-cache folios), so reading the frames from ``start`` on brought back
    the end of those released before; the page holding frame ``end``'s first bytes goes whole. A
    no-op for in-memory arrays and where Linux's calls are missing."""
    mm = _mapping(frames)
    if mm is None or end <= start or not frames.flags.c_contiguous or not sys.platform.startswith("linux"):
        return 0
    page = mmap.PAGESIZE
    base = np.frombuffer(mm, dtype=np.uint8, count=1).ctypes.data
    origin = frames.__array_interface__["data"][0] - base
    first = origin + start * frames.strides[0]
    lo = max(origin, first - _FAULT_AROUND) // page * page
    hi = min(len(mm), first + (end - start) * frames.strides[0])  # the last page goes whole
    n = -(-(hi - lo) // page)
    if n <= 0:
        return 0
    try:  # one 64-bit entry per page: bit 63 present, 62 swapped, 61 file page (else a private copy)
        with open("/proc/self/pagemap", "rb") as fh:
            fh.seek((base + lo) // page * 8)
            entries = np.frombuffer(fh.read(n * 8), dtype="<u8")
    except OSError:
        return 0
    if len(entries) != n:
        return 0
    present, swapped, file_page = ((entries >> np.uint64(bit)) & np.uint64(1) for bit in (63, 62, 61))
    written = ((present == 1) & (file_page == 0)) | (swapped == 1)
    released, run = 0, None
    for i, keep in enumerate([*written.tolist(), True]):  # runs of pages holding nothing written
        if not keep and run is None:
            run = i
        elif keep and run is not None:
            length = min((i - run) * page, len(mm) - lo - run * page)
            mm.madvise(mmap.MADV_DONTNEED, lo + run * page, length)
            released += length
            run = None
    return released
