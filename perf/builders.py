"""Throughput of the builders: annotation conversion (no decoding) and the frame cache.

``python -m perf builders`` (``python -m perf frame_cache`` and ``python -m perf video``: their figures alone)

Prints one JSON object on its last line:

- ``records_per_s``: stream records per second through the whole build driver (parse, convert,
  validate, dedup, write JSONL + parquet + stats) for synthetic Nexar, UCF-Crime and Ego4D files,
  with video existence and probing stubbed out (a fixed 40 s, 30 fps clip), so no file is decoded.
- ``frame_cache_speedup``: time to decode 32 toy clips at 1 fps into an empty
  :class:`~data_builders.frame_cache.FrameCache`, divided by the time to read them again from it.
- ``index_files_per_s``: files per second walked by the video index of a build
  (:class:`~data_builders.video_index.VideoIndex`) over a synthetic tree of 100,000 empty files
  (250 folders x 4 subfolders x 100 files, 9 in 10 of them videos), best of 3 runs.
- ``peak_mb_10min_720p``: peak memory (MB) of a fresh process building the frame cache of a
  synthetic 10-minute 720p file at 1 step/s, 448 x 448 frames (``perf.video``).
- ``cache_bytes_per_frame``, ``cache_decode_ms_per_frame``, ``cache_encode_ms_per_frame``,
  ``cache_psnr_db`` (dicts by entry format, ``raw`` among them): ``perf.frame_cache``
  (SFT's input pipeline on those entries: ``python -m perf sft_input``).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from data_builders.build import build_source
from data_builders.frame_cache import FrameCache
from data_builders.stream_steps import step_times
from data_builders.synthetic.toy import generate_toy
from data_builders.video import VideoInfo
from data_builders.video_index import VideoIndex
from perf.frame_cache import cache_figures
from perf.video import peak_mb_10min_720p

FAKE_INFO = VideoInfo(duration=40.0, fps=30.0, n_frames=1200, width=1280, height=720)


def _annotations(root: Path, n: int) -> dict[str, Path]:
    """Synthetic annotation files in the real formats: n Nexar rows, n UCF lines, n/10 Ego4D videos."""
    nexar = root / "nexar.csv"
    nexar.write_text(
        "id,time_of_event,time_of_alert,target\n"
        + "".join(f"{i},{20 + i % 7}.5,{19 + i % 7}.25,1\n" if i % 2 else f"{i},,,0\n" for i in range(n))
    )
    ucf = root / "ucf.txt"
    ucf.write_text(
        "".join(f"Abuse{i:05d}_x264.mp4  Abuse  {30 + i % 90}  {200 + i % 90}  -1  -1\n" for i in range(n))
    )
    verbs = ["holds", "opens", "cuts", "washes", "picks up"]
    nouns = ["a cup", "the door", "an onion", "a plate", "a knife", "the lid"]
    ego = {
        f"v{i:05d}": {
            "narration_pass_1": {
                "narrations": [
                    {
                        "timestamp_sec": 0.5 + 1.3 * k,
                        "narration_text": f"#C C {verbs[(i + k) % 5]} {nouns[(i * 3 + k) % 6]}",
                    }
                    for k in range(28)
                ]
            }
        }
        for i in range(n // 10)
    }
    (root / "narration.json").write_text(json.dumps(ego))
    return {"nexar": nexar, "ucf_crime": ucf, "ego4d_events": root / "narration.json"}


def records_per_second(n: int = 20_000) -> float:
    """Records/s of the build driver on synthetic annotations, probing stubbed (no decoding)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        files = _annotations(root, n)
        total, seconds = 0, 0.0
        for source, path in files.items():
            t0 = time.perf_counter()
            report = build_source(
                source,
                root / "out" / source,
                annotations=path,
                videos=root / "videos",
                check_videos=False,
                probe=lambda p, check_end: FAKE_INFO,
                exists=lambda p: True,
            )
            seconds += time.perf_counter() - t0
            total += len(report.records)
        return total / seconds


def frame_cache_speedup(n: int = 32) -> dict[str, float]:
    """The frame cache over ``n`` toy clips at 1 fps: the first pass (decodes; its cache misses) and
    the second (served from the cache; its hits), their times and ratio."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        streams = generate_toy(root / "toy", n=n, seed=0)
        cache = FrameCache(root / "cache")
        passes, counts = [], []
        for _ in range(2):
            before = (cache.misses, cache.hits)
            t0 = time.perf_counter()
            for s in streams:
                cache.frames(root / "toy" / s.video, step_times(s, 1.0))
            passes.append(time.perf_counter() - t0)
            counts.append((cache.misses - before[0], cache.hits - before[1]))
        return {
            "frame_cache_speedup": passes[0] / passes[1],
            "frame_cache_first_s": passes[0],
            "frame_cache_second_s": passes[1],
            "first_pass_misses": counts[0][0],
            "second_pass_hits": counts[1][1],
        }


def index_files_per_second(n: int = 100_000, repeats: int = 3) -> float:
    """Files per second the video index walks over a synthetic ``n``-file tree (best of ``repeats``)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        per_folder = 100
        for k in range(n // per_folder):
            folder = root / f"Class{k // 4:03d}" / f"video {k:05d} & co"
            folder.mkdir(parents=True)
            for i in range(per_folder):
                (folder / (f"clip_{k:05d}_{i:03d}.mp4" if i % 10 else f"notes_{i:03d}.txt")).touch()
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            index = VideoIndex(root)
            best = min(best, time.perf_counter() - t0)
        assert index.n_files == n - n // 10
        return n / best


def main(argv: list[str] | None = None) -> dict:
    argparse.ArgumentParser(prog="python -m perf builders", description=__doc__.splitlines()[0]).parse_args(
        argv
    )
    rps = records_per_second()
    cache = frame_cache_speedup()
    index = index_files_per_second()
    video = peak_mb_10min_720p()
    formats = cache_figures()
    out = (
        {"records_per_s": round(rps, 1)}
        | {k: round(v, 4) for k, v in cache.items()}
        | {"index_files_per_s": round(index)}
        | video
        | formats
    )
    print(json.dumps(out))
    return out
