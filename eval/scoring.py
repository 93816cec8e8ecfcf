"""The one scoring API: ground truth and predictions in memory, a protocol's metrics out.

    settings = ScoreSettings(content="label", label_fallback="exact")
    paired = pair(ground_truth(streams), {p.id: p.replies for p in predictions})
    metrics, per_sample = score("p3i", paired, settings)

``python -m eval.score`` (files), ``eval.run`` / ``eval.watch`` (a checkpoint's streams), GRPO's
held-out evaluation and ``keep_best``, and the demo all score through :func:`score`, so a number
means the same thing wherever it is printed. The metric definitions (docs/protocols.md) live in
``rewards/`` (pure functions shared with the GRPO rewards); this module pairs samples, builds the
content scorer and aggregates.

- ``p3i``: PRS-U/B and their primed forms per task (macro) and over samples (micro); samples without
  targets are reported under ``negatives`` (share silent), and ``with_negatives`` counts them in their
  task (1 when silent, else 0), which is how the toy experiments judge learning. ``redundant_replies``
  is :func:`rewards.prs.redundant_replies`, the count the GRPO redundancy penalty uses.
- ``propermem``: Perfect, hit, early, late, over-trigger, false-fire rates and mean fires.
- ``egoserve``: per-subtype detection F1 with the per-dataset tolerances, as the official evaluator
  computes it (``rewards.egoserve``, docs/egoserve.md), with what its rules dropped and the
  ``strict`` view; with the judge (``content`` or ``label_fallback`` ``judge``) the matched pairs
  are rated.

A pair the content scorer cannot score (a judge that could not rate it) leaves its sample out; the
count is reported under ``unscorable`` and, with the judge, ``unrated``.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from data_builders.records import RecordError, Reply, Stream, Target
from eval.egoserve_files import EventGroup
from eval.egoserve_preds import Tally, events_from_replies
from rewards.content import ContentScorer, Unscorable, get_content_scorer
from rewards.egoserve import (
    DATASET_SUBTYPES,
    MAIN_TYPE,
    MAIN_TYPE_CHECKED,
    SUBTYPES,
    TOLERANCE_S,
    DatasetScore,
    ServiceEvent,
    egoserve_report,
    score_dataset,
)
from rewards.egoserve_rules import strict_subtype
from rewards.propermem import DEFAULT_TOLERANCE_S, clip_outcome, propermem_metrics
from rewards.prs import DEFAULT_ALPHA, PRSScores, aggregate_prs, prs_scores, redundant_replies
from rewards.turns import split_category

#: Modules that register the I/O-bearing content scorers when imported.
SCORER_MODULES = {"embedding": "eval.embedding", "judge": "eval.judge"}
CONTENT_SCORERS = ("exact", "label", "embedding", "judge", "any")


@dataclass
class ScoreSettings:
    """How to score: the content scorer and the protocol's constants (the options of ``eval.score``)."""

    content: str = "label"
    """``exact``, ``label`` (targets with a label by it, the others by ``label_fallback``),
    ``embedding``, ``judge`` or ``any``."""
    label_fallback: str = "exact"
    alpha: float = DEFAULT_ALPHA
    """PRS timing decay, 1/s."""
    tolerance: float | None = None
    """Seconds: EgoServe's matching delta (None: per dataset), ProPerMem's late tolerance (None: 2 s)."""
    dataset: str | None = None
    """EgoServe dataset of every sample (None: each sample's ``meta.dataset`` or source)."""
    embedding_model: str | None = None
    judge_backend: str = "http"
    judge_url: str | None = None
    judge_model: str | None = None
    judge_key_env: str = "JUDGE_API_KEY"
    judge_cache: str | None = None
    judge_timeout: float = 60.0
    """Seconds: the total deadline of one judge request (connect, send and the whole reply)."""

    def __post_init__(self) -> None:
        if self.content not in CONTENT_SCORERS:
            raise RecordError(f"--content {self.content!r}: choose one of {', '.join(CONTENT_SCORERS)}")
        if not (math.isfinite(self.alpha) and self.alpha >= 0):
            raise RecordError(f"--alpha {self.alpha}: the timing decay must be a finite number >= 0 (1/s)")
        if self.tolerance is not None and not (math.isfinite(self.tolerance) and self.tolerance >= 0):
            raise RecordError(f"--tolerance {self.tolerance}: must be a finite number of seconds >= 0")


@dataclass(frozen=True)
class GroundTruth:
    """What scoring reads of a ground-truth record (other stream fields are ignored)."""

    id: str
    task: str
    targets: list[Target]
    source: str | None = None
    meta: dict | None = None

    @classmethod
    def of(cls, stream: Stream) -> GroundTruth:
        return cls(stream.id, stream.task, list(stream.targets), stream.source, stream.meta)


Paired = list[tuple[GroundTruth, list[Reply]]]


def ground_truth(streams: Iterable[Stream]) -> list[GroundTruth]:
    return [GroundTruth.of(s) for s in streams]


def pair(
    gts: Sequence[GroundTruth],
    predictions: Mapping[str, Sequence[Reply]],
    *,
    allow_missing: bool = False,
    gt_file: str | None = None,
    pred_file: str | None = None,
) -> Paired:
    """Each ground truth with its replies. No ground truth at all is an error; so is a prediction id
    not in the ground truth, and a ground truth without a prediction unless ``allow_missing`` (then it
    is scored as silence; with no prediction at all that would score silence everywhere: an error)."""
    if not gts:
        raise RecordError("no ground-truth records to score", file=gt_file)
    if allow_missing and not predictions:
        raise RecordError(
            "no predictions at all: every record would be scored as silence (--allow-missing)", file=pred_file
        )
    known = {g.id for g in gts}
    for pid in predictions:
        if pid not in known:
            raise RecordError("prediction id is not in the ground truth", file=pred_file, record=pid)
    out = []
    for g in gts:
        replies = predictions.get(g.id)
        if replies is None:
            if not allow_missing:
                raise RecordError(
                    "ground-truth record has no prediction (or pass --allow-missing)",
                    file=gt_file,
                    record=g.id,
                )
            replies = []
        out.append((g, list(replies)))
    return out


def build_content(settings: ScoreSettings) -> ContentScorer:
    """The content scorer of ``settings`` (importing the module that registers it if needed)."""
    if settings.content == "label":
        return get_content_scorer("label", fallback=_build_named(settings.label_fallback, settings))
    return _build_named(settings.content, settings)


def _build_named(name: str, settings: ScoreSettings) -> ContentScorer:
    try:
        if name in SCORER_MODULES:
            module = importlib.import_module(SCORER_MODULES[name])
            return get_content_scorer(name, **module.config_from_args(settings))
        return get_content_scorer(name)
    except (KeyError, ValueError, OSError) as exc:
        raise RecordError(f"cannot build the {name!r} content scorer: {exc}") from None


class _Unscorable:
    """Counts unscorable pairs and the samples they left out."""

    def __init__(self) -> None:
        self.pairs = 0
        self.samples: list[str] = []

    def add(self, sample_id: str) -> None:
        self.pairs += 1
        self.samples.append(sample_id)

    def report(self) -> dict:
        return {"pairs": self.pairs, "samples_left_out": len(self.samples), "ids": self.samples[:20]}


def _texts(replies: Sequence[Reply]) -> list[str]:
    return [split_category(r.text)[1] for r in replies]


def _prepare(content: ContentScorer, paired: Paired) -> None:
    """Let a batching scorer (embedding) encode every text at once before scoring."""
    prepare = getattr(content, "prepare", None)
    if prepare is not None:
        prepare([t.content for g, _ in paired for t in g.targets] + [x for _, r in paired for x in _texts(r)])


PROTOCOLS: dict[str, Callable[[Paired, ScoreSettings], tuple[dict, list[dict]]]] = {}


def protocol(name: str) -> Callable:
    def deco(fn: Callable) -> Callable:
        PROTOCOLS[name] = fn
        return fn

    return deco


def score(
    protocol_name: str, paired: Paired, settings: ScoreSettings | None = None
) -> tuple[dict, list[dict]]:
    """Metrics (0-100, as ``eval.score`` prints them, with ``protocol`` and ``content``) and one row
    per sample."""
    settings = settings or ScoreSettings()
    if protocol_name not in PROTOCOLS:
        raise KeyError(f"unknown protocol {protocol_name!r} (known: {', '.join(sorted(PROTOCOLS))})")
    result, rows = PROTOCOLS[protocol_name](paired, settings)
    return {"protocol": protocol_name, "content": settings.content, **result}, rows


@protocol("p3i")
def score_p3i(paired: Paired, settings: ScoreSettings) -> tuple[dict, list[dict]]:
    content = build_content(settings)
    unscorable = _Unscorable()
    rows, every, per_sample, negatives = [], [], [], []
    redundant_total = 0
    _prepare(content, paired)
    for gt, replies in paired:
        texts = _texts(replies)

        def c(k: int, i: int, texts: list[str] = texts, targets: list[Target] = gt.targets) -> float:
            return content(texts[k], targets[i])

        try:
            s = prs_scores([t.time for t in gt.targets], [r.time for r in replies], c, settings.alpha)
        except Unscorable:
            unscorable.add(gt.id)
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
    if uses_judge("p3i", settings):
        result["unrated"] = unscorable.pairs
    return result, per_sample


def _named(s: PRSScores) -> dict[str, float]:
    return {"prs_u": s.u, "prs_b": s.b, "prs_u_prime": s.u_prime, "prs_b_prime": s.b_prime}


@protocol("propermem")
def score_propermem(paired: Paired, settings: ScoreSettings) -> tuple[dict, list[dict]]:
    content = build_content(settings)
    tol = DEFAULT_TOLERANCE_S if settings.tolerance is None else settings.tolerance
    unscorable = _Unscorable()
    outcomes, per_sample = [], []
    _prepare(content, paired)
    for gt, replies in paired:
        if len(gt.targets) > 1:
            raise RecordError(
                f"a ProPerMem clip has one trigger window, got {len(gt.targets)} targets", record=gt.id
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
                unscorable.add(gt.id)
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
    if uses_judge("propermem", settings):
        result["unrated"] = unscorable.pairs
    return result, per_sample


def egoserve_groups(paired: Paired, settings: ScoreSettings, gt_file: str | None = None) -> list[EventGroup]:
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


@protocol("egoserve")
def score_egoserve(paired: Paired, settings: ScoreSettings) -> tuple[dict, list[dict]]:
    return score_egoserve_events(egoserve_groups(paired, settings), settings)


def uses_judge(protocol_name: str, settings: ScoreSettings) -> bool:
    """Whether scoring asks the LLM judge (EgoServe: ``content`` or ``label_fallback`` is judge)."""
    if protocol_name == "egoserve":
        return "judge" in (settings.content, settings.label_fallback)
    return settings.content == "judge" or (settings.content == "label" and settings.label_fallback == "judge")


def score_egoserve_events(
    groups: Sequence[EventGroup | tuple[str, list[ServiceEvent], list[ServiceEvent]]], settings: ScoreSettings
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
    if uses_judge("egoserve", settings):
        from eval.judge import judge_matched_pairs

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
