"""One module per benchmark protocol, and the table of where each one lives.

    python -m eval.score --protocol ovo --gt ovo_bench_new.json --pred results/<model>
    python -m eval.score --protocol streamingbench_proactive --gt questions_proactive.json --pred out.json

``benchmarks/protocols/<name>.py`` holds everything of protocol ``<name>`` but its pure metric functions
(``metrics/<name>.py``, shared with the GRPO rewards) and its benchmark config
(``conf/benchmark/<name>.yaml``): ``p3i``, ``egoserve`` and ``propermem`` (the project's stream
records), ``estp``, ``ovo``, ``proactivevideoqa`` and ``streamingbench_proactive`` (the public
benchmarks, also on their own release files). Each defines one object,
``PROTOCOL = Protocol(name, runner=..., scorer=..., official=..., judged=...)``
(:mod:`benchmarks.protocols.base`): its runner, its scorer on stream records, and for a public benchmark
its official format (the release annotation file and the official prediction format, scored by
the benchmark's own rules; ``eval.score --protocol NAME`` hands it the ``--gt`` and ``--pred``
paths and prints what it returns as its last JSON line).

:data:`PROTOCOLS` below lists each protocol's module; :func:`get_protocol` imports it on first use,
so a name exists whatever was imported before. Helper modules (``public``, EgoServe's release and
prediction files ``egoserve_files`` and ``egoserve_preds``, Em-Garde's result files ``emgarde``) are not
protocols and are not listed. A protocol's ``scoring_modes`` score its files by another definition
(``eval.score --mode NAME``, e.g. ``online_emgarde``; docs/evaluation.md lists them).
Adding a benchmark: docs/design.md, "Adding a benchmark, a reward or a data source".

The benchmark's name is used alike for its builder source, its ``conf/benchmark/<name>.yaml`` and
its stream records' ``task``; the benchmark's own task names go in each record's
``meta["benchmark_task"]``.

Bad input raises ``RecordError`` naming the file, the item and the reason (``eval.score`` prints it
and exits 2).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from infra.registry import Registry

if TYPE_CHECKING:
    from benchmarks.protocols.base import Protocol

#: Every benchmark protocol: name -> the module and the ``Protocol`` object that defines it.
PROTOCOLS = Registry(
    "protocol",
    {
        "egoserve": "benchmarks.protocols.egoserve:PROTOCOL",
        "estp": "benchmarks.protocols.estp:PROTOCOL",
        "ovo": "benchmarks.protocols.ovo:PROTOCOL",
        "p3i": "benchmarks.protocols.p3i:PROTOCOL",
        "proactivevideoqa": "benchmarks.protocols.proactivevideoqa:PROTOCOL",
        "propermem": "benchmarks.protocols.propermem:PROTOCOL",
        "streamingbench_proactive": "benchmarks.protocols.streamingbench_proactive:PROTOCOL",
    },
)


def get_protocol(name: str) -> Protocol:
    """The protocol ``name`` (its module imported on first use; an unknown name fails with the
    known ones)."""
    return PROTOCOLS.get(name)
