"""Every rewards module's ``>>>`` examples run clean."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "rewards.turns",
    "rewards.prs",
    "rewards.egoserve",
    "rewards.egoserve_rules",
    "rewards.propermem",
    "rewards.ovo",
    "rewards.estp",
    "rewards.proactivevideoqa",
    "rewards.streamingbench_proactive",
    "rewards.content",
    "rewards.grpo",
    "perf.prs",
    "benchmarks.scoring.judge",
    "benchmarks.protocols.proactivevideoqa",
]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name):
    result = doctest.testmod(importlib.import_module(name))
    assert result.failed == 0
    assert result.attempted > 0
