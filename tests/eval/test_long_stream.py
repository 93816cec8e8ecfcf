"""The long-stream memory figure of ``python -m perf engine`` on small sizes: its JSON contract and
what each fresh process streams (the figure itself is printed by the bench command)."""

from __future__ import annotations

import numpy as np
import pytest

from perf.long_stream import long_stream_peaks, write_frames


def test_frames_file_is_a_frame_cache_array(tmp_path):
    frames = np.load(write_frames(tmp_path / "f.npy", 700), mmap_mode="c")
    assert frames.shape == (700, 64, 64, 3) and frames.dtype == np.uint8
    assert not np.array_equal(frames[0], frames[1]) and not np.array_equal(frames[599], frames[600])


@pytest.mark.slow
def test_long_stream_peaks_in_fresh_processes(tiny_checkpoint):
    out = long_stream_peaks(short=12, long=48, window=4, checkpoint=tiny_checkpoint)
    short, long = out["long_stream"]["steps12"], out["long_stream"]["steps48"]
    assert (short["steps"], long["steps"]) == (12, 48)
    assert out["long_stream_peak_ratio_2h_vs_10min"] == round(long["peak_mb"] / short["peak_mb"], 3)
    for run in (short, long):  # each process's own peak covers what it held during the run
        assert run["peak_mb"] >= run["rss_before_run_mb"] - 1 and run["fired"] == 0
    assert long["cache_tokens"] <= short["cache_tokens"] + 4  # the window keeps the cache flat
