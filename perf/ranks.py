"""``eval_ranks_speedup``: ``python -m eval.run`` over 2 ranks of one thread each vs 1 rank of one thread.

Both sides run the same command on the same toy records and the same tiny checkpoint, each process
with ``OMP_NUM_THREADS=1`` (one torch thread); the 2 ranks get ``RANK`` / ``WORLD_SIZE`` /
``MASTER_ADDR`` / ``MASTER_PORT`` as a launcher sets them (``eval.ranks``: the split, the manifests'
barriers, the shards, rank 0's merge). The bench watches the prediction files as records land
(each line is fsynced as its record finishes): a side's rate is the records after each rank's
first over the time from the first record landing to the end of the streaming, which for 2 ranks
is the merged ``predictions.jsonl`` appearing (the slower rank, the barrier and the merge
included). Process start and model load, the same on both sides, are left out; so is scoring,
which runs after the merge. ``eval_ranks_identical``: the merged predictions equal the one rank's,
row for row (``batch_size=1``: the same batches on both sides); ``eval_ranks_shard_records`` the
records each rank's shard holds.

``eval_ranks_vs_independent`` tells the job's own cost from the machine's: the 2 ranks' rate over
that of 2 independent one-process runs started together, each on one rank's share of the records
(the same split). Their rates are summed, each over its own span: nothing lines their starts up as
the job's barrier does, and the part of a run that streams while the other has not started or has
finished goes faster, so the sum is an upper figure for two processes sharing the machine. Two
processes on this project's 2 shared cores run at 1.75x-1.9x one alone (measured 2026-12-06),
whatever they are, so ``eval_ranks_speedup`` moves with the machine; this ratio is 1 when the
split, the barriers and the merge cost nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from data_builders.record_io import write_jsonl
from data_builders.synthetic.toy import generate_toy
from engine.config import model_preset
from engine.model import build_tiny_checkpoint
from eval.ranks import PREDICTIONS, shard_path, split
from eval.store import PredictionLog
from infra.entry import quiet_libraries
from infra.schema import CONF_DIR

ROOT = Path(__file__).resolve().parents[2]
POLL_S = 0.01


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def _launch(world: int, runs: list[list[str]], logs: Path) -> list[subprocess.Popen]:
    """One process of ``python -m eval.run`` per argument list, each one's stderr to
    ``logs/rank-R.log``: the ranks of one job with the environment a launcher gives them
    (``world`` > 1, one argument list per rank), or independent one-process runs (``world`` 1)."""
    logs.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    port = str(_free_port())
    procs = []
    for rank, args in enumerate(runs):
        if world > 1:
            env |= {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world)}
            env |= {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}
        with (logs / f"rank-{rank}.log").open("w") as err:
            cmd = [sys.executable, "-m", "eval.run", *args]
            procs.append(subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err))
    return procs


def _watch(
    shards: list[Path], procs: list[subprocess.Popen], logs: Path, merged_file: Path | None = None
) -> tuple[list[list[float]], float]:
    """Each prediction file's record landing times and when the streaming ended: ``merged_file``
    appearing (a job of several ranks), else the last record landing."""
    landed: list[list[float]] = [[] for _ in shards]
    merged = None
    while True:
        running = any(p.poll() is None for p in procs)
        now = time.perf_counter()
        for r, path in enumerate(shards):
            landed[r] += [now] * (_lines(path) - len(landed[r]))
        if merged_file is not None and merged is None and merged_file.exists():
            merged = now
        if not running:
            break
        time.sleep(POLL_S)
    for r, p in enumerate(procs):
        if p.wait():
            err = (logs / f"rank-{r}.log").read_text().strip().splitlines()
            raise RuntimeError(f"eval.run process {r} of {len(procs)} exited {p.returncode}: {err[-1:]}")
    return landed, merged if merged_file is not None else max(t[-1] for t in landed if t)


def _after_first(landed: list[list[float]], who: str) -> list[int]:
    """Each watched file's records after its first, the count of a rate (each needs 2)."""
    if min(len(t) for t in landed) < 2:
        raise RuntimeError(f"each {who} needs 2 records for a rate, got {[len(t) for t in landed]}")
    return [len(t) - 1 for t in landed]


def _rate(landed: list[list[float]], end: float) -> float:
    """Records per second after each rank's first record, from the first landing to ``end``."""
    return sum(_after_first(landed, "rank")) / (end - min(t[0] for t in landed))


def _summed_rate(landed: list[list[float]]) -> float:
    """Records per second of processes that were started together but run apart: each one's records
    after its first over its own span from its first to its last, summed."""
    counts = _after_first(landed, "process")
    return sum(n / (t[-1] - t[0]) for n, t in zip(counts, landed, strict=True))


def _args(checkpoint: Path, tmp: Path, name: str, records_file: Path) -> list[str]:
    """``eval.run``'s arguments for one side: its records into ``tmp/<name>``, batch 1, no extras."""
    return [f"checkpoint={checkpoint}", f"records={records_file}", f"out_dir={tmp / name}"] + [
        f"paths.cache_dir={tmp / f'{name}_cache'}",
        "batch_size=1",
        "timelines=0",
        "view=false",
        "logger=none",
    ]


def _job(
    checkpoint: Path, tmp: Path, records: Path, w: int, name: str
) -> tuple[float, float, list, list[int]]:
    """(records per second, wall seconds, merged rows, records per shard) of one ``w``-rank job."""
    out, logs = tmp / name, tmp / f"{name}_logs"
    t0 = time.perf_counter()
    procs = _launch(w, [_args(checkpoint, tmp, name, records)] * w, logs)
    paths = [shard_path(out, r, w) for r in range(w)]
    landed, end = _watch(paths, procs, logs, out / PREDICTIONS if w > 1 else None)
    rate = _rate(landed, end)
    return rate, time.perf_counter() - t0, PredictionLog(out / PREDICTIONS).rows(), [len(t) for t in landed]


def _independent(checkpoint: Path, tmp: Path, shares: list[Path], name: str) -> float:
    """The summed rate of one-process runs of ``shares``, one each, started together."""
    runs = [_args(checkpoint, tmp, f"{name}_{r}", share) for r, share in enumerate(shares)]
    logs = tmp / f"{name}_logs"
    files = [tmp / f"{name}_{r}" / PREDICTIONS for r in range(len(shares))]
    return _summed_rate(_watch(files, _launch(1, runs, logs), logs)[0])


def ranks_figures(
    checkpoint: Path, tmp: Path, records: int, seconds: int, pairs: int = 2, world: int = 2
) -> dict:
    """``eval_ranks_speedup`` (the module docstring) on ``records`` toy records of ``seconds`` steps;
    the job and the independent runs alternate ``pairs`` times, ``eval_ranks_vs_independent`` the
    median of each pair's ratio (a pair's two sides a few seconds apart: the machine's drift over
    the minutes of the whole comparison falls on both)."""
    toy = tmp / "ranks_toy"
    streams = generate_toy(toy, n=records, seed=1, duration=seconds)
    write_jsonl(toy / "records.jsonl", streams)
    shares = [toy / f"share-{r}.jsonl" for r in range(world)]
    for path, share in zip(shares, split(streams, world), strict=True):  # a rank's share each
        write_jsonl(path, share)
    one_rate, one_wall, one_rows, _ = _job(checkpoint, tmp, toy / "records.jsonl", 1, "ranks_1")
    jobs, alone = [], []
    for i in range(pairs):
        jobs.append(_job(checkpoint, tmp, toy / "records.jsonl", world, f"ranks_{world}_{i}"))
        alone.append(_independent(checkpoint, tmp, shares, f"independent_{i}"))
    rate, wall, _, shards = jobs[0]
    ratios = [j[0] / a for j, a in zip(jobs, alone, strict=True)]
    return {
        "eval_ranks_speedup": round(rate / one_rate, 2),
        "eval_ranks_vs_independent": round(statistics.median(ratios), 2),
        "eval_ranks_vs_independent_pairs": [round(r, 2) for r in ratios],
        "eval_independent_records_per_s": round(statistics.median(alone), 2),
        "eval_ranks_identical": all(j[2] == one_rows for j in jobs),
        "eval_ranks_shard_records": shards,
        "eval_ranks_records_per_s": {"1": round(one_rate, 2), str(world): round(rate, 2)},
        "eval_ranks_wall_s": {"1": round(one_wall, 1), str(world): round(wall, 1)},
        "eval_ranks_setup": {
            "ranks": world,
            "records": records,
            "steps": seconds,
            "threads": 1,
            "pairs": pairs,
        },
    }


def main(argv: list[str] | None = None) -> dict:
    """``python -m perf ranks``: the figures above alone, as one JSON line (also part of
    ``python -m perf engine``)."""
    parser = argparse.ArgumentParser(prog="python -m perf ranks", description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=24, help="toy records streamed by each side")
    parser.add_argument("--steps", type=int, default=60, help="steps (seconds) of each record")
    parser.add_argument("--pairs", type=int, default=2, help="job-then-independent pairs compared")
    args = parser.parse_args(argv)
    quiet_libraries()
    tmp = Path(tempfile.mkdtemp(prefix="eval-bench-ranks-"))
    result = ranks_figures(
        build_tiny_checkpoint(model_preset(CONF_DIR / "model" / "tiny.yaml"), tmp / "tiny"),
        tmp,
        args.records,
        args.steps,
        pairs=args.pairs,
    )
    print(json.dumps(result))
    return result
