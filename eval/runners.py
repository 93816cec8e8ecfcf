"""Protocol runners: what each benchmark needs around the shared streaming engine.

    runner = get_runner("egoserve")
    row = runner.prediction_row(stream, result, bench)     # one predictions.jsonl line
    metrics, per_sample = runner.score(streams, rows, bench)
    metrics = evaluate_model(model, processor, streams, records_path, render)   # P3I, in memory

The step rate comes from the benchmark (``benchmark.steps_per_second``), the frame size and history
budget from the render config; a runner decides how a stream's fired turns become a prediction,
how the prediction rows are scored (through ``eval.scoring.score``, the call behind
``python -m eval.score``, so ``metrics.json`` is exactly what it prints) and which per-task table is
logged. :func:`prediction_rows` turns streamed batches into prediction rows; :func:`evaluate_model`
streams and scores a model in memory (GRPO's held-out evaluation and ``keep_best``); ``eval.run``
does both with files.

This module holds the base class and the registry. Each protocol's runner is a
:class:`ProtocolRunner` subclass in its own module, ``eval/protocols/<name>.py``, registered with
``@register_runner("<name>")`` beside its scoring function (``eval.scoring.protocol``); importing
this module imports :mod:`eval.protocols`, so :func:`get_runner` knows every protocol. The base
class reads every fired turn as a reply (its leading ``[tag]``, if any, its category) and logs a
generic per-task table; a protocol overrides what differs (P3I, EgoServe and ProPerMem in
``eval/protocols/p3i.py``, ``egoserve.py``, ``propermem.py``).

Each line also keeps the stream's per-step P(</Response>) and decisions (``p_response``,
``fired``), which the threshold sweep reuses (``eval.sweep``); ``eval.score`` ignores them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import fields as dataclass_fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from data_builders.records import Reply, Stream
from eval.config import BenchmarkConfig, ScoringConfig
from rewards.outcomes import FireOutcome, StreamOutcomes

if TYPE_CHECKING:
    from data_builders.config import RenderConfig
    from data_builders.frame_cache import FrameCache
    from eval.engine.render import TurnRenderer
    from eval.engine.streaming import EngineConfig, StreamResult

RUNNERS: dict[str, type[ProtocolRunner]] = {}


def register_runner(name: str) -> Callable[[type[ProtocolRunner]], type[ProtocolRunner]]:
    def deco(cls: type[ProtocolRunner]) -> type[ProtocolRunner]:
        if name in RUNNERS and RUNNERS[name] is not cls:
            raise ValueError(f"runner {name!r} is registered twice")
        RUNNERS[name] = cls
        return cls

    return deco


def get_runner(protocol: str) -> ProtocolRunner:
    if protocol not in RUNNERS:
        raise KeyError(f"no runner for protocol {protocol!r} (known: {', '.join(sorted(RUNNERS))})")
    return RUNNERS[protocol]()


class ProtocolRunner:
    """What every protocol shares; a protocol's subclass overrides what differs."""

    #: The ``benchmark.protocol_mode`` values this protocol runs (docs/protocols.md).
    modes: tuple[str, ...] = ("streaming",)

    def stream_rows(
        self,
        model,
        renderer: TurnRenderer,
        streams: list[Stream],
        path: Path,
        engine_cfg: EngineConfig,
        bench: BenchmarkConfig,
        **options: Any,
    ) -> Iterator[dict]:
        """The prediction rows of the streams not in ``options["skip"]``, as each is done: the
        engine's own decisions, batch by batch (``options``: those of
        :func:`eval.engine.streaming.stream_batches`)."""
        from eval.engine.streaming import stream_batches  # torch: only where a model streams

        yield from prediction_rows(
            stream_batches(model, renderer, streams, path, engine_cfg, **options), bench
        )

    def shard_key(self, stream: Stream, bench: BenchmarkConfig) -> str:
        """What a multi-process ``eval.run`` splits the records by (``eval.ranks.split``): records
        with one key go to one rank. Here the record id; a runner whose :meth:`stream_rows` serves
        several records from one pass keys them by that pass."""
        return stream.id

    def replies(self, result: StreamResult, bench: BenchmarkConfig) -> tuple[list[Reply], int]:
        """The stream's replies and how many fired turns were left out (none here)."""
        return result.replies(bench.categories), 0

    def gt_row(self, stream: Stream) -> dict[str, Any]:
        """The ground-truth line ``eval.score`` reads for a record (the evaluated records only)."""
        targets = [t.to_dict() for t in stream.targets]
        return {
            "id": stream.id,
            "task": stream.task,
            "targets": targets,
            "source": stream.source,
            "meta": stream.meta,
        }

    def prediction_row(self, stream: Stream, result: StreamResult, bench: BenchmarkConfig) -> dict[str, Any]:
        """One predictions.jsonl line: the prediction plus the per-step decisions."""
        replies, dropped = self.replies(result, bench)
        row: dict[str, Any] = {
            "id": stream.id,
            "replies": [{"time": r.time, "text": r.text, "category": r.category} for r in replies],
            "p_response": [s.p_response for s in result.steps],
            "fired": [int(s.fired) for s in result.steps],
        }
        if dropped:
            row["untagged"] = dropped
        return row

    def settings(self, bench: BenchmarkConfig) -> ScoreSettings:
        """The scoring settings of a benchmark config."""
        return ScoreSettings(**{f.name: getattr(bench, f.name) for f in dataclass_fields(ScoringConfig)})

    def check(self, bench: BenchmarkConfig) -> None:
        """Fail at once, before any streaming, on settings that scoring would reject at the end:
        the judge's URL, model and timeout when ``content`` or ``open_content`` is ``judge``."""
        if bench.protocol_mode not in self.modes:
            raise ValueError(
                f"benchmark {bench.name}: protocol_mode={bench.protocol_mode!r} is not one of the "
                f"{bench.protocol} protocol's modes ({', '.join(self.modes)})"
            )
        settings = self.settings(bench)
        if uses_judge(bench.protocol, settings):
            from eval.scoring.judge import config_from_args

            try:
                config_from_args(settings, command="eval.run")
            except ValueError as exc:
                raise ValueError(f"benchmark {bench.name} scores with the LLM judge: {exc}") from None

    def score(
        self,
        streams: list[Stream],
        rows: Iterable[dict[str, Any]],
        bench: BenchmarkConfig,
        out: Path | None = None,
    ) -> tuple[dict[str, Any], list[dict]]:
        """Metrics as ``python -m eval.score`` prints them, and the per-sample rows it writes, of
        prediction rows (:meth:`prediction_row`) against the streams they were made on. ``out`` is
        the evaluation's folder (``eval.run``), where a protocol may write files of its own."""
        return score(bench.protocol, paired_rows(streams, rows), self.settings(bench))

    def outcomes(
        self, streams: list[Stream], rows: Iterable[dict[str, Any]], bench: BenchmarkConfig
    ) -> dict[str, StreamOutcomes]:
        """Per record id, what each reply and each target came to under the protocol's scoring
        (``rewards.outcomes``; drawn by ``eval.view``). Here: every reply ``unclassified``, no
        target word; P3I, ProPerMem and EgoServe override it with their scorers' readings."""
        return {
            g.id: StreamOutcomes(
                [FireOutcome("unclassified") for _ in replies], ["unclassified"] * len(g.targets)
            )
            for g, replies in paired_rows(streams, rows)
        }

    def table(
        self, metrics: dict[str, Any], per_sample: list[dict], streams: list[Stream]
    ) -> tuple[list[str], list[list]]:
        """Per-task table: columns and rows. Here: one row per entry of ``metrics["per_task"]``
        with its number fields (the first task's, in order) and ``n`` from ``metrics["n"]``."""
        per_task = metrics.get("per_task", {})
        fields = [k for k, v in next(iter(per_task.values()), {}).items() if isinstance(v, int | float)]
        n = metrics.get("n", {})
        cols = ["task", "n", *fields]
        return cols, [[task, n.get(task), *(v.get(k) for k in fields)] for task, v in per_task.items()]


def paired_rows(streams: list[Stream], rows: Iterable[dict[str, Any]]) -> Paired:
    """The streams' ground truths paired with the replies of their prediction rows."""
    predictions = {
        row["id"]: [Reply(r["time"], r.get("text", ""), r.get("category")) for r in row["replies"]]
        for row in rows
    }
    return pair(ground_truth(streams), predictions)


def prediction_rows(
    batches: Iterable[tuple[list[Stream], list[StreamResult]]], bench: BenchmarkConfig
) -> Iterator[dict]:
    """The prediction rows (:meth:`ProtocolRunner.prediction_row`) of streamed batches
    (``eval.engine.streaming.stream_batches``), one per stream, as each batch finishes."""
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
    from eval.engine.render import TurnRenderer
    from eval.engine.streaming import EngineConfig, stream_batches

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


# Last, as the protocol modules subclass ProtocolRunner: eval.scoring imports eval.protocols, whose
# modules register their runners and scorers.
from eval.scoring import Paired, ScoreSettings, ground_truth, pair, score, uses_judge  # noqa: E402
