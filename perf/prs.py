"""Throughput of the PRS core: ``python -m perf prs [--samples N]``.

Scores N synthetic samples (10 targets and 20 replies each, times uniform in a 120 s clip, seeded)
with :func:`metrics.prs.prs_scores`, which yields both variants (and their primed forms) in one
pass. ``prs_samples_per_s`` uses timing-only content (``any``); ``prs_samples_per_s_content``
passes a content callable reading a precomputed reply x target matrix (the cost of a scorer
lookup). Prints one JSON object as the last line of stdout.

>>> result = run_bench(samples=200, repeats=1)
>>> result["samples"], result["targets"], result["replies"]
(200, 10, 20)
"""

from __future__ import annotations

import argparse
import json
import random
import time

from metrics.prs import prs_scores


def make_samples(
    samples: int, targets: int, replies: int, seed: int = 0
) -> list[tuple[list[float], list[float]]]:
    """Synthetic (target times, sorted reply times) pairs on a 120 s clip, in seconds."""
    rng = random.Random(seed)
    return [
        (
            [rng.uniform(0.0, 120.0) for _ in range(targets)],
            sorted(rng.uniform(0.0, 120.0) for _ in range(replies)),
        )
        for _ in range(samples)
    ]


def run_bench(samples: int = 10_000, targets: int = 10, replies: int = 20, repeats: int = 3) -> dict:
    """Best-of-``repeats`` throughput (samples/s) of both PRS variants, with and without content."""
    data = make_samples(samples, targets, replies)
    matrix = [[1.0 if (k + i) % 3 else 0.5 for i in range(targets)] for k in range(replies)]

    def content(k: int, i: int) -> float:
        return matrix[k][i]

    def best(fn) -> float:
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            for target_times, reply_times in data:
                fn(target_times, reply_times)
            times.append(time.perf_counter() - start)
        return samples / min(times)

    return {
        "prs_samples_per_s": round(best(lambda t, r: prs_scores(t, r)), 1),
        "prs_samples_per_s_content": round(best(lambda t, r: prs_scores(t, r, content)), 1),
        "samples": samples,
        "targets": targets,
        "replies": replies,
        "variants": ["u", "b", "u_prime", "b_prime"],
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m perf prs", description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    out = run_bench(samples=args.samples, repeats=args.repeats)
    print(json.dumps(out))
    return out
