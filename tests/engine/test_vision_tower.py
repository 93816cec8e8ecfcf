"""The project's vision tower call (engine.vision_tower) against transformers' own: the same features,
no read from the device, one attention call per block for a chunk's same-size frames."""

from __future__ import annotations

import json

import pytest
import torch

from engine.vision_tower import VisionPlans, vision_features
from perf.vision import bench_model, counted_reads, counted_sdpa

#: Frame grids (t, h, w) in patches: the toy's 64 x 64, a wide frame, a tall one, two-frame video.
SIZES = [(1, 4, 4), (1, 6, 10), (1, 10, 6), (2, 4, 8)]


@pytest.fixture(scope="module", params=["tiny", "qwen3_vl_4b_narrow"])
def model(request):
    """The tiny model, and Qwen3-VL-4B's vision tower structure at a reduced width."""
    return bench_model(request.param)


def _pixels(model, grids, seed: int = 0) -> torch.Tensor:
    cfg = model.config.vision_config
    rows = sum(t * h * w for t, h, w in grids)
    width = cfg.in_channels * cfg.temporal_patch_size * cfg.patch_size**2
    return torch.randn(rows, width, generator=torch.Generator().manual_seed(seed))


def _both(model, grids):
    """transformers' features and the project's, on the same pixels."""
    pv = _pixels(model, grids)
    plan = VisionPlans(model.model.visual)(grids, pv.device)
    with torch.no_grad():
        theirs = model.model.get_image_features(pv, torch.tensor(grids))
        ours = vision_features(model.model.visual, pv, plan)
    return theirs, ours


def _assert_equal(theirs, ours):
    assert len(ours.pooler_output) == len(theirs.pooler_output)
    assert len(ours.deepstack_features) == len(theirs.deepstack_features) > 0
    pairs = list(zip(theirs.pooler_output, ours.pooler_output))
    pairs += [p for a, b in zip(theirs.deepstack_features, ours.deepstack_features) for p in zip(a, b)]
    for a, b in pairs:
        assert a.shape == b.shape
        assert float((a - b).abs().max()) <= 1e-6


@pytest.mark.parametrize("frames", [1, 4, 16])
@pytest.mark.parametrize("grid", SIZES[:3])
def test_same_features_as_transformers_for_a_chunk(model, grid, frames):
    theirs, ours = _both(model, [grid] * frames)
    assert len(ours.pooler_output) == frames
    _assert_equal(theirs, ours)


def test_mixed_sizes_go_in_per_size_groups_with_the_same_features(model):
    """Frames of different sizes (two with the same patch count but different shapes, a
    two-frame video among them): one attention call per patch count, features in image order."""
    grids = [SIZES[1], SIZES[0], SIZES[2], SIZES[3], SIZES[0], SIZES[1]]
    theirs, ours = _both(model, grids)
    _assert_equal(theirs, ours)
    plan = VisionPlans(model.model.visual)(grids, torch.device("cpu"))
    assert [(g.frames, g.patches) for g in plan.groups] == [(3, 60), (2, 16), (2, 32)]
    pv = _pixels(model, grids)
    with torch.no_grad(), counted_sdpa() as calls:
        vision_features(model.model.visual, pv, plan)
    assert calls[0] == 3 * len(model.model.visual.blocks)


def test_a_call_reads_nothing_back_and_attends_once_per_block(model):
    """A 16-frame chunk: transformers' call reads the device back (the grids, the segment lengths
    in each block, the split sizes) and attends frame by frame; the project's call, its plan
    built, reads nothing and attends once per block."""
    grids = [SIZES[0]] * 16
    pv = _pixels(model, grids)
    visual = model.model.visual
    plan = VisionPlans(visual)(grids, pv.device)
    depth = len(visual.blocks)
    with torch.no_grad():
        with counted_reads() as reads, counted_sdpa() as calls:
            model.model.get_image_features(pv, torch.tensor(grids))
        assert reads.count >= depth + 3 and calls[0] == 16 * depth
        with counted_reads() as reads, counted_sdpa() as calls:
            vision_features(visual, pv, plan)
        assert reads.count == 0 and calls[0] == depth


def test_plans_are_built_once_per_grid_list():
    visual = bench_model("tiny").model.visual
    plans = VisionPlans(visual)
    a = plans([(1, 4, 4)] * 4, torch.device("cpu"))
    assert plans([(1, 4, 4)] * 4, "cpu") is a
    assert plans([(1, 4, 4)] * 3, "cpu") is not a and len(plans.plans) == 2


def test_vision_bench_reports_zero_reads_and_equal_features(capsys):
    from perf import vision

    result = vision.main(["--frames", "4", "--repeats", "1"])
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == result
    assert result["syncs_per_vision_call"] == 0
    # the 4B's 24 blocks each read the segment lengths back (three times), the rest once per call
    assert result["transformers_syncs_per_vision_call"]["qwen3_vl_4b_narrow"] >= 24 + 3
    assert result["vision_sdpa_calls"]["qwen3_vl_4b_narrow"] == {"transformers": 4 * 24, "project": 24}
    assert all(d <= 1e-6 for d in result["vision_max_diff"].values())
    assert all(v > 0 for ms in result["vision_call_ms"].values() for v in ms.values())
