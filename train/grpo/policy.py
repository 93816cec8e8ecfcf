"""The GRPO policy forward over streaming rollouts, with the window's frames in the forward.

A streaming rollout interleaves the window's frames (user turns) with the model's decisions, so the
loss forward must see those frames; trl's ``GRPOTrainer`` does not carry them (docs/grpo.md says what
was tried). This module holds what touches the model (Qwen3-VL's internals); the maths of the update
(advantages, objectives, the clipped-ratio loss) is ``train.grpo.algorithm``'s:

1. The G rollouts of a window are right-padded into one batch (:func:`policy_batch`). The window's
   frames go through the vision encoder once (merger gradients flow), and the features are reused
   for every row.
2. One teacher-forced forward, through the model's own ``forward`` (so DeepSpeed sees it), gives
   the logits at the generated positions only: ``logits_to_keep`` is a boolean (G, L) mask of the
   positions that predict a generated token, so the LM head runs on those hidden states alone, in
   the model's dtype, and the log-softmax in fp32. Each token's log-prob is computed exactly as the
   engine sampled it: decision tokens from the two-way softmax over ``</Silence>`` /
   ``</Response>``, text tokens (and a generated ``<|im_end|>``) from the vocabulary less the tokens
   a response may not contain (``TurnRenderer.banned_text_ids``), both at the rollout temperature.

At the first update ``new == old`` to ~1e-6 (the on-policy check in the tests).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers.models.qwen3_vl.modeling_qwen3_vl import BaseModelOutputWithDeepstackFeatures

from engine.render import TurnRenderer
from train.grpo.rollout import Rollout


@dataclass
class PolicyBatch:
    """Token positions whose log-probs the update needs, for one window's group."""

    input_ids: torch.Tensor  # (G, L)
    attention_mask: torch.Tensor
    targets: torch.Tensor  # (N,) generated token ids
    rows: torch.Tensor  # (N,) which rollout
    positions: torch.Tensor  # (N,) index of the logits that predict the token (token index - 1)
    is_decision: torch.Tensor  # (N,) bool
    old_logprobs: torch.Tensor  # (N,)
    steps: torch.Tensor  # (N,) the decision step the token belongs to (its decision or its reply)

    def keep_mask(self) -> torch.Tensor:
        """(G, L) bool: the positions whose logits the loss reads. Selected row-major, so the
        selected rows come out in the order of ``targets`` (rows ascending, positions ascending)."""
        mask = torch.zeros_like(self.input_ids, dtype=torch.bool)
        mask[self.rows, self.positions] = True
        return mask

    def shared_prefix(self) -> int:
        """How many leading tokens every row has in common (the rows diverge at their first
        differing sampled token)."""
        ids = self.input_ids.masked_fill(self.attention_mask == 0, -1)
        differs = (ids != ids[:1]).any(0).nonzero()
        return int(differs[0]) if len(differs) else int(ids.shape[1])

    def row_tokens(self) -> torch.Tensor:
        """(N,) how many generated tokens the token's rollout has."""
        counts = torch.bincount(self.rows, minlength=self.input_ids.shape[0])
        return counts[self.rows]


def policy_batch(rollouts: list[Rollout], renderer: TurnRenderer) -> PolicyBatch:
    width = max(len(r.result.tokens) for r in rollouts)
    ids = torch.full((len(rollouts), width), renderer.tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    targets, rows, positions, decision, old, steps = [], [], [], [], [], []
    n_open = len(renderer.assistant_open)
    for b, r in enumerate(rollouts):
        toks = r.result.tokens
        ids[b, : len(toks)] = torch.tensor(toks)
        mask[b, : len(toks)] = 1
        logprobs = iter(r.result.logprobs)
        step = -1
        for i, (tok, gen) in enumerate(zip(toks, r.result.generated, strict=True)):
            if not gen:
                continue
            is_decision = toks[i - n_open : i] == renderer.assistant_open
            step += is_decision
            targets.append(tok)
            rows.append(b)
            positions.append(i - 1)
            decision.append(is_decision)
            old.append(next(logprobs))
            steps.append(step)
        if step + 1 != len(r.result.steps):
            raise ValueError(f"rollout {b}: {step + 1} decision tokens for {len(r.result.steps)} steps")
    return PolicyBatch(
        ids,
        mask,
        torch.tensor(targets),
        torch.tensor(rows),
        torch.tensor(positions),
        torch.tensor(decision),
        torch.tensor(old, dtype=torch.float32),
        torch.tensor(steps),
    )


def unwrap(model):
    """The model under a DeepSpeed engine (``.module``), or the model itself."""
    return getattr(model, "module", model)


def window_features(model, renderer: TurnRenderer, rollouts: list[Rollout], device) -> tuple:
    """Encode the (shared) window frames once; replicate the features for every rollout row."""
    inner = unwrap(model)
    pixel_values, grid = renderer.encode_frames(rollouts[0].window.frames)
    dtype = next(inner.model.visual.parameters()).dtype
    feats = inner.model.get_image_features(pixel_values.to(device, dtype), grid.to(device))
    g = len(rollouts)
    shared = BaseModelOutputWithDeepstackFeatures(
        pooler_output=tuple(feats.pooler_output) * g,
        deepstack_features=[tuple(layer) * g for layer in feats.deepstack_features],
    )
    return shared, grid.repeat(g, 1)


def token_logprobs(
    model,
    renderer: TurnRenderer,
    rollouts: list[Rollout],
    batch: PolicyBatch,
    temperature: float,
    frames: bool = True,
    select: bool = True,
) -> torch.Tensor:
    """Current-policy log-probs of the generated tokens (same parametrisation as the sampler).

    ``model`` is the model or the DeepSpeed engine around it (its ``forward`` runs the language
    model). ``select=False`` computes the logits of every position and takes the generated ones
    afterwards (the memory benchmark's baseline); ``frames=False`` leaves the frames out, as a loss
    forward without video tensors would (tests)."""
    device = next(unwrap(model).parameters()).device
    feats, grid = window_features(model, renderer, rollouts, device)
    ids = batch.input_ids.to(device)
    vision = {"mm_encoder_outputs": {"image": feats}} if frames else {}
    keep = batch.keep_mask().to(device) if select else 0
    out = model(
        input_ids=ids,
        attention_mask=batch.attention_mask.to(device),
        mm_token_type_ids=(ids == renderer.image_pad_id).int(),
        image_grid_thw=grid.to(device),
        logits_to_keep=keep,
        **vision,
    )
    if select:
        logits = out.logits.float() / temperature  # (N, V): selected row-major, in the order of targets
    else:
        logits = out.logits.float()[batch.rows.to(device), batch.positions.to(device)] / temperature
    targets = batch.targets.to(device)
    full = torch.log_softmax(renderer.mask_text_logits(logits), dim=-1).gather(1, targets[:, None])[:, 0]
    pair = torch.stack([logits[:, renderer.silence_id], logits[:, renderer.response_id]], dim=-1)
    chosen = (targets == renderer.response_id).long()
    two_way = torch.log_softmax(pair, dim=-1).gather(1, chosen[:, None])[:, 0]
    return torch.where(batch.is_decision.to(device), two_way, full)
