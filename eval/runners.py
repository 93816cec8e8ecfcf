"""Protocol runners: what P3I, EgoServe and ProPerMem each need around the shared streaming engine.

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

- ``p3i``: every fired turn is a reply; its leading ``[tag]`` (if any) is its category. Targets with
  a structured label are scored by the ``label`` scorer, the others by ``open_content``.
- ``egoserve``: the leading tag of a response is the prediction's subtype. A fired turn without a
  tag from the benchmark's subtype list cannot be matched to any service, so it is left out of the
  prediction and counted under ``untagged`` in the line (the record id is the matching unit; reply
  times are the step times on the record axis, absolute for EgoLife).
- ``propermem``: 2-second steps, history as text, negatives included; replies as in P3I.

Each line also keeps the stream's per-step P(</Response>) and decisions (``p_response``,
``fired``), which the threshold sweep reuses (``eval.sweep``); ``eval.score`` ignores them.
"""

from __future__ import annotations

import importlib
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from data_builders.config import RenderConfig
from data_builders.records import Reply, Stream
from data_builders.video import FrameCache
from eval.config import BenchmarkConfig
from eval.render import TurnRenderer
from eval.scoring import ScoreSettings, ground_truth, pair, score, uses_judge
from eval.streaming import EngineConfig, StreamResult, stream_batches
from rewards.turns import parse_turn

RUNNERS: dict[str, type[ProtocolRunner]] = {}


def register_runner(name: str) -> Callable[[type[ProtocolRunner]], type[ProtocolRunner]]:
    def deco(cls: type[ProtocolRunner]) -> type[ProtocolRunner]:
        RUNNERS[name] = cls
        return cls

    return deco


def get_runner(protocol: str) -> ProtocolRunner:
    if protocol not in RUNNERS:
        importlib.import_module("eval.protocols")  # the public benchmarks' runners register there
    if protocol not in RUNNERS:
        raise KeyError(f"no runner for protocol {protocol!r} (known: {', '.join(sorted(RUNNERS))})")
    return RUNNERS[protocol]()


class ProtocolRunner:
    """P3I behaviour; the other protocols override what differs."""

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
        :func:`eval.streaming.stream_batches`)."""
        yield from prediction_rows(
            stream_batches(model, renderer, streams, path, engine_cfg, **options), bench
        )

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
        return ScoreSettings(
            content=bench.content,
            label_fallback=bench.open_content,
            alpha=bench.alpha,
            tolerance=bench.tolerance,
            dataset=bench.dataset,
            embedding_model=bench.embedding_model,
            judge_backend=bench.judge_backend,
            judge_url=bench.judge_url,
            judge_model=bench.judge_model,
            judge_key_env=bench.judge_key_env,
            judge_cache=bench.judge_cache,
            judge_timeout=bench.judge_timeout,
        )

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
            from eval.judge import config_from_args

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
        predictions = {
            row["id"]: [Reply(r["time"], r.get("text", ""), r.get("category")) for r in row["replies"]]
            for row in rows
        }
        return score(bench.protocol, pair(ground_truth(streams), predictions), self.settings(bench))

    def table(
        self, metrics: dict[str, Any], per_sample: list[dict], streams: list[Stream]
    ) -> tuple[list[str], list[list]]:
        """Per-task table: columns and rows (P3I: the four PRS scores per task, 0-100, and the share
        of negatives left silent)."""
        cols = ["task", "n", "prs_u", "prs_b", "prs_u_prime", "prs_b_prime", "silent"]
        n = metrics.get("n", {})
        rows = [
            [task, n.get(task), *(v[k] for k in cols[2:6]), None]
            for task, v in metrics.get("per_task", {}).items()
        ]
        if "negatives" in metrics:
            rows.append(
                [
                    "negatives",
                    metrics["negatives"]["n"],
                    None,
                    None,
                    None,
                    None,
                    metrics["negatives"]["silent"],
                ]
            )
        return cols, rows


@register_runner("p3i")
class P3IRunner(ProtocolRunner):
    pass


@register_runner("egoserve")
class EgoServeRunner(ProtocolRunner):
    def replies(self, result: StreamResult, bench: BenchmarkConfig) -> tuple[list[Reply], int]:
        allowed = frozenset(bench.categories) if bench.categories else None
        out, dropped = [], 0
        for s in result.steps:
            if not s.fired:
                continue
            turn = parse_turn(s.text, allowed=allowed)
            if turn.kind != "response" or turn.category is None:
                dropped += 1
                continue
            out.append(Reply(time=s.time, text=turn.text, category=turn.category))
        return out, dropped

    def table(self, metrics, per_sample, streams):
        cols = ["subtype", "p", "r", "f1", "matched", "n_pred", "n_gt"]
        rows = [[name, *(v[k] for k in cols[1:])] for name, v in metrics.get("per_subtype", {}).items()]
        return cols, rows


@register_runner("propermem")
class ProPerMemRunner(ProtocolRunner):
    def table(self, metrics, per_sample, streams):
        """Per task (positives and negatives apart): clips, perfect %, hit %, mean fires."""
        groups: dict[str, list[dict]] = defaultdict(list)
        by_id = {s.id: s for s in streams}
        for row in per_sample:
            s = by_id[row["id"]]
            groups[f"{s.task} ({'negative' if s.is_negative else 'positive'})"].append(row)
        cols = ["task", "n", "perfect", "hit", "mean_fires"]
        rows = [
            [
                name,
                len(g),
                100.0 * sum(r["perfect"] for r in g) / len(g),
                100.0 * sum(r["hit"] for r in g) / len(g),
                sum(r["fires"] for r in g) / len(g),
            ]
            for name, g in sorted(groups.items())
        ]
        return cols, rows


def prediction_rows(
    batches: Iterable[tuple[list[Stream], list[StreamResult]]], bench: BenchmarkConfig
) -> Iterator[dict]:
    """The prediction rows (:meth:`ProtocolRunner.prediction_row`) of streamed batches
    (``eval.streaming.stream_batches``), one per stream, as each batch finishes."""
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
