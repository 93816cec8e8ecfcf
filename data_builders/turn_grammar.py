"""The assistant turn format, shared by the streaming engine, the trainers and the rewards.

At every decision step the assistant's raw text is either ``</Silence>`` or
``</Response> <text>``. A response may open with a category tag in square brackets,
``</Response> [safety] Careful, the pan is hot.``; the tag is the reply's category (for EgoServe, the
service subtype in snake_case). :func:`parse_turn` classifies a turn as ``silence``, ``response`` or
``invalid``, with the reason when invalid:

- no decision token at the start (leading whitespace is allowed),
- anything but whitespace after ``</Silence>``,
- an empty response text (a tag alone counts as empty),
- a category tag outside the allowed set. ``allowed=None`` accepts any tag; the default per task is
  :func:`allowed_categories` (the 10 EgoServe subtypes for ``egoserve``, any tag elsewhere).

Tags are normalized with :func:`normalize_category` (case-folded, spaces and hyphens to ``_``), so
``[Tool Use]`` and ``[tool_use]`` are the same category.

>>> parse_turn("</Response> [safety] Careful, the pan is hot.")
ParsedTurn(kind='response', text='Careful, the pan is hot.', category='safety', reason=None)
>>> parse_turn("</Silence>").kind
'silence'
>>> parse_turn("</Response> [weather] Rain.", allowed=EGOSERVE_SUBTYPES).reason
"unknown category tag 'weather'"
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Literal, NamedTuple

SILENCE = "</Silence>"
RESPONSE = "</Response>"

#: EgoServe's service subtypes, by horizon (docs/protocols.md).
EGOSERVE_SUBTYPES_BY_HORIZON: dict[str, tuple[str, ...]] = {
    "instant": ("safety", "tool_use"),
    "short_term": ("next_step_guidance", "error_recovery", "resource_reminder"),
    "episodic": ("memory_recall", "task_reminder"),
    "long_term": ("habit_coaching", "memory_link_contextual", "routine_optimization"),
}
EGOSERVE_SUBTYPES: frozenset[str] = frozenset(
    s for group in EGOSERVE_SUBTYPES_BY_HORIZON.values() for s in group
)

#: Allowed category tags per task; a task not listed here accepts any tag.
TASK_CATEGORIES: dict[str, frozenset[str]] = {"egoserve": EGOSERVE_SUBTYPES}

_TAG = re.compile(r"\[\s*([A-Za-z][A-Za-z0-9_ \-]*?)\s*\]\s*")
_SEP = re.compile(r"[\s\-]+")

TurnKind = Literal["silence", "response", "invalid"]


class ParsedTurn(NamedTuple):
    """One classified assistant turn: ``text`` without the decision token and tag (``""`` for
    silence), ``category`` the normalized tag or None, ``reason`` set only when invalid."""

    kind: TurnKind
    text: str
    category: str | None
    reason: str | None


def normalize_category(tag: str) -> str:
    """Case-fold and join words with ``_``: the form EgoServe subtypes take in this project.

    >>> normalize_category("Next-Step Guidance")
    'next_step_guidance'
    """
    return _SEP.sub("_", tag.strip()).casefold()


def allowed_categories(task: str | None) -> frozenset[str] | None:
    """The allowed category tags for a task (None = any tag).

    >>> sorted(allowed_categories("egoserve"))[:2], allowed_categories("accident_warning")
    (['error_recovery', 'habit_coaching'], None)
    """
    return TASK_CATEGORIES.get(task) if task is not None else None


def split_category(text: str) -> tuple[str | None, str]:
    """Split a leading ``[tag]`` off a response text: (normalized tag or None, the rest, stripped).

    >>> split_category("[Tool Use] Use the small knife.")
    ('tool_use', 'Use the small knife.')
    >>> split_category("No tag here.")
    (None, 'No tag here.')
    """
    stripped = text.lstrip()
    m = _TAG.match(stripped)
    if m is None:
        return None, stripped.strip()
    return normalize_category(m.group(1)), stripped[m.end() :].strip()


def parse_turn(text: str, allowed: Collection[str] | None = None) -> ParsedTurn:
    """Classify one assistant turn's raw text (see the module docstring for the rules).

    >>> parse_turn("</Response>   ").reason
    'empty response text'
    >>> parse_turn("Hello").reason
    'no decision token at the start'
    """
    body = text.lstrip()
    if body.startswith(SILENCE):
        rest = body[len(SILENCE) :]
        if rest.strip():
            return ParsedTurn("invalid", rest.strip(), None, "text after the silence token")
        return ParsedTurn("silence", "", None, None)
    if not body.startswith(RESPONSE):
        return ParsedTurn("invalid", body.strip(), None, "no decision token at the start")
    category, reply = split_category(body[len(RESPONSE) :])
    if not reply:
        return ParsedTurn("invalid", "", category, "empty response text")
    if category is not None and allowed is not None and category not in allowed:
        return ParsedTurn("invalid", reply, category, f"unknown category tag {category!r}")
    return ParsedTurn("response", reply, category, None)
