"""Score predictions against ground truth with a benchmark's own metric (PROTOCOLS.md).

    python -m eval.score --protocol p3i --gt gt.jsonl --pred pred.jsonl --content label
    python -m eval.score --protocol egoserve --gt EgoServe_release/HoloAssist/holoassist_service_annotations.json \\
        --pred holoassist_predictions.json --dataset holoassist
    python -m eval.score --protocol propermem --gt gt.jsonl --pred pred.jsonl --per-sample out.jsonl

Prints one JSON object of aggregate metrics (0-100) as the last line of stdout. Bad input (missing
field, unparsable time, unknown id) prints the file, the record and the reason to stderr and exits 2.

Ground truth lines need only ``id``, ``task`` and ``targets``. Every ground-truth id needs a
prediction (``--allow-missing`` scores a missing one as silence); a prediction id not in the ground
truth is an error. A reply's leading ``[tag]`` is its category and is not part of the scored text.
Content scoring (``--content``, default ``label``; ``--label-fallback`` scores targets without a
label, default ``exact``) goes through the scorer registry of :mod:`rewards.content`; a pair the
scorer cannot score (an unparsable judge answer) leaves its sample out, and the count is reported
under ``unscorable``. P3I samples without targets are reported under ``negatives`` (share silent),
not in the task scores. EgoServe with ``--content judge`` rates every matched pair.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from data_builders.records import (
    TASKS,
    Prediction,
    RecordError,
    Reply,
    Target,
    iter_jsonl,
    load_predictions,
    load_streams,
)
from eval.egoserve_files import (
    detect_release,
    events_from_replies,
    is_official_prediction_file,
    load_official_predictions,
    load_release_gt,
    service_subtype,
)
from rewards.content import ContentScorer, Unscorable, get_content_scorer
from rewards.egoserve import TOLERANCE_S, ServiceEvent, combine_counts, egoserve_metrics, match_services
from rewards.propermem import DEFAULT_TOLERANCE_S, clip_outcome, propermem_metrics
from rewards.prs import DEFAULT_ALPHA, PRSScores, aggregate_prs, prs_scores, redundant_replies
from rewards.turns import split_category

PROTOCOLS: dict[str, Callable[[argparse.Namespace], tuple[dict, list[dict]]]] = {}
#: Modules that register the I/O-bearing content scorers when imported.
SCORER_MODULES = {"embedding": "eval.embedding", "judge": "eval.judge"}


def protocol(name: str) -> Callable:
    def deco(fn: Callable) -> Callable:
        PROTOCOLS[name] = fn
        return fn

    return deco


@dataclass(frozen=True)
class GroundTruth:
    """What scoring reads of a ground-truth line (other stream fields are ignored)."""

    id: str
    task: str
    targets: list[Target]
    source: str | None = None
    meta: dict | None = None


def _gt_from_row(row: Any) -> GroundTruth:
    if not isinstance(row, dict):
        raise RecordError(f"expected a JSON object, got {type(row).__name__}")
    rid = row.get("id")
    if not isinstance(rid, str) or not rid:
        raise RecordError(f"expected a non-empty string id, got {rid!r}", field="id")
    try:
        task = row.get("task")
        if task not in TASKS:
            raise RecordError(f"missing or unknown task {task!r}", field="task")
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
        return [GroundTruth(s.id, s.task, s.targets, s.source, s.meta) for s in load_streams(path)]
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


def pair_predictions(
    gts: list[GroundTruth], pred_path: str | Path, gt_path: str | Path, allow_missing: bool = False
) -> list[tuple[GroundTruth, list[Reply]]]:
    """Each ground truth with its prediction's replies; unknown or (by default) missing ids fail."""
    preds = {p.id: p for p in load_predictions(pred_path)}
    known = {g.id for g in gts}
    for pid in preds:
        if pid not in known:
            raise RecordError(
                f"prediction id is not in the ground truth ({gt_path})", file=pred_path, record=pid
            )
    out = []
    for g in gts:
        pred = preds.get(g.id)
        if pred is None:
            if not allow_missing:
                raise RecordError(
                    f"ground-truth record has no prediction in {pred_path} (or pass --allow-missing)",
                    file=gt_path,
                    record=g.id,
                )
            pred = Prediction(g.id, [])
        out.append((g, pred.replies))
    return out


def build_content(args: argparse.Namespace) -> ContentScorer:
    """The content scorer named by ``--content`` (importing the module that registers it if needed)."""
    name = args.content
    config: dict[str, Any] = {}
    if name == "label":
        config["fallback"] = _build_named(args.label_fallback, args)
        return get_content_scorer("label", **config)
    return _build_named(name, args)


def _build_named(name: str, args: argparse.Namespace) -> ContentScorer:
    try:
        if name in SCORER_MODULES:
            module = importlib.import_module(SCORER_MODULES[name])
            return get_content_scorer(name, **module.config_from_args(args))
        return get_content_scorer(name)
    except (KeyError, ValueError, OSError) as exc:
        raise RecordError(f"cannot build the {name!r} content scorer: {exc}") from None


class _Counter:
    """Counts unscorable pairs and left-out samples."""

    def __init__(self) -> None:
        self.pairs = 0
        self.samples: list[str] = []

    def report(self) -> dict:
        return {"pairs": self.pairs, "samples_left_out": len(self.samples), "ids": self.samples[:20]}


def _prepare(content: ContentScorer, paired: list[tuple[GroundTruth, list[Reply]]]) -> None:
    """Let a batching scorer (embedding) encode every text at once before scoring."""
    prepare = getattr(content, "prepare", None)
    if prepare is not None:
        prepare([t.content for g, _ in paired for t in g.targets] + [x for _, r in paired for x in _texts(r)])


def _texts(replies: list[Reply]) -> list[str]:
    return [split_category(r.text)[1] for r in replies]


@protocol("p3i")
def score_p3i(args: argparse.Namespace) -> tuple[dict, list[dict]]:
    content = build_content(args)
    unscorable = _Counter()
    rows, every, per_sample, negatives = [], [], [], []
    redundant_total = 0
    paired = pair_predictions(load_ground_truth(args.gt), args.pred, args.gt, args.allow_missing)
    _prepare(content, paired)
    for gt, replies in paired:
        texts = _texts(replies)

        def c(k: int, i: int, texts: list[str] = texts, targets: list[Target] = gt.targets) -> float:
            return content(texts[k], targets[i])

        try:
            s = prs_scores([t.time for t in gt.targets], [r.time for r in replies], c, args.alpha)
        except Unscorable:
            unscorable.pairs += 1
            unscorable.samples.append(gt.id)
            continue
        if gt.targets:
            rows.append((gt.task, s))
        else:
            negatives.append(s.u)
        every.append((gt.task, s))
        redundant = redundant_replies([t.time for t in gt.targets], [r.time for r in replies])
        redundant_total += redundant
        per_sample.append(
            {"id": gt.id, "task": gt.task, **_named(s), "replies": len(replies), "redundant": redundant}
        )
    result = aggregate_prs(rows)
    result["redundant_replies"] = redundant_total
    if negatives:
        result["negatives"] = {"n": len(negatives), "silent": 100.0 * sum(negatives) / len(negatives)}
    both = aggregate_prs(every)  # a negative counts in its task: 1 when silent, else 0
    result["with_negatives"] = {
        "prs_u": both["prs_u"],
        "prs_b": both["prs_b"],
        "per_task": {t: {"prs_u": v["prs_u"], "prs_b": v["prs_b"]} for t, v in both["per_task"].items()},
    }
    if unscorable.pairs:
        result["unscorable"] = unscorable.report()
    return result, per_sample


def _named(s: PRSScores) -> dict[str, float]:
    return {"prs_u": s.u, "prs_b": s.b, "prs_u_prime": s.u_prime, "prs_b_prime": s.b_prime}


@protocol("propermem")
def score_propermem(args: argparse.Namespace) -> tuple[dict, list[dict]]:
    content = build_content(args)
    tol = DEFAULT_TOLERANCE_S if args.tolerance is None else args.tolerance
    unscorable = _Counter()
    outcomes, per_sample = [], []
    paired = pair_predictions(load_ground_truth(args.gt), args.pred, args.gt, args.allow_missing)
    _prepare(content, paired)
    for gt, replies in paired:
        if len(gt.targets) > 1:
            raise RecordError(
                f"a ProPerMem clip has one trigger window, got {len(gt.targets)} targets",
                file=args.gt,
                record=gt.id,
            )
        window = None
        scores: list[float] = []
        if gt.targets:
            t = gt.targets[0]
            window = t.window if t.window is not None else (t.time, t.time)
            try:  # content is scored only where it matters: fires inside the window
                scores = [
                    content(text, t) if window[0] <= r.time <= window[1] + tol else 0.0
                    for r, text in zip(replies, _texts(replies), strict=True)
                ]
            except Unscorable:
                unscorable.pairs += 1
                unscorable.samples.append(gt.id)
                continue
        o = clip_outcome([r.time for r in replies], scores, window, tol)
        outcomes.append(o)
        per_sample.append(
            {
                "id": gt.id,
                "perfect": o.perfect,
                "hit": o.hit,
                "early": o.early,
                "late": o.late,
                "fires": o.fires,
            }
        )
    result = propermem_metrics(outcomes)
    if unscorable.pairs:
        result["unscorable"] = unscorable.report()
    return result, per_sample


def _egoserve_inputs(
    gt_path: Path, pred_path: Path, args: argparse.Namespace
) -> list[tuple[str, list, list]]:
    """(dataset, gt events, predicted events) groups; one per dataset present."""
    dataset = detect_release(gt_path)
    if dataset is not None:
        dataset = args.dataset or dataset
        gt_events = load_release_gt(gt_path, dataset)
        units = {e.unit for e in gt_events}
        if is_official_prediction_file(pred_path):
            pred_events = load_official_predictions(pred_path, dataset)
        else:
            pred_events = [
                e
                for p in load_predictions(pred_path)
                for e in events_from_replies(p.id, p.replies, pred_path)
            ]
        for e in pred_events:
            if e.unit not in units:
                raise RecordError(
                    f"prediction unit is not in the ground truth ({gt_path})", file=pred_path, record=e.unit
                )
        return [(dataset, gt_events, pred_events)]
    groups: dict[str, tuple[list, list]] = {}
    for gt, replies in pair_predictions(load_ground_truth(gt_path), pred_path, gt_path, args.allow_missing):
        ds = args.dataset or (gt.meta or {}).get("dataset") or gt.source
        if ds not in TOLERANCE_S and args.tolerance is None:
            raise RecordError(
                f"unknown dataset {ds!r}: pass --dataset or --tolerance", file=gt_path, record=gt.id
            )
        g, p = groups.setdefault(ds, ([], []))
        for i, t in enumerate(gt.targets):
            if t.category is None:
                raise RecordError(f"targets[{i}] has no category (its subtype)", file=gt_path, record=gt.id)
            lo, hi = t.window if t.window is not None else (t.time, t.time)
            g.append(ServiceEvent(gt.id, service_subtype(t.category, gt_path, gt.id), lo, hi, t.content))
        p.extend(events_from_replies(gt.id, replies, pred_path))
    return [(ds, g, p) for ds, (g, p) in groups.items()]


@protocol("egoserve")
def score_egoserve(args: argparse.Namespace) -> tuple[dict, list[dict]]:
    gts, preds = args.gt_list, args.pred_list
    if len(gts) != len(preds):
        raise RecordError(f"{len(gts)} --gt paths but {len(preds)} --pred paths (give them in pairs)")
    per_dataset, per_unit, pairs = [], {}, []
    for gt_path, pred_path in zip(gts, preds, strict=True):
        for ds, g, p in _egoserve_inputs(Path(gt_path), Path(pred_path), args):
            tol = args.tolerance if args.tolerance is not None else TOLERANCE_S[ds]
            by_unit: dict[str, tuple[list, list]] = {}
            for k, events in enumerate((g, p)):
                for e in events:
                    by_unit.setdefault(e.unit, ([], []))[k].append(e)
            for unit, (unit_gt, unit_pred) in sorted(by_unit.items()):
                counts, found = match_services(unit_gt, unit_pred, tol)
                per_unit[(ds, unit)] = counts
                pairs.extend(found)
            per_dataset.append(str(ds))
    total = combine_counts(*per_unit.values())
    result = egoserve_metrics(total)
    result["datasets"] = sorted(set(per_dataset))
    if args.content == "judge":
        from eval.judge import judge_matched_pairs

        result["judge"] = judge_matched_pairs(pairs, args)
    per_sample = [
        {"id": unit, "dataset": ds, **{k: vars(c) for k, c in counts.items()}}
        for (ds, unit), counts in per_unit.items()
    ]
    return result, per_sample


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m eval.score", description=__doc__.split("\n\n")[0])
    parser.add_argument("--protocol", required=True, choices=sorted(PROTOCOLS))
    parser.add_argument(
        "--gt", required=True, action="append", help="ground truth (EgoServe: repeat with --pred)"
    )
    parser.add_argument("--pred", required=True, action="append", help="predictions")
    parser.add_argument("--content", default="label", choices=["exact", "label", "embedding", "judge", "any"])
    parser.add_argument("--label-fallback", default="exact", help="scorer for targets without a label")
    parser.add_argument("--alpha", type=float, default=DEFAULT_ALPHA, help="PRS timing decay (1/s)")
    parser.add_argument(
        "--tolerance", type=float, default=None, help="seconds (EgoServe delta, ProPerMem tol)"
    )
    parser.add_argument("--dataset", choices=sorted(TOLERANCE_S), default=None)
    parser.add_argument("--per-sample", default=None, help="write one JSON line per sample here")
    parser.add_argument("--allow-missing", action="store_true", help="score a missing prediction as silence")
    parser.add_argument("--embedding-model", default=None, help="sentence-embedding model folder")
    parser.add_argument("--judge-backend", default="http", help="http (OpenAI-compatible) or local")
    parser.add_argument(
        "--judge-url", default=None, help="base URL of the judge endpoint, e.g. http://host/v1"
    )
    parser.add_argument("--judge-model", default=None, help="judge model name (http) or folder (local)")
    parser.add_argument("--judge-key-env", default="JUDGE_API_KEY", help="env var holding the API key")
    parser.add_argument("--judge-cache", default=None, help="sqlite cache file of judge answers")
    args = parser.parse_args(argv)
    args.gt_list, args.pred_list = args.gt, args.pred
    if args.protocol != "egoserve" and (len(args.gt) > 1 or len(args.pred) > 1):
        parser.error("--gt and --pred may repeat only for --protocol egoserve")
    args.gt, args.pred = args.gt[0], args.pred[0]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        result, per_sample = PROTOCOLS[args.protocol](args)
    except RecordError as err:
        print(f"eval.score: {err}", file=sys.stderr)
        return 2
    result = {"protocol": args.protocol, "content": args.content, **result}
    if args.per_sample:
        out = Path(args.per_sample)
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("w", encoding="utf-8") as fh:
            for row in per_sample:
                fh.write(json.dumps(row) + "\n")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
