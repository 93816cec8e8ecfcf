"""One module per benchmark protocol: its runner, its scoring glue and, for a public benchmark, its
official file formats.

    python -m eval.score --protocol ovo --gt ovo_bench_new.json --pred results/<model>
    python -m eval.score --protocol streamingbench_proactive --gt questions_proactive.json --pred out.json

``eval/protocols/<name>.py`` holds everything of protocol ``<name>`` but its pure metric functions
(``rewards/<name>.py``, shared with the GRPO rewards) and its benchmark config
(``conf/benchmark/<name>.yaml``): ``p3i``, ``egoserve`` and ``propermem`` (the project's stream
records), ``estp``, ``ovo``, ``proactivevideoqa`` and ``streamingbench_proactive`` (the public
benchmarks, also on their own release files). A module registers, at import:

- its runner, a subclass of :class:`eval.runners.ProtocolRunner` under ``@register_runner(name)``
  (how fired turns become a prediction, the per-task table; ``eval.run``, GRPO's held-out eval);
- its scoring, ``@eval.scoring.protocol(name)`` on ``fn(paired, settings) -> (metrics, rows)``,
  the function behind ``eval.scoring.score(name, ...)`` (``eval.score``, ``eval.run``,
  ``eval.watch``, the demo);
- for a public benchmark, its official format with :func:`official_format` below: it reads the
  release annotation file and the official prediction format and scores them by the benchmark's
  own rules; ``eval.score --protocol NAME`` then hands it the ``--gt`` and ``--pred`` paths and
  prints what it returns as its last JSON line.

Adding a benchmark ``<name>`` is one module and one YAML: write ``eval/protocols/<name>.py`` with
the registrations it needs and ``conf/benchmark/<name>.yaml`` with ``name: <name>`` and
``protocol: <name>`` (then ``eval.run benchmark=<name>`` and ``eval.score --protocol <name>``).
Nothing else is edited: importing this package imports every module in it
(:func:`import_protocols`; a name starting with ``_`` is skipped; a helper module that registers
nothing, such as ``egoserve_files`` and ``egoserve_preds``, EgoServe's release and prediction
files, is imported to no effect), and ``eval.scoring`` and
``eval.runners`` import this package, so the registrations are there whenever either is imported.
A protocol module imports ``eval.runners`` and ``eval.scoring`` at its top: they import this
package last, after their own names are defined. tests/eval/test_protocols.py adds one this way.

The benchmark's name is used alike for its builder source, its ``conf/benchmark/<name>.yaml`` and
its stream records' ``task``; the benchmark's own task names go in each record's
``meta["benchmark_task"]``.

Bad input raises ``RecordError`` naming the file, the item and the reason (``eval.score`` prints it
and exits 2).
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
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


def import_protocols(paths: list[str] | None = None) -> list[str]:
    """Import every protocol module of this package (or of ``paths``, folders searched as part of
    it), which registers them; returns their names in import (alphabetical) order. Importing a
    module twice does nothing."""
    names = [m.name for m in pkgutil.iter_modules(list(__path__) if paths is None else paths)]
    names = [n for n in names if not n.startswith("_")]
    for name in names:
        importlib.import_module(f"{__name__}.{name}")
    return names


import_protocols()
