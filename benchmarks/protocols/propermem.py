"""ProPerMem: its runner and its scoring (metrics/propermem.py; docs/protocols.md).

    python -m eval.run benchmark=propermem checkpoint=DIR records=/data/built/propermem
    python -m eval.score --protocol propermem --gt gt.jsonl --pred pred.jsonl --per-sample out.jsonl

- Runner: 2-second steps (``conf/benchmark/propermem.yaml``), history as text, negatives included;
  replies as in P3I. The per-task table splits each task into positives and negatives: clips,
  perfect %, hit %, mean fires.
- Scoring (``get_protocol("propermem").score(...)``): a clip has at most one trigger window;
  content is scored only for fires inside it (up to the late ``tolerance``, default 2 s). Reported:
  perfect, hit, early, late, over-trigger and false-fire rates and mean fires.
"""

from __future__ import annotations

from collections import defaultdict

from benchmarks.protocols.base import Protocol, ProtocolRunner, paired_rows
from benchmarks.scoring import (
    Paired,
    ScoreConfig,
    UnscorablePairs,
    default_uses_judge,
    prepared_content,
    reply_texts,
)
from data_builders.records import RecordError
from metrics.content import Unscorable
from metrics.outcomes import FireOutcome, StreamOutcomes
from metrics.propermem import DEFAULT_TOLERANCE_S, clip_outcome, fire_outcomes, propermem_metrics


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

    def outcomes(self, streams, rows, bench):
        """Each fire's outcome by :func:`metrics.propermem.fire_outcomes`, on the content scores
        :func:`score_propermem` computes; a clip the scorer cannot score is ``unclassified``."""
        settings = self.settings(bench)
        tol = DEFAULT_TOLERANCE_S if settings.tolerance is None else settings.tolerance
        paired = paired_rows(streams, rows)
        content = prepared_content(settings, paired)
        out = {}
        for gt, replies in paired:
            window = _window(gt)
            try:
                scores = _window_scores(gt, replies, window, content, tol)
            except Unscorable:
                out[gt.id] = StreamOutcomes(
                    [FireOutcome("unclassified") for _ in replies], ["unclassified"] * len(gt.targets)
                )
                continue
            out[gt.id] = fire_outcomes([r.time for r in replies], scores, window, tol)
        return out


def _window(gt) -> tuple[float, float] | None:
    """The clip's trigger window (None: a negative clip); more than one target is an error."""
    if len(gt.targets) > 1:
        raise RecordError(
            f"a ProPerMem clip has one trigger window, got {len(gt.targets)} targets", record=gt.id
        )
    if not gt.targets:
        return None
    t = gt.targets[0]
    return t.window if t.window is not None else (t.time, t.time)


def _window_scores(gt, replies, window, content, tol: float) -> list[float]:
    """Content scores of the fires inside the window (up to the late tolerance), 0 elsewhere;
    scored only where they matter."""
    if window is None:
        return []
    t = gt.targets[0]
    return [
        content(text, t) if window[0] <= r.time <= window[1] + tol else 0.0
        for r, text in zip(replies, reply_texts(replies), strict=True)
    ]


def score_propermem(paired: Paired, settings: ScoreConfig) -> tuple[dict, list[dict]]:
    content = prepared_content(settings, paired)
    tol = DEFAULT_TOLERANCE_S if settings.tolerance is None else settings.tolerance
    unscorable = UnscorablePairs()
    outcomes, per_sample = [], []
    for gt, replies in paired:
        window = _window(gt)
        try:
            scores = _window_scores(gt, replies, window, content, tol)
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
    return unscorable.add_to(result, default_uses_judge(settings)), per_sample


PROTOCOL = Protocol("propermem", runner=ProPerMemRunner, scorer=score_propermem)
