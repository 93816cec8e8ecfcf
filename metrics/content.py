"""Content scorers ``c(reply_text, target) -> [0, 1]``, behind one registry.

The pure scorers live here: ``exact`` (whitespace- and case-normalized equality), ``label`` (the
target's normalized label occurs in the normalized reply, as a substring) and ``any`` (always 1,
timing-only), listed in :data:`PURE_SCORERS` and built by :func:`pure_scorer` (what the GRPO rewards
use). The I/O-bearing ``embedding`` and ``judge`` scorers live in ``benchmarks/scoring/``
(``benchmarks.scoring.embedding``, ``benchmarks.scoring.judge``), so this package stays free of I/O:
the registry of all five is ``benchmarks.scoring.CONTENT_SCORERS``, whose table adds their two lines
to :data:`PURE_SCORERS`'s three; build any of the five with ``benchmarks.scoring.get_content_scorer``.

``label`` on a target without a label falls back to another scorer (our choice; default ``exact``,
set ``fallback=`` to e.g. ``embedding`` in evaluation).

A registry maps a name to a factory ``(**config) -> scorer``; :func:`pure_scorer` builds a pure one.
A scorer that cannot score a pair (e.g. an unparsable judge answer) raises :class:`Unscorable`;
callers count it and leave the sample out, never turn it into a score.

>>> label = pure_scorer("label")
>>> label("  WARNING: car ahead ", TargetText("Car ahead.", label="Warning"))
1.0
>>> pure_scorer("exact")("The  cat", TargetText("the cat"))
1.0
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

from infra.registry import Registry


class TargetLike(Protocol):
    """What a scorer reads of a target (``data_builders.records.Target`` fits)."""

    content: str
    label: str | None
    category: str | None


class TargetText(NamedTuple):
    """A minimal target for scoring (tests, rewards built from dicts)."""

    content: str
    label: str | None = None
    category: str | None = None


ContentScorer = Callable[[str, TargetLike], float]
ScorerFactory = Callable[..., ContentScorer]

#: The pure content scorers: name -> the factory ``(**config) -> scorer`` (``infra.registry``).
PURE = {
    "exact": "metrics.content:make_exact",
    "label": "metrics.content:make_label",
    "any": "metrics.content:make_any",
}
PURE_SCORERS = Registry("pure content scorer", PURE)


class Unscorable(RuntimeError):
    """A scorer could not produce a score for this pair (counted and reported by the caller)."""


def pure_scorer(name: str, **config: Any) -> ContentScorer:
    """Build the pure scorer ``name`` with its config (unknown names raise KeyError; ``embedding``
    and ``judge`` are built by ``benchmarks.scoring.get_content_scorer``).

    >>> pure_scorer("any")("whatever", TargetText("x"))
    1.0
    """
    return PURE_SCORERS.get(name)(**config)


def normalize_text(text: str) -> str:
    """Collapse whitespace and case-fold.

    >>> normalize_text("  Hello\\n  World ")
    'hello world'
    """
    return " ".join(text.split()).casefold()


def exact_score(reply: str, target: TargetLike) -> float:
    """1.0 if the normalized texts are equal, else 0.0."""
    return 1.0 if normalize_text(reply) == normalize_text(target.content) else 0.0


def any_score(reply: str, target: TargetLike) -> float:
    """Always 1.0 (timing-only analysis)."""
    return 1.0


def make_exact(**_: Any) -> ContentScorer:
    return exact_score


def make_any(**_: Any) -> ContentScorer:
    return any_score


def make_label(fallback: str | ContentScorer = "exact", **fallback_config: Any) -> ContentScorer:
    """The ``label`` scorer; targets without a label use ``fallback`` (a name or a scorer).

    >>> s = make_label(fallback="any")
    >>> s("no label here", TargetText("x")), s("all clear", TargetText("x", label="Warning"))
    (1.0, 0.0)
    """
    other = pure_scorer(fallback, **fallback_config) if isinstance(fallback, str) else fallback

    def label_score(reply: str, target: TargetLike) -> float:
        if target.label is None:
            return other(reply, target)
        return 1.0 if normalize_text(target.label) in normalize_text(reply) else 0.0

    return label_score
