"""What every protocol module builds on: the :class:`Protocol` object and the runner base class.

A benchmark protocol is one object, defined in its own module ``benchmarks/protocols/<name>.py``::

    PROTOCOL = Protocol("p3i", runner=P3IRunner, scorer=score_p3i)

with its runner (a :class:`ProtocolRunner` subclass: how a stream's fired turns become a
prediction row, how rows are scored, which per-task table is logged), its scorer
(``fn(paired, settings) -> (metrics, per-sample rows)`` on stream records: ``eval.score``,
``eval.run``, ``eval.watch``, GRPO's held-out evaluation, the demo), when it asks the LLM judge
(``judged``), and for a public benchmark its :class:`OfficialFormat` (its release and prediction
files, scored by its own rules: ``eval.score --protocol NAME --gt FILE --pred FILE``). The table
in ``benchmarks/protocols/__init__.py`` lists where each lives; callers get one by name
(``benchmarks.protocols.get_protocol``, ``benchmarks.runners.get_runner``).

The base runner reads every fired turn as a reply (its leading ``[tag]``, if any, its category) and
logs a generic per-task table; a protocol overrides what differs. Each prediction row also keeps
the stream's per-step P(</Response>) and decisions (``p_response``, ``fired``), which the threshold
sweep reuses (``eval.threshold_sweep``); ``eval.score`` ignores them.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from dataclasses import fields as dataclass_fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.config import BenchmarkConfig, ScoringConfig
from benchmarks.scoring import Paired, ScoreConfig, default_uses_judge, ground_truth, pair
from benchmarks.scoring.options import settings_from_args
from data_builders.records import RecordError, Stream
from engine.replies import Reply
from metrics.outcomes import FireOutcome, StreamOutcomes

if TYPE_CHECKING:
    from engine.render import TurnRenderer
    from engine.streaming import EngineConfig, StreamResult

#: A protocol's scorer on stream records: (paired, settings) -> (metrics, per-sample rows).
Scorer = Callable[[Paired, ScoreConfig], tuple[dict, list[dict]]]


@dataclass(frozen=True)
class OfficialFormat:
    """A benchmark scored on its own files: ``score(gt, pred, options)`` -> (metrics, per-item rows).

    ``options`` is ``eval.score``'s parsed command line (``--model``, ``--per-sample``, the judge
    options); ``metrics`` is a JSON-ready dict keyed by the official figure names."""

    score: Callable[[Path, Path, argparse.Namespace], tuple[dict, list[dict]]]
    summary: str
    definition: str | None = None
    """Whose definition a scoring mode follows (repository and file); printed as ``definition``."""


#: The ``eval.score --mode`` of a benchmark's own scorer.
OFFICIAL_MODE = "official"


@dataclass(frozen=True)
class Protocol:
    """One benchmark protocol: its runner, its scorer, when it asks the judge, its official format.

    A public benchmark scored only on its official files has no ``scorer`` (its runner writes the
    files and scores them: ``benchmarks.protocols.public.PublicRunner``)."""

    name: str
    runner: type[ProtocolRunner]
    scorer: Scorer | None = None
    official: OfficialFormat | None = None
    judged: Callable[[ScoreConfig], bool] = default_uses_judge
    scoring_modes: Mapping[str, OfficialFormat] = field(default_factory=dict)
    """Other definitions scored on the same files, by ``eval.score --mode NAME`` (e.g. a peer's
    online metric); each names whose definition it follows."""

    def mode_names(self) -> list[str]:
        """The ``eval.score --mode`` values of this protocol (``official`` first)."""
        return ([OFFICIAL_MODE] if self.official is not None else []) + sorted(self.scoring_modes)

    def format_of(self, mode: str) -> OfficialFormat:
        """The scorer of ``mode``; an unknown mode is a :class:`RecordError` naming the known ones."""
        if mode == OFFICIAL_MODE and self.official is not None:
            return self.official
        if mode in self.scoring_modes:
            return self.scoring_modes[mode]
        known = ", ".join(self.mode_names()) or "none"
        raise RecordError(f"protocol {self.name!r} has no scoring mode {mode!r} (its modes: {known})")

    def new_runner(self) -> ProtocolRunner:
        return self.runner(self)

    def uses_judge(self, settings: ScoreConfig) -> bool:
        """Whether scoring with ``settings`` asks the LLM judge."""
        return self.judged(settings)

    def score(self, paired: Paired, settings: ScoreConfig | None = None) -> tuple[dict, list[dict]]:
        """Metrics (0-100, as ``eval.score`` prints them, with ``protocol`` and ``content``) and one
        row per sample, of stream records paired with their replies."""
        settings = settings or ScoreConfig()
        if self.scorer is None:
            raise KeyError(f"protocol {self.name!r} scores its official files only (eval.score --gt/--pred)")
        result, rows = self.scorer(paired, settings)
        return {"protocol": self.name, "content": settings.content, **result}, rows

    def score_files(self, args: argparse.Namespace) -> tuple[dict, list[dict]]:
        """The official figures of the release file ``args.gt`` and the prediction file (or folder)
        ``args.pred`` (``eval.score``'s parsed options), with ``protocol`` first."""
        assert self.official is not None, f"protocol {self.name!r} has no official format"
        mode = getattr(args, "mode", None) or OFFICIAL_MODE
        fmt = self.format_of(mode)
        settings = settings_from_args(args)
        if mode == OFFICIAL_MODE and self.uses_judge(settings):
            from benchmarks.scoring.judge import config_from_args

            try:
                config_from_args(settings)  # a missing URL or model fails before any reading
            except ValueError as exc:
                raise RecordError(str(exc)) from None
        for given, what in ((args.gt, "ground-truth"), (args.pred, "prediction")):
            if not Path(given).exists():
                raise RecordError(f"{what} file does not exist", file=given)
        result, rows = fmt.score(Path(args.gt), Path(args.pred), args)
        if mode == OFFICIAL_MODE:
            return {"protocol": self.name, **result}, rows
        return {"protocol": self.name, "mode": mode, "definition": fmt.definition, **result}, rows


class ProtocolRunner:
    """What every protocol shares; a protocol's subclass overrides what differs. Made by
    :meth:`Protocol.new_runner`, it knows its protocol (``self.protocol``): its scorer and when it
    asks the judge."""

    #: The ``benchmark.protocol_mode`` values this protocol runs (docs/protocols.md).
    modes: tuple[str, ...] = ("streaming",)
    #: The metric a run is judged by first, as a path into the metrics (``"with_negatives/prs_b"``),
    #: and what it is in words: ``eval.run``'s summary line and the viewer's header lead with it.
    #: None: the protocol names no single one.
    headline: str | None = None
    headline_words: str = ""

    def __init__(self, protocol: Protocol) -> None:
        self.protocol = protocol

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
        :func:`engine.streaming.stream_batches`)."""
        from engine.streaming import stream_batches  # torch: only where a model streams

        for batch, results in stream_batches(model, renderer, streams, path, engine_cfg, **options):
            for s, res in zip(batch, results, strict=True):
                yield self.prediction_row(s, res, bench)

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

    def settings(self, bench: BenchmarkConfig) -> ScoreConfig:
        """The scoring settings of a benchmark config."""
        return ScoreConfig(**{f.name: getattr(bench, f.name) for f in dataclass_fields(ScoringConfig)})

    def check(self, bench: BenchmarkConfig) -> None:
        """Fail at once, before any streaming, on settings that scoring would reject at the end:
        the judge's URL, model and timeout when ``content`` or ``open_content`` is ``judge``."""
        if bench.protocol_mode not in self.modes:
            raise ValueError(
                f"benchmark {bench.name}: protocol_mode={bench.protocol_mode!r} is not one of the "
                f"{bench.protocol} protocol's modes ({', '.join(self.modes)})"
            )
        settings = self.settings(bench)
        if self.protocol.uses_judge(settings):
            from benchmarks.scoring.judge import config_from_args

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
        return self.protocol.score(paired_rows(streams, rows), self.settings(bench))

    def outcomes(
        self, streams: list[Stream], rows: Iterable[dict[str, Any]], bench: BenchmarkConfig
    ) -> dict[str, StreamOutcomes]:
        """Per record id, what each reply and each target came to under the protocol's scoring
        (``metrics.outcomes``; drawn by ``eval.app.view``). Here: every reply ``unclassified``, no
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
