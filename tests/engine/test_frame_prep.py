"""Frames prepared in torch (engine.frame_prep) against the image processor itself: the same
``pixel_values`` bit for bit and the same grids, for the tiny model's and Qwen3-VL-4B's settings."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import Qwen2VLImageProcessor
from transformers.image_utils import PILImageResampling

from engine.config import model_preset
from engine.frame_prep import FramePrep, int16_weights, resize_bicubic_uint8, smart_size

# (height, width): 720p, a portrait phone frame, QCIF, 720p as the 448 x 448 budget decodes it
# (data_builders.video.fit_pixels), and a frame already at its processed size
SIZES = [(720, 1280), (1280, 720), (144, 176), (336, 597), (448, 448)]


def _processor(model: str) -> Qwen2VLImageProcessor:
    return Qwen2VLImageProcessor(**model_preset(model)["image_processor"])


def _frames(height: int, width: int, n: int = 2, seed: int = 0) -> np.ndarray:
    """Noise (every overshoot of the bicubic filter, every rounding) over a gradient."""
    rng = np.random.default_rng(seed)
    ramp = np.linspace(0, 255, width, dtype=np.float64)[None, :, None]
    noise = rng.integers(0, 256, (n, height, width, 3))
    return np.where(noise % 3 == 0, ramp, noise).astype(np.uint8)


@pytest.mark.parametrize("model", ["tiny", "qwen3_vl_4b"])
@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_frames_prepared_in_torch_equal_the_processor_s(model, size):
    processor = _processor(model)
    frames = _frames(*size)
    expected = processor(images=list(frames), return_tensors="pt")
    prep = FramePrep.of(processor)
    pixel_values, grids = prep(torch.from_numpy(frames))
    assert pixel_values.dtype == torch.float32 and pixel_values.shape == expected["pixel_values"].shape
    assert float((pixel_values - expected["pixel_values"]).abs().max()) == 0.0
    assert grids == [tuple(g) for g in expected["image_grid_thw"].tolist()]


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_the_integer_resize_equals_pytorch_s_uint8_kernel(size):
    """The two integer passes a GPU runs (:func:`resize_bicubic_uint8`), run here on the CPU,
    against the uint8 kernel the processor calls, to the processed size of both models."""
    images = torch.from_numpy(_frames(*size, seed=1)).permute(0, 3, 1, 2).contiguous()
    for model in ("tiny", "qwen3_vl_4b"):
        h, w = FramePrep.of(_processor(model)).size(*size)
        kernel = torch.nn.functional.interpolate(
            images, size=[h, w], mode="bicubic", align_corners=False, antialias=True
        )
        assert torch.equal(resize_bicubic_uint8(images, h, w), kernel), (model, size)


def test_the_integer_resize_on_random_sizes():
    rng = np.random.default_rng(2)
    for _ in range(25):
        h, w, out_h, out_w = (int(v) for v in rng.integers(5, 300, 4))
        images = torch.from_numpy(rng.integers(0, 256, (1, 3, h, w), dtype=np.uint8))
        kernel = torch.nn.functional.interpolate(
            images, size=[out_h, out_w], mode="bicubic", align_corners=False, antialias=True
        )
        assert torch.equal(resize_bicubic_uint8(images, out_h, out_w), kernel), (h, w, out_h, out_w)


def test_the_float_resize_a_gpu_would_run_is_not_the_processor_s():
    """Why the resize is done in integers: interpolating in float32 and rounding once (the kernel a
    GPU runs on uint8) puts pixels of an enlarged noisy frame many levels away."""
    images = torch.from_numpy(_frames(144, 176)).permute(0, 3, 1, 2).contiguous()
    h, w = smart_size(144, 176, 32, 65536, 16777216)
    kernel = torch.nn.functional.interpolate(
        images, size=[h, w], mode="bicubic", align_corners=False, antialias=True
    )
    floats = torch.nn.functional.interpolate(
        images.float(), size=[h, w], mode="bicubic", align_corners=False, antialias=True
    )
    floats = floats.clamp(0, 255).round().to(torch.uint8)
    assert int((kernel.int() - floats.int()).abs().max()) > 10


def test_weights_sum_to_one_in_fixed_point():
    index, ints, precision = int16_weights(597, 608)
    assert index.shape == ints.shape and 10 <= precision <= 22
    assert np.all(np.abs(ints.sum(axis=1) - (1 << precision)) <= ints.shape[1])
    assert ints.max() < 1 << 15


def test_processors_whose_steps_differ_fall_back_to_the_host():
    cfg = model_preset("tiny")["image_processor"]
    assert FramePrep.of(Qwen2VLImageProcessor(**cfg)) is not None
    assert FramePrep.of(Qwen2VLImageProcessor(**cfg, resample=PILImageResampling.BILINEAR)) is None
    assert FramePrep.of(Qwen2VLImageProcessor(**cfg, do_normalize=False)) is None
