"""Turn parsing and the pure content scorers."""

from __future__ import annotations

import pytest

from rewards.content import CONTENT_SCORERS, TargetText, get_content_scorer
from rewards.turns import EGOSERVE_SUBTYPES, parse_turn


@pytest.mark.parametrize(
    ("text", "kind", "reason"),
    [
        ("</Silence>", "silence", None),
        ("  </Silence>\n", "silence", None),
        ("</Silence> but also talk", "invalid", "text after the silence token"),
        ("</Response> Watch out.", "response", None),
        ("</Response>", "invalid", "empty response text"),
        ("</Response> [safety]", "invalid", "empty response text"),
        ("Watch out.", "invalid", "no decision token at the start"),
        ("</Response> [weather] Rain.", "invalid", "unknown category tag 'weather'"),
    ],
)
def test_parse_turn(text, kind, reason):
    parsed = parse_turn(text, allowed=EGOSERVE_SUBTYPES)
    assert (parsed.kind, parsed.reason) == (kind, reason)


def test_tags_normalize_and_any_tag_allowed_without_a_set():
    p = parse_turn("</Response> [Next-Step Guidance] Now add the eggs.", allowed=EGOSERVE_SUBTYPES)
    assert (p.kind, p.category, p.text) == ("response", "next_step_guidance", "Now add the eggs.")
    assert parse_turn("</Response> [weather] Rain.").category == "weather"


def test_pure_scorers():
    exact, label, anything = (get_content_scorer(n) for n in ("exact", "label", "any"))
    t = TargetText("The pan is hot.", label="Warning")
    assert exact("  the PAN is   hot. ", t) == 1.0
    assert exact("the pan is warm.", t) == 0.0
    assert label("warning!   the pan", t) == 1.0
    assert label("the pan is hot", t) == 0.0
    assert anything("", t) == 1.0
    # no label: falls back to exact by default
    assert label("the pan is hot.", TargetText("The pan is hot.")) == 1.0
    assert label("hot pan", TargetText("The pan is hot.")) == 0.0


def test_unknown_scorer_names_the_known_ones():
    assert {"exact", "label", "any"} <= set(CONTENT_SCORERS)
    with pytest.raises(KeyError, match="exact"):
        get_content_scorer("bleu")
