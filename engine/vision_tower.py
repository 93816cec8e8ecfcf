"""The vision tower's forward, run by the project around the model's own modules and weights.

transformers' ``Qwen3VLVisionModel.forward`` recomputes, at every call, what depends only on the
frames' grids (``(t, h, w)`` in patches): the rotary cos/sin of each patch, the bilinear taps that
resample the learned position table to the grid, the per-frame attention segments. Doing so reads
the device back (``.tolist()`` of the grids and of the segment lengths in each block,
``repeat_interleave`` without an output size, the split sizes of ``get_image_features``), and with
SDPA it attends frame by frame: one kernel call per frame per block (384 for a 16-frame chunk of a
24-block tower).

:func:`vision_features` takes those grid-only tensors from a :class:`VisionPlan` instead, built once
per grid list and device (:class:`VisionPlans` caches them), so a call issues no read from the
device; and it attends over all frames with the same number of patches in one SDPA call, the frames
as the batch axis ``(frames, heads, patches, head_dim)``: attention within a frame is what the
per-frame loop computes. Frames of different sizes go in one call per size, gathered and put back
in order with index tensors of the plan. The modules called are the tower's own (``patch_embed``,
``pos_embed``, each block's norms, ``qkv``, ``proj`` and MLP, ``merger``, ``deepstack_merger_list``),
so trained or frozen weights and dtypes are used as they are.

The outputs equal ``model.model.get_image_features``'s (``pooler_output`` split per image,
``deepstack_features`` per layer split alike) within float rounding of the batched kernel
(tests/engine/test_vision_tower.py: 1e-6 in float32). The figures: ``python -m perf vision``,
docs/performance.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers.models.qwen3_vl.modeling_qwen3_vl import apply_rotary_pos_emb_vision
from transformers.vision_utils import get_vision_interpolation_indices_and_weights, get_vision_position_ids

Grid = tuple[int, int, int]
#: Plans kept by :class:`VisionPlans`; past this the oldest is dropped (a plan is a few tensors of
#: a chunk's patch count: rebuilding one costs a few milliseconds).
MAX_PLANS = 32


@dataclass
class Group:
    """Frames with the same number of patches, attended in one call: ``frames`` of ``patches`` each;
    ``index`` the rows of the packed patch sequence they take, in order (``None``: all rows as they are)."""

    frames: int
    patches: int
    index: torch.Tensor | None


@dataclass
class VisionPlan:
    """What a call's grids fix, on the call's device: the rotary ``cos``/``sin`` per patch, the
    position-table taps ``interp_indices``/``interp_weights`` per patch, the attention ``groups``
    and ``restore`` (the inverse of their gathering; ``None`` when they keep the order), and the
    merged tokens of each image (``split_sizes``, plain ints)."""

    grids: tuple[Grid, ...]
    cos: torch.Tensor
    sin: torch.Tensor
    interp_indices: torch.Tensor
    interp_weights: torch.Tensor
    groups: list[Group]
    restore: torch.Tensor | None
    split_sizes: list[int]


@dataclass
class VisionOutput:
    """Per image, its merged features (``pooler_output``, a row per placeholder token) and, per
    deepstack layer, the same for that layer (``deepstack_features``): ``get_image_features``' layout."""

    pooler_output: tuple[torch.Tensor, ...]
    deepstack_features: list[tuple[torch.Tensor, ...]]


def _groups(grids: Sequence[Grid], device: torch.device) -> tuple[list[Group], torch.Tensor | None]:
    """The attention groups of the frames of ``grids`` (each image has ``t`` frames of ``h * w``
    patches), by patch count in order of first appearance, and the permutation that restores order."""
    frames = [h * w for t, h, w in grids for _ in range(t)]
    starts = [0]
    for n in frames:
        starts.append(starts[-1] + n)
    sizes = list(dict.fromkeys(frames))
    if len(sizes) == 1:
        return [Group(len(frames), sizes[0], None)], None
    groups, order = [], []
    for size in sizes:
        rows = [r for i, n in enumerate(frames) if n == size for r in range(starts[i], starts[i + 1])]
        groups.append(Group(frames.count(size), size, torch.tensor(rows, device=device)))
        order += rows
    restore = torch.empty(len(order), dtype=torch.long)
    restore[torch.tensor(order)] = torch.arange(len(order))
    return groups, restore.to(device)


def build_plan(visual: torch.nn.Module, grids: Sequence[Grid], device: torch.device) -> VisionPlan:
    """The plan of a call on ``grids`` (plain ints), its tensors on ``device``; computed from a grid
    tensor on the host with transformers' own helpers, so its numbers are the tower's."""
    grids = tuple(tuple(int(x) for x in g) for g in grids)
    grid_thw = torch.tensor(grids, dtype=torch.long)
    merge = visual.spatial_merge_size
    indices, weights = get_vision_interpolation_indices_and_weights(
        grid_thw,
        num_grid_per_side=visual.num_grid_per_side,
        mode=visual.interpolation_mode,
        align_corners=visual.interpolation_align_corners,
        spatial_merge_size=merge,
    )
    position_ids = get_vision_position_ids(grid_thw, merge).to(device)
    probe = torch.empty(0, device=device, dtype=visual.patch_embed.proj.weight.dtype)
    cos, sin = visual.rotary_pos_emb(probe, position_ids)
    groups, restore = _groups(grids, device)
    return VisionPlan(
        grids=grids,
        cos=cos,
        sin=sin,
        interp_indices=indices.to(device),
        interp_weights=weights.to(device),
        groups=groups,
        restore=restore,
        split_sizes=[t * h * w // merge**2 for t, h, w in grids],
    )


class VisionPlans:
    """Plans by (grid list, device), built on first use (a live stream's frames keep one size, so a
    chunk's grid list repeats: the plan is built once per chunk length), the :data:`MAX_PLANS` most
    recently used."""

    def __init__(self, visual: torch.nn.Module):
        self.visual = visual
        self.plans: dict[tuple[tuple[Grid, ...], torch.device], VisionPlan] = {}

    def __call__(self, grids: Sequence[Grid], device: torch.device) -> VisionPlan:
        key = (tuple(tuple(int(x) for x in g) for g in grids), torch.device(device))
        plan = self.plans.pop(key, None) or build_plan(self.visual, key[0], key[1])
        self.plans[key] = plan  # the most recent last
        if len(self.plans) > MAX_PLANS:
            del self.plans[next(iter(self.plans))]
        return plan


def _attend(attn: torch.nn.Module, hidden: torch.Tensor, plan: VisionPlan) -> torch.Tensor:
    """A block's attention over the packed patches: each frame attends within itself, the frames of
    a group in one SDPA call (module docstring)."""
    n = hidden.shape[0]
    q, k, v = attn.qkv(hidden).reshape(n, 3, attn.num_heads, -1).permute(1, 0, 2, 3).unbind(0)
    q, k = apply_rotary_pos_emb_vision(q, k, plan.cos, plan.sin)
    outs = []
    for g in plan.groups:
        qs, ks, vs = (x if g.index is None else x.index_select(0, g.index) for x in (q, k, v))
        qs, ks, vs = (
            x.reshape(g.frames, g.patches, attn.num_heads, -1).transpose(1, 2) for x in (qs, ks, vs)
        )
        out = F.scaled_dot_product_attention(qs, ks, vs, scale=attn.scaling)
        outs.append(out.transpose(1, 2).reshape(g.frames * g.patches, -1))
    out = outs[0] if len(outs) == 1 else torch.cat(outs)
    if plan.restore is not None:
        out = out.index_select(0, plan.restore)
    return attn.proj(out)


def vision_features(visual: torch.nn.Module, pixel_values: torch.Tensor, plan: VisionPlan) -> VisionOutput:
    """The tower on ``pixel_values`` (the processor's rows, the images of ``plan.grids`` one after
    another): per image its merged features and each deepstack layer's, as ``get_image_features``
    returns them, with no read from the device."""
    hidden = visual.patch_embed(pixel_values.type(visual.dtype))
    pos = (visual.pos_embed(plan.interp_indices) * plan.interp_weights[:, :, None]).sum(1)
    hidden = hidden + pos.to(hidden.dtype)
    deepstack = []
    for i, block in enumerate(visual.blocks):
        hidden = hidden + _attend(block.attn, block.norm1(hidden), plan)
        hidden = hidden + block.mlp(block.norm2(hidden))
        if i in visual.deepstack_visual_indexes:
            merger = visual.deepstack_merger_list[visual.deepstack_visual_indexes.index(i)]
            deepstack.append(torch.split(merger(hidden), plan.split_sizes))
    return VisionOutput(torch.split(visual.merger(hidden), plan.split_sizes), deepstack)
