"""The ``>>>`` examples in the builder modules' docstrings run and hold."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "data_builders.toolkit",
    "data_builders.video_index",
    "data_builders.stats",
    "data_builders.records",
    "data_builders.turn_grammar",
    "data_builders.stream_steps",
    "data_builders.video",
    "data_builders.frame_codec",
    "data_builders.sources.captaincook4d",
    "data_builders.sources.recipe_order",
    "data_builders.sources.holoassist",
    "data_builders.sources.ego4d_events",
    "data_builders.sources.egoserve",
    "data_builders.sources.llava_video",
    "data_builders.sources.shot2story",
    "data_builders.sources.object_tracks",
]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
