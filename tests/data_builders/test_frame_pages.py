"""Pages of memory-mapped frame arrays handed back once read; written pages kept."""

from __future__ import annotations

import mmap

import numpy as np

from data_builders.frame_cache import FrameCache
from data_builders.frame_pages import release_frames
from data_builders.synthetic.toy import write_mp4


def _frame(i: int) -> np.ndarray:
    return np.full((48, 64, 3), (10 * i, 100, 50), np.uint8)


def _resident_pages(array: np.ndarray) -> int:
    """Pages of ``array`` resident in this process (``/proc/self/pagemap`` bit 63)."""
    start = array.__array_interface__["data"][0] // mmap.PAGESIZE
    n = -(-(array.__array_interface__["data"][0] + array.nbytes) // mmap.PAGESIZE) - start
    with open("/proc/self/pagemap", "rb") as fh:
        fh.seek(start * 8)
        entries = np.frombuffer(fh.read(n * 8), dtype="<u8")
    return int(((entries >> np.uint64(63)) & np.uint64(1)).sum())


def test_release_frames_drops_read_pages_and_keeps_written_ones(tmp_path):
    counter_video = tmp_path / "counter.mp4"
    write_mp4(counter_video, [_frame(i) for i in range(20)], fps=4)
    cache = FrameCache(tmp_path / "cache")
    times = [0.25 * i for i in range(20)]
    cache.frames(counter_video, times)
    frames = cache.frames(counter_video, times)  # a hit: memory-mapped, copy on write
    want = np.array(frames)  # reads every page: 20 frames of 48 x 64 x 3 bytes, 45 pages
    frames[3, 0, 0, 0] = 7  # a write through the copy-on-write mapping
    assert _resident_pages(frames) >= 45
    assert release_frames(frames, 0, 20) >= 40 * mmap.PAGESIZE
    assert _resident_pages(frames) == 1  # the written page stays, with the write in it
    assert frames[3, 0, 0, 0] == 7 and np.array_equal(frames[4:], want[4:])  # the rest read back
    assert [int(round(f[..., 0].mean() / 10)) for f in frames[4:]] == list(range(4, 20))
    assert release_frames(want, 0, 20) == 0  # an in-memory array: nothing to release
