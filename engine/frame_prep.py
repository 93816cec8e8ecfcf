"""Frames prepared on the model's device: uint8 frames in, the image processor's ``pixel_values`` and
``image_grid_thw`` out, bit for bit.

The project's image processor (``Qwen2VLImageProcessor`` of transformers, torchvision backend, the
one Qwen3-VL uses for images) runs on the host: per frame it resizes to its "smart" size (both sides
multiples of ``patch_size * merge_size``, the pixel count within ``size``'s bounds), rescales and
normalises in float32, and cuts the frame into patches. Uploading its output moves 4 bytes a value,
each patch repeated ``temporal_patch_size`` times: 8x the frame's uint8 bytes for a still image.
:class:`FramePrep` does the same steps in torch on whatever device the frames are on, so the frames
go up as uint8 and the float work runs there:

- **Resize.** On the host the processor's bicubic resize of a uint8 tensor (antialiased) is
  PyTorch's native uint8 kernel: two separable passes (columns, then rows), int16 fixed-point
  weights, each pass rounded and clamped to uint8. The float kernel that a GPU runs instead
  (interpolate in float32, clamp, round once) gives other pixels: up to 25 levels apart on noise
  where a frame is enlarged (the overshoot of the first pass is clamped in one, not in the other).
  :func:`resize_bicubic_uint8` therefore computes the uint8 kernel's integer weights on the host
  (a few KB per size, memoized) and runs its two integer passes on the device.
- **Rescale and normalise.** The processor folds ``rescale_factor`` into the mean and std
  (``mean / rescale_factor``, in float32) and subtracts, then divides: done the same way here.
- **Patchify.** Each frame becomes ``(grid_h * grid_w, 3 * temporal_patch_size * patch_size**2)``
  rows, in the processor's order: blocks of ``merge_size x merge_size`` patches row-major over the
  frame, patches row-major within a block, each row channel-major, the patch repeated over the
  temporal axis.

``tests/engine/test_frame_prep.py`` checks equality with the processor for the tiny model's and
Qwen3-VL-4B's processor settings on several frame sizes; ``python -m perf engine`` reports the
largest difference (``frame_prep_max_diff``) and both paths' time per frame.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import torch

#: Keys' bicubic coefficient, as in PyTorch's antialiased bicubic (and PIL's).
CUBIC_A = -0.5


def smart_size(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """The processor's target size: both sides multiples of ``factor``, ``height * width`` within
    ``[min_pixels, max_pixels]``, the aspect kept as closely as that allows.

    >>> smart_size(336, 597, 32, 65536, 16777216)
    (320, 608)
    """
    if max(height, width) / min(height, width) > 200:
        raise ValueError(
            f"a frame of {width}x{height}: the image processor takes an aspect ratio of at most 200"
        )
    h, w = round(height / factor) * factor, round(width / factor) * factor
    if h * w > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h = max(factor, math.floor(height / beta / factor) * factor)
        w = max(factor, math.floor(width / beta / factor) * factor)
    elif h * w < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h, w = math.ceil(height * beta / factor) * factor, math.ceil(width * beta / factor) * factor
    return h, w


def _cubic(x: float) -> float:
    x = abs(x)
    if x < 1.0:
        return ((CUBIC_A + 2) * x - (CUBIC_A + 3)) * x * x + 1
    if x < 2.0:
        return ((CUBIC_A * x - 5 * CUBIC_A) * x + 8 * CUBIC_A) * x - 4 * CUBIC_A
    return 0.0


@functools.cache
def int16_weights(size_in: int, size_out: int) -> tuple[np.ndarray, np.ndarray, int]:
    """One axis of the uint8 bicubic resize: per output pixel the first input pixel of its window
    (``(out, taps)`` indices, clamped in range) and its int16 weights, and the weights' precision
    (bits after the point). The float weights are the antialiased bicubic filter's, normalised to
    sum 1 per output; scaled by ``2**precision`` (the most bits that keep the largest weight below
    2**15) and rounded half away from zero, as PyTorch's uint8 kernel does."""
    scale = size_in / size_out
    support = 2.0 * scale if scale >= 1.0 else 2.0
    inv = 1.0 / scale if scale >= 1.0 else 1.0
    taps = int(math.ceil(support)) * 2 + 1
    index = np.zeros((size_out, taps), dtype=np.int64)
    weight = np.zeros((size_out, taps), dtype=np.float64)
    for i in range(size_out):
        center = scale * (i + 0.5)
        lo = max(int(center - support + 0.5), 0)
        n = min(max(min(int(center + support + 0.5), size_in) - lo, 0), taps)
        w = [_cubic((j + lo - center + 0.5) * inv) for j in range(n)]
        total = sum(w)
        weight[i, :n] = [v / total for v in w] if total != 0.0 else w
        index[i] = np.minimum(lo + np.arange(taps), size_in - 1)
    precision = 0
    while precision < 22 and int(0.5 + weight.max() * (1 << (precision + 1))) < (1 << 15):
        precision += 1
    scaled = weight * (1 << precision)
    ints = np.where(scaled < 0, (-0.5 + scaled).astype(np.int64), (0.5 + scaled).astype(np.int64))
    return index, ints, precision


@functools.cache
def _device_weights(
    size_in: int, size_out: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """:func:`int16_weights` on ``device``, uploaded once per size (a copy from pageable memory
    makes the host wait for the device's queue)."""
    index, ints, precision = int16_weights(size_in, size_out)
    return torch.from_numpy(index).to(device), torch.from_numpy(ints).to(device, torch.int32), precision


@functools.cache
def _device_values(values: tuple[float, ...], device: torch.device) -> torch.Tensor:
    """Per-channel float32 values as a ``(C, 1, 1)`` tensor on ``device``, uploaded once."""
    return torch.tensor(values, dtype=torch.float32).view(-1, 1, 1).to(device)


def _resample_last_axis(x: torch.Tensor, size_out: int) -> torch.Tensor:
    """One pass of the uint8 kernel along ``x``'s last axis: ``sum(w * pixel) + 2**(p-1)``,
    shifted right by ``p``, clamped to uint8."""
    index_t, ints_t, precision = _device_weights(x.shape[-1], size_out, x.device)
    acc = torch.full((*x.shape[:-1], size_out), 1 << (precision - 1), dtype=torch.int32, device=x.device)
    for k in range(index_t.shape[1]):
        acc += x.index_select(-1, index_t[:, k]).to(torch.int32) * ints_t[:, k]
    return (acc >> precision).clamp_(0, 255).to(torch.uint8)


def resize_bicubic_uint8(images: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """``(N, C, H, W)`` uint8 images resized to ``height x width`` with antialiased bicubic
    interpolation, bit-equal to PyTorch's native uint8 CPU kernel (the one the host processor runs),
    on the images' device: columns first, then rows, each pass rounded to uint8."""
    out = images
    if out.shape[-1] != width:
        out = _resample_last_axis(out, width)
    if out.shape[-2] != height:
        out = _resample_last_axis(out.transpose(-1, -2), height).transpose(-1, -2).contiguous()
    return out


def _resize(images: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """On the CPU the uint8 kernel itself (what the processor calls); elsewhere
    :func:`resize_bicubic_uint8`, its integer passes."""
    if images.device.type == "cpu":
        return torch.nn.functional.interpolate(
            images, size=[height, width], mode="bicubic", align_corners=False, antialias=True
        )
    return resize_bicubic_uint8(images, height, width)


@dataclass(frozen=True)
class FramePrep:
    """The image processor's settings that its output depends on, and the same steps in torch."""

    patch_size: int
    temporal_patch_size: int
    merge_size: int
    min_pixels: int
    max_pixels: int
    mean: tuple[float, ...]  # already divided by the rescale factor, in float32, as the processor does
    std: tuple[float, ...]

    @classmethod
    def of(cls, image_processor) -> FramePrep | None:
        """The prep of ``image_processor``, or ``None`` when its steps are not the ones done here
        (another class or backend, another interpolation, a step switched off)."""
        from transformers import Qwen2VLImageProcessor
        from transformers.image_utils import PILImageResampling

        ip = image_processor
        same = (
            type(ip) is Qwen2VLImageProcessor
            and getattr(ip, "backend", None) == "torchvision"
            and ip.resample == PILImageResampling.BICUBIC
            and ip.do_resize
            and ip.do_rescale
            and ip.do_normalize
            and ip.size.get("shortest_edge")
            and ip.size.get("longest_edge")
        )
        if not same:
            return None
        mean = torch.tensor(ip.image_mean) * (1.0 / ip.rescale_factor)
        std = torch.tensor(ip.image_std) * (1.0 / ip.rescale_factor)
        return cls(
            ip.patch_size,
            ip.temporal_patch_size,
            ip.merge_size,
            int(ip.size["shortest_edge"]),
            int(ip.size["longest_edge"]),
            tuple(mean.tolist()),
            tuple(std.tolist()),
        )

    def size(self, height: int, width: int) -> tuple[int, int]:
        """The processed size of a ``height x width`` frame."""
        return smart_size(height, width, self.patch_size * self.merge_size, self.min_pixels, self.max_pixels)

    def grid(self, height: int, width: int) -> tuple[int, int, int]:
        """``(t, h, w)`` in patches of a ``height x width`` frame."""
        h, w = self.size(height, width)
        return 1, h // self.patch_size, w // self.patch_size

    def __call__(self, frames: torch.Tensor) -> tuple[torch.Tensor, list[tuple[int, int, int]]]:
        """``(N, H, W, 3)`` uint8 frames (any device) -> ``pixel_values`` on that device and each
        frame's grid, as the processor gives them for the N frames as N images."""
        n, height, width, channels = frames.shape
        h, w = self.size(height, width)
        x = frames.permute(0, 3, 1, 2).contiguous()
        if (h, w) != (height, width):
            x = _resize(x, h, w)
        x = x.to(torch.float32).sub_(_device_values(self.mean, x.device))
        x = x.div_(_device_values(self.std, x.device))
        return self.patchify(x), [self.grid(height, width)] * n

    def patchify(self, x: torch.Tensor) -> torch.Tensor:
        """``(N, C, H, W)`` float frames -> ``(N * grid_h * grid_w, C * T * P * P)`` rows in the
        processor's order (the module docstring), each patch repeated over the T temporal slots."""
        n, c, height, width = x.shape
        p, m, t = self.patch_size, self.merge_size, self.temporal_patch_size
        gh, gw = height // p, width // p
        blocks = x.reshape(n, c, gh // m, m, p, gw // m, m, p).permute(0, 2, 5, 3, 6, 1, 4, 7)
        repeated = blocks.unsqueeze(6).expand(-1, -1, -1, -1, -1, -1, t, -1, -1)
        return repeated.reshape(n * gh * gw, c * t * p * p)
