"""What each fire and each target came to, as a protocol's scorer sees it (the evaluation viewer,
``eval.app.view``, draws these; it holds no timing rule of its own).

A protocol's rules live in its module (:func:`metrics.prs.fire_outcomes`,
:func:`metrics.propermem.fire_outcomes`, :func:`metrics.egoserve.unit_outcomes`); each returns a
:class:`StreamOutcomes`: one :class:`FireOutcome` per reply, in the caller's order, and one word per
target: the outcome of the reply credited to it (``hit``, or ``late`` / ``wrong`` where the protocol
credits such a reply), or ``missed``.

Fire outcomes:

- ``hit``: the reply the scorer credits to a target, on time;
- ``early`` / ``late``: before / after the time the protocol credits;
- ``redundant``: a further reply to a target that already has its credited one;
- ``false_alarm``: a reply where no target can take it (a negative stream, no target near);
- ``wrong``: on time, but the content (or the subtype) does not match;
- ``unclassified``: a protocol without a per-fire reading (the public benchmarks' answers).
"""

from __future__ import annotations

from typing import NamedTuple

FIRE_OUTCOMES = ("hit", "early", "late", "redundant", "false_alarm", "wrong", "unclassified")
TARGET_OUTCOMES = ("hit", "late", "wrong", "missed")


class FireOutcome(NamedTuple):
    """One reply's outcome, the target it was scored against (index, or None) and its score there
    (the protocol's pair score in [0, 1], or None where the protocol has none)."""

    outcome: str
    target: int | None = None
    score: float | None = None


class StreamOutcomes(NamedTuple):
    fires: list[FireOutcome]
    targets: list[str]
