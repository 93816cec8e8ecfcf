"""EgoServe: its runner and its scoring (metrics/egoserve.py; docs/egoserve.md, docs/protocols.md).

    python -m eval.run benchmark=egoserve checkpoint=DIR records=/data/egoserve/holoassist
    python -m eval.score --protocol egoserve --gt EgoServe_release --pred predictions

- Runner: 1 step/s; the leading tag of a response is the prediction's subtype. A fired turn without
  a tag from the benchmark's subtype list cannot be matched to any service, so it is left out of
  the prediction and counted under ``untagged`` in the line (the record id is the matching unit;
  reply times are the step times on the record axis, absolute for EgoLife). The per-subtype table
  has precision, recall, F1 and the counts.
- Scoring (``get_protocol("egoserve").score(...)`` on stream records; :func:`score_egoserve_events`
  on event groups, which ``eval.score`` also reads from the release files and EgoMemo's prediction
  folders, ``benchmarks.protocols.egoserve_files`` and ``benchmarks.protocols.egoserve_preds``): per-subtype detection F1 with the
  per-dataset tolerances, as the official evaluator computes it, with what its rules ``dropped``,
  ``official_would_fail`` and the ``strict`` view; when ``content`` or ``open_content`` is
  ``judge`` the matched pairs are rated (``judge``, ``unrated``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from benchmarks.protocols.base import Protocol, ProtocolRunner, paired_rows
from benchmarks.protocols.egoserve_files import EventGroup
from benchmarks.protocols.egoserve_preds import Tally, events_from_replies
from benchmarks.scoring import Paired, ScoreConfig
from data_builders.records import RecordError
from data_builders.turn_grammar import parse_turn
from engine.replies import Reply
from metrics.egoserve import (
    DATASET_SUBTYPES,
    MAIN_TYPE,
    MAIN_TYPE_CHECKED,
    SUBTYPES,
    TOLERANCE_S,
    DatasetScore,
    ServiceEvent,
    egoserve_report,
    score_dataset,
    unit_outcomes,
)
from metrics.egoserve_rules import strict_subtype

if TYPE_CHECKING:
    from benchmarks.config import BenchmarkConfig
    from engine.streaming import StreamResult


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

    def outcomes(self, streams, rows, bench):
        """Each reply's and service's outcome by :func:`metrics.egoserve.unit_outcomes`: the record
        is the unit, matched with its dataset's tolerance, subtypes and main-type rule."""
        settings = self.settings(bench)
        out = {}
        for gt, replies in paired_rows(streams, rows):
            (group,) = egoserve_groups([(gt, replies)], settings)
            tol = settings.tolerance if settings.tolerance is not None else TOLERANCE_S[group.dataset]
            subtypes = DATASET_SUBTYPES.get(group.dataset, SUBTYPES)
            out[gt.id] = unit_outcomes(
                group.gt, group.pred, tol, subtypes, group.dataset in MAIN_TYPE_CHECKED
            )
        return out


def egoserve_groups(paired: Paired, settings: ScoreConfig, gt_file: str | None = None) -> list[EventGroup]:
    """Stream-record ground truth (unit = record id, subtype = target category) grouped by dataset."""
    groups: dict[str, EventGroup] = {}
    for gt, replies in paired:
        ds = settings.dataset or (gt.meta or {}).get("dataset") or gt.source
        if ds not in TOLERANCE_S and settings.tolerance is None:
            raise RecordError(
                f"unknown dataset {ds!r}: pass --dataset or --tolerance", file=gt_file, record=gt.id
            )
        group = groups.setdefault(ds, EventGroup(ds, [], []))
        for i, t in enumerate(gt.targets):
            if t.category is None:
                raise RecordError(f"targets[{i}] has no category (its subtype)", file=gt_file, record=gt.id)
            subtype = strict_subtype(t.category)
            if subtype is None:
                raise RecordError(f"unknown service subtype {t.category!r}", file=gt_file, record=gt.id)
            lo, hi = t.window if t.window is not None else (t.time, t.time)
            group.gt.append(ServiceEvent(gt.id, subtype, lo, hi, t.content))
        group.pred.extend(events_from_replies(gt.id, replies, None))
    return list(groups.values())


def _judged(settings: ScoreConfig) -> bool:
    """The judge rates the matched pairs when ``content`` or ``open_content`` is ``judge``."""
    return "judge" in (settings.content, settings.open_content)


def score_egoserve(paired: Paired, settings: ScoreConfig) -> tuple[dict, list[dict]]:
    return score_egoserve_events(egoserve_groups(paired, settings), settings)


def score_egoserve_events(
    groups: Sequence[EventGroup | tuple[str, list[ServiceEvent], list[ServiceEvent]]], settings: ScoreConfig
) -> tuple[dict, list[dict]]:
    """EgoServe metrics (0-100) of event groups (stream records or the release files): the official
    numbers, what their rules ``dropped`` (counts and examples), ``official_would_fail`` (input on
    which the official code stops), the ``strict`` view with its ``errors``, and the judge's
    ratings of the matched pairs when asked. A ``(dataset, gt, pred)`` tuple is a group whose
    strict view is the same events."""
    official: dict[str, DatasetScore] = {}
    strict: dict[str, DatasetScore] = {}
    dropped, errors, crashes = Tally(), Tally(), Tally()
    pairs, per_sample = [], []
    for group in groups:
        g = group if isinstance(group, EventGroup) else EventGroup(*group)
        tol = settings.tolerance if settings.tolerance is not None else TOLERANCE_S[g.dataset]
        subtypes = DATASET_SUBTYPES.get(g.dataset, SUBTYPES)
        check = g.dataset in MAIN_TYPE_CHECKED
        _count_unscored(g, subtypes, check, dropped)
        s = score_dataset(g.gt, g.pred, tol, subtypes, check)
        st = score_dataset(
            g.gt if g.strict_gt is None else g.strict_gt,
            g.pred if g.strict_pred is None else g.strict_pred,
            tol,
        )
        for views, score_ in ((official, s), (strict, st)):
            if g.dataset in views:
                views[g.dataset].merge(score_)
            else:
                views[g.dataset] = score_
        for tally, part in ((dropped, g.dropped), (errors, g.errors), (crashes, g.crashes)):
            tally.update(part)
        pairs += [(g.dataset, a, b) for a, b in s.pairs]
        per_sample += [
            {"id": unit, "dataset": g.dataset, **{k: vars(c) for k, c in counts.items()}}
            for unit, counts in s.per_unit.items()
        ]
    result = egoserve_report(official)
    result["datasets"] = sorted(official)
    result["rules"] = "official"
    result["dropped"] = dropped.as_dict()
    result["dropped_examples"] = dropped.examples
    if crashes.counts:
        result["official_would_fail"] = crashes.as_dict()
        result["official_would_fail_examples"] = crashes.examples
    result["strict"] = {
        **egoserve_report(strict),
        "errors": errors.as_dict(),
        "error_examples": errors.examples,
    }
    if _judged(settings):
        from benchmarks.scoring.judge import judge_matched_pairs

        result["judge"] = judge_matched_pairs(pairs, settings)
        result["unrated"] = result["judge"]["unrated"]
    return result, per_sample


def _count_unscored(g: EventGroup, subtypes: Sequence[str], check_main: bool, dropped: Tally) -> None:
    """Count events the official numbers hold only in the micro totals, and EgoLife predictions
    whose main type disagrees with their subtype's (they can match no ground truth)."""
    for side, events in (("gt", g.gt), ("pred", g.pred)):
        for e in events:
            if e.subtype not in subtypes:
                dropped.add(f"{side}_subtype_micro_only", f"{g.dataset}/{e.unit}: {e.subtype!r}")
            elif check_main and side == "pred" and e.main_type != MAIN_TYPE[e.subtype]:
                dropped.add("pred_main_type_mismatch", f"{g.dataset}/{e.unit}: {e.main_type!r} / {e.subtype}")


PROTOCOL = Protocol("egoserve", runner=EgoServeRunner, scorer=score_egoserve, judged=_judged)
