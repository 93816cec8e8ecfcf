"""The assistant turn grammar: parsing a turn, its category tags."""

from __future__ import annotations

import pytest

from data_builders.turn_grammar import EGOSERVE_SUBTYPES, parse_turn


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
