"""Peak memory of the frame cache on a long high-resolution video (part of ``python -m perf builders``).

``peak_mb_10min_720p``: a synthetic 10-minute 1280 x 720 H.264 file (written here with PyAV: 5 fps,
a keyframe every 2 s, ``ultrafast``, so writing it takes seconds) goes into an empty
:class:`~data_builders.frame_cache.FrameCache` at 1 step/s and 448 x 448 frames (``render=hd``: 600
frames of 597 x 336, 361 MB on disk), each back end in a fresh process, whose peak resident set
(``VmHWM``) is the figure: what the frames stage needs per worker. The reported figure is the
larger of the two back ends'; both are listed. ``VmHWM`` (``/proc/self/status``), not ``ru_maxrss``:
Linux carries ``ru_maxrss`` across ``exec`` from the parent's memory at the fork, so a child of a
300 MB benchmark process reports at least 300 MB whatever it does itself.

    python -m perf video              # this figure alone (~1 min)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from data_builders.frame_cache import FrameCache
from data_builders.video import BACKENDS, DEFAULT_MAX_PIXELS, clip_times


def write_synthetic(
    path: Path, seconds: int = 600, fps: int = 5, width: int = 1280, height: int = 720
) -> Path:
    """A ``seconds``-long ``width x height`` H.264 mp4 of a moving colour gradient (frames differ)."""
    import av

    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([(x * 255 // width), (y * 255 // height), ((x + y) * 255 // (width + height))], -1)
    base = base.astype(np.uint8)
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = {"preset": "ultrafast", "g": str(2 * fps), "threads": "2"}
        for i in range(seconds * fps):
            frame = np.roll(base, 7 * i, axis=1)
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def peak_rss_mb() -> float:
    """This process's own peak resident set (MB): ``VmHWM``, which starts afresh at ``exec``."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status (Linux only)")


def _child(video: str, cache: str, backend: str, seconds: int) -> None:
    """Fill the cache with the video's 1 step/s frames; print the frames' shape and the peak RSS."""
    frames = FrameCache(cache).frames(
        video, clip_times(0.0, seconds, 1.0), max_pixels=DEFAULT_MAX_PIXELS, backend=backend
    )
    print(json.dumps({"shape": list(frames.shape), "peak_mb": round(peak_rss_mb(), 1)}))


def peak_mb_10min_720p(seconds: int = 600) -> dict:
    """Peak RSS (MB) of a fresh process building the frame cache of the synthetic file, per back end."""
    with tempfile.TemporaryDirectory() as tmp:
        video = write_synthetic(Path(tmp) / "long720p.mp4", seconds=seconds)
        by_backend, shape = {}, None
        for backend in BACKENDS:
            out = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "perf",
                    "video",
                    "--child",
                    str(video),
                    f"{tmp}/c-{backend}",
                ]
                + [backend, str(seconds)],
                capture_output=True,
                text=True,
                check=True,
            )
            child = json.loads(out.stdout.strip().splitlines()[-1])
            by_backend[backend], shape = child["peak_mb"], child["shape"]
        return {
            "peak_mb_10min_720p": max(by_backend.values()),
            "peak_mb_10min_720p_by_backend": by_backend,
            "frames_shape_10min_720p": shape,
        }


def main(argv: list[str] | None = None) -> dict | None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:  # one back end's process (peak_mb_10min_720p)
        _child(argv[1], argv[2], argv[3], int(argv[4]))
        return None
    ap = argparse.ArgumentParser(prog="python -m perf video", description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=int, default=600, help="length of the synthetic 720p file")
    out = peak_mb_10min_720p(ap.parse_args(argv).seconds)
    print(json.dumps(out))
    return out
