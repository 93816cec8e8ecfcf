"""The pure content scorers."""

from __future__ import annotations

import pytest

from metrics.content import PURE_SCORERS, TargetText, pure_scorer


def test_pure_scorers():
    exact, label, anything = (pure_scorer(n) for n in ("exact", "label", "any"))
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
    assert {"exact", "label", "any"} <= set(PURE_SCORERS)
    with pytest.raises(KeyError, match="exact"):
        pure_scorer("bleu")
