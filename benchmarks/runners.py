"""Protocol runners by name: what each benchmark needs around the shared streaming engine.

    runner = get_runner("egoserve")
    row = runner.prediction_row(stream, result, bench)     # one predictions.jsonl line
    metrics, per_sample = runner.score(streams, rows, bench)
    metrics = evaluate_model(model, processor, streams, records_path, render)   # P3I, in memory

The step rate comes from the benchmark (``benchmark.steps_per_second``), the frame size and history
budget from the render config; a runner (:class:`benchmarks.protocols.base.ProtocolRunner`, one subclass
per protocol in ``benchmarks/protocols/<name>.py``) decides how a stream's fired turns become a
prediction, how the prediction rows are scored (through its protocol's scorer, the one behind
``python -m eval.score``, so ``metrics.json`` is exactly what it prints) and which per-task table is
logged. :func:`get_runner` makes the runner of a protocol named in the table of
``benchmarks/protocols/__init__.py``; :func:`prediction_rows` turns streamed batches into prediction rows;
:func:`evaluate_model` streams and scores a model in memory (GRPO's held-out evaluation and
``keep_best``); ``eval.run`` does both with files.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.config import BenchmarkConfig
from benchmarks.protocols import get_protocol
from benchmarks.protocols.base import ProtocolRunner
from data_builders.records import Stream

if TYPE_CHECKING:
    from data_builders.config import RenderConfig
    from data_builders.frame_cache import FrameCache
    from engine.streaming import StreamResult


def get_runner(protocol: str) -> ProtocolRunner:
    """A new runner of protocol ``protocol`` (an unknown name fails with the known ones)."""
    return get_protocol(protocol).new_runner()


def prediction_rows(
    batches: Iterable[tuple[list[Stream], list[StreamResult]]], bench: BenchmarkConfig
) -> Iterator[dict]:
    """The prediction rows (:meth:`ProtocolRunner.prediction_row`) of streamed batches
    (``engine.streaming.stream_batches``), one per stream, as each batch finishes."""
    runner = get_runner(bench.protocol)
    for batch, results in batches:
        for s, res in zip(batch, results, strict=True):
            yield runner.prediction_row(s, res, bench)


def evaluate_model(
    model,
    processor,
    streams: list[Stream],
    records_path: Path,
    render: RenderConfig,
    *,
    bench: BenchmarkConfig | None = None,
    threshold: float = 0.5,
    cache: FrameCache | None = None,
    batch_size: int = 32,
    blank: bool = False,
) -> dict:
    """The metrics of a model in memory on ``streams`` (default: the P3I benchmark), streamed and
    scored exactly as :func:`evaluate` does, with no files written."""
    from engine.render import TurnRenderer
    from engine.streaming import EngineConfig, stream_batches

    bench = bench or BenchmarkConfig()
    get_runner(bench.protocol).check(bench)
    renderer = TurnRenderer(processor, render, bench.steps_per_second)
    batches = stream_batches(
        model.eval(),
        renderer,
        streams,
        records_path,
        EngineConfig(threshold=threshold),
        batch_size=batch_size,
        cache=cache,
        blank=blank,
    )
    rows = list(prediction_rows(batches, bench))
    metrics, _ = get_runner(bench.protocol).score(streams, rows, bench)
    return metrics
