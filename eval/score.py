"""Score predictions against ground truth with a benchmark's own metric (docs/protocols.md).

    python -m eval.score --protocol p3i --gt gt.jsonl --pred pred.jsonl --content label
    python -m eval.score --protocol egoserve --gt EgoServe_release/HoloAssist/holoassist_service_annotations.json \\
        --pred predictions/holoassist_rebuttal
    python -m eval.score --protocol egoserve --gt EgoServe_release --pred predictions   (all three datasets)
    python -m eval.score --protocol propermem --gt gt.jsonl --pred pred.jsonl --per-sample out.jsonl

Prints one JSON object of aggregate metrics (0-100) as the last line of stdout. Bad input (missing
field, unparsable time, unknown id) prints the file, the record and the reason to stderr and exits 2.

Ground truth lines need only ``id``, ``task`` and ``targets``. Every ground-truth id needs a
prediction (``--allow-missing`` scores a missing one as silence); a prediction id not in the ground
truth is an error. A reply's leading ``[tag]`` is its category and is not part of the scored text.
Content scoring (``--content``, default ``label``; ``--label-fallback`` scores targets without a
label, default ``exact``) goes through the scorer registry ``benchmarks.scoring.CONTENT_SCORERS``; a pair the
scorer cannot score (an unparsable judge answer) leaves its sample out, and the count is reported
under ``unscorable``. P3I samples without targets are reported under ``negatives`` (share silent),
not in the task scores.

EgoServe (docs/egoserve.md): the numbers are the official evaluator's, on the release files and
EgoMemo's prediction folders as they are (``benchmarks.protocols.egoserve_files``, ``benchmarks.protocols.egoserve_preds``); what
its rules drop is counted under ``dropped`` (and named on stderr), input on which the official code
would stop under ``official_would_fail``, and the ``strict`` view (every ground-truth event counts)
comes with its ``errors``. ``--content judge`` rates the matched pairs as the official judge does;
``--judge-timeout`` bounds each request, and pairs the judge could not rate are counted under
``unrated``. A 401/403/404 from the judge exits 2 with the status.

This module only reads files and options (its parser: ``benchmarks.scoring.options``): the scoring itself
is the protocol's (``benchmarks.protocols.get_protocol(name).score``), the same call ``eval.run``,
``eval.watch`` and GRPO's held-out evaluation make in memory.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchmarks.protocols import PROTOCOLS, get_protocol
from benchmarks.protocols.egoserve import egoserve_groups, score_egoserve_events
from benchmarks.protocols.egoserve_files import EventGroup, detect_release, read_release, release_pairs
from benchmarks.scoring import GroundTruth, ScoreConfig, pair
from benchmarks.scoring.judge import config_from_args
from benchmarks.scoring.options import parse_options, settings_from_args
from data_builders.record_io import iter_jsonl, load_streams, write_jsonl
from data_builders.records import RecordError, Target, check_clip_start, check_task
from engine.replies import load_predictions
from infra.chat_client import ChatFatal


def _gt_from_row(row: object) -> GroundTruth:
    if not isinstance(row, dict):
        raise RecordError(f"expected a JSON object, got {type(row).__name__}")
    rid = row.get("id")
    if not isinstance(rid, str) or not rid:
        raise RecordError(f"expected a non-empty string id, got {rid!r}", field="id")
    try:
        if row.get("task") is None:
            raise RecordError("missing task", field="task")
        task = check_task(row["task"])
        if row.get("clip_start") is not None:  # a full stream record: its clip must be scorable
            check_clip_start(row["clip_start"])
        targets = row.get("targets")
        if not isinstance(targets, list):
            raise RecordError("missing or not a list", field="targets")
        parsed = [Target.from_dict(t, f"targets[{i}]") for i, t in enumerate(targets)]
        return GroundTruth(rid, task, parsed, row.get("source"), row.get("meta") or {})
    except RecordError as err:
        raise err.located(record=rid) from None


def load_ground_truth(path: str | Path) -> list[GroundTruth]:
    """Ground-truth records from JSON Lines (id/task/targets only) or full stream parquet."""
    path = Path(path)
    if not path.exists():
        raise RecordError("ground-truth file does not exist", file=path)
    if path.suffix == ".parquet" or path.is_dir():
        return [GroundTruth.of(s) for s in load_streams(path)]
    out, seen = [], set()
    for lineno, row in iter_jsonl(path):
        try:
            gt = _gt_from_row(row)
        except RecordError as err:
            raise err.located(file=path, record=f"line {lineno}") from None
        if gt.id in seen:
            raise RecordError("duplicate id", file=path, record=gt.id, field="id")
        seen.add(gt.id)
        out.append(gt)
    return out


def load_paired(gt_path: str | Path, pred_path: str | Path, allow_missing: bool = False):
    """Ground truth and predictions from files, paired by id (see ``benchmarks.scoring.pair``)."""
    truth = load_ground_truth(gt_path)  # read first: a record nothing could be scored on is named as such
    predictions = {p.id: p.replies for p in load_predictions(pred_path)}
    return pair(
        truth,
        predictions,
        allow_missing=allow_missing,
        gt_file=str(gt_path),
        pred_file=str(pred_path),
    )


def egoserve_groups_from_files(args: argparse.Namespace, settings: ScoreConfig) -> list[EventGroup]:
    """The event groups of every ``--gt``/``--pred`` pair: release files (a release root expands to
    its three datasets) or stream records."""
    if len(args.gt_list) != len(args.pred_list):
        raise RecordError(
            f"{len(args.gt_list)} --gt paths but {len(args.pred_list)} --pred paths (give them in pairs)"
        )
    groups: list[EventGroup] = []
    for gt, pred in zip(args.gt_list, args.pred_list, strict=True):
        if not Path(gt).exists():
            raise RecordError("ground-truth file does not exist", file=gt)
        release = detect_release(Path(gt))
        options = {"model_suffix": args.model_suffix, "response_name": args.response_name}
        if release == "release":
            for ds, gt_path, pred_path in release_pairs(Path(gt), Path(pred)):
                groups.append(read_release(gt_path, pred_path, ds, missing_ok=True, **options))
        elif release is not None:
            groups.append(read_release(gt, pred, args.dataset or release, **options))
        else:
            groups += egoserve_groups(load_paired(gt, pred, args.allow_missing), settings, gt_file=gt)
    return groups


def run(args: argparse.Namespace) -> tuple[dict, list[dict]]:
    """Score the files of parsed options; returns (metrics, per-sample rows)."""
    protocol = get_protocol(args.protocol)
    if args.mode != "official" and protocol.official is None:
        protocol.format_of(args.mode)  # names the protocol's modes
    if protocol.official is not None:  # a public benchmark, on its own release and prediction files
        return protocol.score_files(args)
    settings = settings_from_args(args)
    if protocol.uses_judge(settings):
        try:
            config_from_args(settings)  # a missing URL or model fails before any reading
        except ValueError as exc:
            raise RecordError(str(exc)) from None
    if args.protocol != "egoserve":
        return protocol.score(load_paired(args.gt, args.pred, args.allow_missing), settings)
    result, rows = score_egoserve_events(egoserve_groups_from_files(args, settings), settings)
    return {"protocol": args.protocol, "content": settings.content, **result}, rows


def report_dropped(result: dict) -> list[str]:
    """stderr lines naming what the official EgoServe rules dropped, where the official code would
    stop, and what the strict view could not read (counts and up to three examples each)."""
    lines = []
    for title, key in (
        ("dropped by the official rules", "dropped"),
        ("the official evaluator would stop on", "official_would_fail"),
    ):
        for reason, n in result.get(key, {}).items():
            lines.append(f"{title}: {reason} = {n} (e.g. {'; '.join(result[key + '_examples'][reason])})")
    strict = result.get("strict", {})
    for reason, n in strict.get("errors", {}).items():
        lines.append(
            f"strict view cannot read: {reason} = {n} (e.g. {'; '.join(strict['error_examples'][reason])})"
        )
    return lines


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """``eval.score``'s parsed command line (``--protocol`` one of the listed protocols)."""
    return parse_options(argv, PROTOCOLS.names())


def _check_outputs(args: argparse.Namespace) -> None:
    """``--per-sample`` may not be one of the command's own inputs (it would overwrite the GT)."""
    if not args.per_sample:
        return
    out = Path(args.per_sample).resolve()
    for given in [*args.gt_list, *args.pred_list]:
        source = Path(given).resolve()
        if out == source or source in out.parents:
            raise RecordError(f"--per-sample {args.per_sample} would overwrite an input ({given})")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        _check_outputs(args)
        result, per_sample = run(args)
    except (RecordError, ChatFatal) as err:
        print(f"eval.score: {err}", file=sys.stderr)
        return 2
    for line in report_dropped(result):
        print(f"eval.score: {line}", file=sys.stderr)
    if args.per_sample:
        try:
            write_jsonl(args.per_sample, per_sample)
        except OSError as exc:  # the metrics still reach stdout
            print(json.dumps(result))
            print(f"eval.score: cannot write --per-sample {args.per_sample}: {exc}", file=sys.stderr)
            return 2
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
