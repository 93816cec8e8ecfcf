"""The ``>>>`` examples of every metrics module, and of the modules built on them, run clean."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "metrics.prs",
    "metrics.egoserve",
    "metrics.egoserve_rules",
    "metrics.propermem",
    "metrics.ovo",
    "metrics.estp",
    "metrics.proactivevideoqa",
    "metrics.streamingbench_proactive",
    "metrics.content",
    "train.grpo.rewards",
    "perf.prs",
    "benchmarks.scoring.judge",
    "benchmarks.protocols.proactivevideoqa",
]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name):
    result = doctest.testmod(importlib.import_module(name))
    assert result.failed == 0
    assert result.attempted > 0
