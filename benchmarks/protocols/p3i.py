"""P3IBench: its runner and its scoring (PRS-U/B, metrics/prs.py; docs/protocols.md).

    python -m eval.run benchmark=p3i checkpoint=DIR data=toy
    python -m eval.score --protocol p3i --gt gt.jsonl --pred pred.jsonl --content label

- Runner: 1 step/s causal stream; every fired turn is a reply and its leading ``[tag]`` (if any) is
  its category. Targets with a structured label are scored by the ``label`` scorer, the others by
  the benchmark's ``open_content``. The per-task table has the four PRS scores per task (0-100) and
  the share of negatives left silent.
- Scoring (``get_protocol("p3i").score(...)``): PRS-U/B and their primed forms per task (macro) and
  over samples (micro); samples without targets are reported under ``negatives`` (share silent),
  and ``with_negatives`` counts them in their task (1 when silent, else 0), which is how the toy
  experiments judge learning. ``redundant_replies`` is :func:`metrics.prs.redundant_replies`, the
  count the GRPO redundancy penalty uses.
"""

from __future__ import annotations

from benchmarks.protocols.base import Protocol, ProtocolRunner, paired_rows
from benchmarks.scoring import (
    Paired,
    ScoreConfig,
    UnscorablePairs,
    default_uses_judge,
    prepared_content,
    reply_texts,
)
from data_builders.records import Target
from metrics.content import Unscorable
from metrics.outcomes import FireOutcome, StreamOutcomes
from metrics.prs import PRSScores, aggregate_prs, fire_outcomes, prs_scores, redundant_replies


class P3IRunner(ProtocolRunner):
    headline = "with_negatives/prs_b"
    headline_words = "PRS-B, each negative counted in its task (100 when silent)"

    def table(self, metrics, per_sample, streams):
        """Per task: the headline PRS-B with the negatives counted, then the four PRS scores of the
        clips with targets (0-100); then the negatives with the share left silent."""
        cols = ["task", "n", self.headline, "prs_u", "prs_b", "prs_u_prime", "prs_b_prime", "silent"]
        n = metrics.get("n", {})
        both = metrics.get("with_negatives", {}).get("per_task", {})
        scores = metrics.get("per_task", {})
        rows = [
            [
                task,
                n.get(task),
                both.get(task, {}).get("prs_b"),
                *(scores.get(task, {}).get(k) for k in cols[3:7]),
                None,
            ]
            for task in [*scores, *(t for t in both if t not in scores)]
        ]
        if "negatives" in metrics:
            rows.append(["negatives", metrics["negatives"]["n"], *[None] * 5, metrics["negatives"]["silent"]])
        return cols, rows

    def outcomes(self, streams, rows, bench):
        """Each reply's and target's outcome under PRS-U (:func:`metrics.prs.fire_outcomes`), with
        the benchmark's content scorer; a sample the scorer cannot score is ``unclassified``."""
        paired = paired_rows(streams, rows)
        settings = self.settings(bench)
        content = prepared_content(settings, paired)
        out = {}
        for gt, replies in paired:
            texts = reply_texts(replies)

            def c(k: int, i: int, texts: list[str] = texts, targets: list[Target] = gt.targets) -> float:
                return content(texts[k], targets[i])

            try:
                out[gt.id] = fire_outcomes(
                    [t.time for t in gt.targets], [r.time for r in replies], c, settings.alpha
                )
            except Unscorable:
                out[gt.id] = StreamOutcomes(
                    [FireOutcome("unclassified") for _ in replies], ["unclassified"] * len(gt.targets)
                )
        return out


def score_p3i(paired: Paired, settings: ScoreConfig) -> tuple[dict, list[dict]]:
    content = prepared_content(settings, paired)
    unscorable = UnscorablePairs()
    rows, every, per_sample, negatives = [], [], [], []
    redundant_total = 0
    for gt, replies in paired:
        texts = reply_texts(replies)

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
    return unscorable.add_to(result, default_uses_judge(settings)), per_sample


def _named(s: PRSScores) -> dict[str, float]:
    return {"prs_u": s.u, "prs_b": s.b, "prs_u_prime": s.u_prime, "prs_b_prime": s.b_prime}


PROTOCOL = Protocol("p3i", runner=P3IRunner, scorer=score_p3i)
