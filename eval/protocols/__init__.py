"""The public benchmarks' official file formats, one module per benchmark.

    python -m eval.score --protocol ovo --gt ovo_bench_new.json --pred results/<model>
    python -m eval.score --protocol streamingbench_proactive --gt questions_proactive.json --pred out.json

A module here reads its benchmark's release annotation file and its official prediction format, and
scores them with the benchmark's own rules (the pure metric functions live in ``rewards/``). It
registers one :class:`OfficialFormat` with :func:`official_format`; ``eval.score --protocol NAME``
then hands it the ``--gt`` and ``--pred`` paths and prints what it returns as its last JSON line.
The benchmark's name is used alike for its builder source, its ``conf/benchmark/<name>.yaml`` and
its stream records' ``task``; the benchmark's own task names go in each record's
``meta["benchmark_task"]``.

Bad input raises ``RecordError`` naming the file, the item and the reason (``eval.score`` prints it
and exits 2).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class OfficialFormat:
    """A benchmark scored on its own files: ``score(gt, pred, options)`` -> (metrics, per-item rows).

    ``options`` is ``eval.score``'s parsed command line (``--model``, ``--per-sample``, the judge
    options); ``metrics`` is a JSON-ready dict keyed by the official figure names."""

    name: str
    score: Callable[[Path, Path, argparse.Namespace], tuple[dict, list[dict]]]
    summary: str


OFFICIAL_FORMATS: dict[str, OfficialFormat] = {}


def official_format(name: str, summary: str) -> Callable:
    """Register ``fn(gt, pred, options) -> (metrics, rows)`` as benchmark ``name``'s official scoring."""

    def wrap(fn: Callable[[Path, Path, argparse.Namespace], tuple[dict, list[dict]]]) -> Callable:
        if name in OFFICIAL_FORMATS:
            raise ValueError(f"official format {name!r} is registered twice")
        OFFICIAL_FORMATS[name] = OfficialFormat(name, fn, summary)
        return fn

    return wrap


# Importing a benchmark's module registers it; one name each, in alphabetical order.
from eval.protocols import (  # noqa: E402,F401
    estp,
    ovo,
    proactivevideoqa,
    streamingbench_proactive,
)
