"""What every protocol's scoring shares: ground truth and predictions in memory, paired and scored.

    settings = ScoreConfig(content="label", open_content="exact")
    paired = pair(ground_truth(streams), {p.id: p.replies for p in predictions})
    metrics, per_sample = get_protocol("p3i").score(paired, settings)   # benchmarks.protocols

``python -m eval.score`` (files), ``eval.run`` / ``eval.watch`` (a checkpoint's streams), GRPO's
held-out evaluation and ``keep_best``, and the demo all score through their protocol's ``score``, so a number
means the same thing wherever it is printed. The metric definitions (docs/protocols.md) live in
``metrics/`` (pure functions shared with the GRPO rewards); this module holds what every protocol
shares: the settings, the pairing of samples and the content scorer.

A protocol's scorer lives in its own module, ``benchmarks/protocols/<name>.py``, part of its
``Protocol`` object (``benchmarks.protocols.base``): ``fn(paired, settings) -> (metrics, per-sample
rows)``, called by name as ``get_protocol(name).score(paired, settings)``; what each reports is in
its module's docstring (``p3i``, ``egoserve``, ``propermem``) and in docs/protocols.md. A protocol
asks the LLM judge when its ``judged(settings)`` says so (by default :func:`default_uses_judge`:
``content`` is ``judge``, or ``label`` with ``open_content`` ``judge``). This package imports no
protocol.

A pair the content scorer cannot score (a judge that could not rate it) leaves its sample out; the
count is reported under ``unscorable`` and, with the judge, ``unrated`` (:class:`UnscorablePairs`).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks.config import ScoringConfig
from data_builders.records import RecordError, Stream, Target
from data_builders.turn_grammar import split_category
from engine.replies import Reply
from infra.registry import Registry
from metrics.content import PURE, ContentScorer

#: Every content scorer: name -> its factory ``(**config) -> scorer``; ``embedding`` and ``judge``
#: (I/O) here, the pure ones in ``metrics.content.PURE``. A module holding an I/O scorer also holds
#: ``config_from_args(settings)``, its config from the scoring settings.
CONTENT_SCORERS = Registry(
    "content scorer",
    {
        "exact": PURE["exact"],
        "label": PURE["label"],
        "embedding": "benchmarks.scoring.embedding:make_embedding",
        "judge": "benchmarks.scoring.judge:make_judge",
        "any": PURE["any"],
    },
)


def get_content_scorer(name: str, **config: Any) -> ContentScorer:
    """Build the content scorer ``name`` (any of :data:`CONTENT_SCORERS`) with its config."""
    return CONTENT_SCORERS.get(name)(**config)


@dataclass
class ScoreConfig(ScoringConfig):
    """How to score (the fields of :class:`benchmarks.config.ScoringConfig`, a benchmark config's scoring
    keys and the options of ``eval.score``), checked when made."""

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


def build_content(settings: ScoreConfig) -> ContentScorer:
    """The content scorer of ``settings`` (its module imported on first use: ``CONTENT_SCORERS``)."""
    if settings.content == "label":
        return get_content_scorer("label", fallback=_build_named(settings.open_content, settings))
    return _build_named(settings.content, settings)


def _build_named(name: str, settings: ScoreConfig) -> ContentScorer:
    try:
        factory = CONTENT_SCORERS.get(name)
        if factory.__module__ != "metrics.content":  # an I/O scorer: its config from the settings
            return factory(**sys.modules[factory.__module__].config_from_args(settings))
        return factory()
    except (KeyError, ValueError, OSError) as exc:
        raise RecordError(f"cannot build the {name!r} content scorer: {exc}") from None


class UnscorablePairs:
    """Counts unscorable pairs and the samples they left out."""

    def __init__(self) -> None:
        self.pairs = 0
        self.samples: list[str] = []

    def add(self, sample_id: str) -> None:
        self.pairs += 1
        self.samples.append(sample_id)

    def report(self) -> dict:
        return {"pairs": self.pairs, "samples_left_out": len(self.samples), "ids": self.samples[:20]}

    def add_to(self, result: dict, judged: bool) -> dict:
        """``result`` with ``unscorable`` (when any pair was) and, when the judge rated (``judged``),
        ``unrated``."""
        if self.pairs:
            result["unscorable"] = self.report()
        if judged:
            result["unrated"] = self.pairs
        return result


def reply_texts(replies: Sequence[Reply]) -> list[str]:
    """The scored text of each reply (its leading ``[tag]`` removed)."""
    return [split_category(r.text)[1] for r in replies]


def prepared_content(settings: ScoreConfig, paired: Paired) -> ContentScorer:
    """The content scorer of ``settings``; a batching one (embedding) has encoded every text of
    ``paired`` at once."""
    content = build_content(settings)
    prepare = getattr(content, "prepare", None)
    if prepare is not None:
        prepare(
            [t.content for g, _ in paired for t in g.targets] + [x for _, r in paired for x in reply_texts(r)]
        )
    return content


def default_uses_judge(settings: ScoreConfig) -> bool:
    """The judge scores content: ``content`` is ``judge``, or ``label`` with ``open_content`` ``judge``."""
    return settings.content == "judge" or (settings.content == "label" and settings.open_content == "judge")
