"""Protocol runners: what P3I, EgoServe and ProPerMem each need around the shared streaming engine.

    runner = get_runner("egoserve")
    row = runner.prediction_row(stream, result, bench)     # one predictions.jsonl line
    metrics, per_sample = runner.score(gt_path, pred_path, bench)

The step rate and the history budget reach the engine through the render config (the benchmark
YAML sets them); a runner decides how a stream's fired turns become a prediction, how the
prediction file is scored (through ``eval.score``'s own functions, so ``metrics.json`` is exactly
what ``python -m eval.score`` prints) and which per-task table is logged.

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

from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from data_builders.records import Reply, Stream
from eval.config import BenchmarkConfig
from eval.score import PROTOCOLS, parse_args
from eval.streaming import StreamResult
from rewards.turns import parse_turn

RUNNERS: dict[str, type[ProtocolRunner]] = {}


def register_runner(name: str) -> Callable[[type[ProtocolRunner]], type[ProtocolRunner]]:
    def deco(cls: type[ProtocolRunner]) -> type[ProtocolRunner]:
        RUNNERS[name] = cls
        return cls

    return deco


def get_runner(protocol: str) -> ProtocolRunner:
    if protocol not in RUNNERS:
        raise KeyError(f"no runner for protocol {protocol!r} (known: {', '.join(sorted(RUNNERS))})")
    return RUNNERS[protocol]()


class ProtocolRunner:
    """P3I behaviour; the other protocols override what differs."""

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

    def score_argv(self, bench: BenchmarkConfig) -> list[str]:
        argv = [
            "--content",
            bench.content,
            "--label-fallback",
            bench.open_content,
            "--alpha",
            str(bench.alpha),
        ]
        if bench.tolerance is not None:
            argv += ["--tolerance", str(bench.tolerance)]
        if bench.dataset is not None:
            argv += ["--dataset", bench.dataset]
        if bench.embedding_model is not None:
            argv += ["--embedding-model", bench.embedding_model]
        return argv

    def score(self, gt: Path, pred: Path, bench: BenchmarkConfig) -> tuple[dict[str, Any], list[dict]]:
        """Metrics as ``python -m eval.score`` prints them, and the per-sample rows it writes."""
        argv = ["--protocol", bench.protocol, "--gt", str(gt), "--pred", str(pred), *self.score_argv(bench)]
        args = parse_args(argv)
        result, rows = PROTOCOLS[bench.protocol](args)
        return {"protocol": args.protocol, "content": args.content, **result}, rows

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
