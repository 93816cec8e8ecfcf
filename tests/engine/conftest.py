"""The engine tests' shared toy streams, and the measure their exactness checks compare by."""

from __future__ import annotations

import pytest

from data_builders.config import RenderConfig
from data_builders.frames import stream_frames
from data_builders.synthetic.toy import generate_toy
from engine.render import TurnRenderer


@pytest.fixture(scope="module")
def setup(tiny_model_and_processor, tmp_path_factory):
    """(model, renderer, streams, frames): three 40-step toy streams at 64 x 64, per test module."""
    model, processor = tiny_model_and_processor
    out = tmp_path_factory.mktemp("toy40")
    streams = generate_toy(out, n=3, seed=1, duration=40)
    renderer = TurnRenderer(processor, RenderConfig(max_pixels=64 * 64))
    frames = [stream_frames(s, out / s.video, renderer.cfg) for s in streams]
    return model, renderer, streams, frames


def max_logit_diff(a, b) -> float:
    """The largest difference between two results' decision logits, step for step."""
    return max(
        max(abs(x - y) for x, y in zip(sa.decision_logits, sb.decision_logits, strict=True))
        for sa, sb in zip(a.steps, b.steps, strict=True)
    )
