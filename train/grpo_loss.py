"""The GRPO policy loss over streaming rollouts, with the window's frames in the loss forward.

trl 1.16's ``GRPOTrainer`` cannot carry these rollouts: its loss forward receives no image or video
tensors, and its experimental ``rollout_func`` gets no images either, while a streaming rollout's
frames are interleaved with the model's decisions (docs/design.md). So the update is written here, on
plain torch, as a function of the rollouts:

1. The G rollouts of a window are right-padded into one batch. The window's frames go through the
   vision encoder once (merger gradients flow), and the features are reused for every row.
2. One teacher-forced forward gives, for every token the model generated, its log-prob under the
   current policy, computed exactly as the engine sampled it: decision tokens from the two-way
   softmax over ``</Silence>`` / ``</Response>``, text tokens (and a generated ``<|im_end|>``) from
   the vocabulary less the tokens a response may not contain (``TurnRenderer.banned_text_ids``),
   both at the rollout temperature.
3. Loss per token ``-min(r A, clip(r, 1 - eps, 1 + eps) A)`` with ``r = exp(new - old)`` and ``A``
   the token's advantage (that of its rollout's decision step: ``token_advantages``), plus
   ``beta * KL`` (k3 estimator against a frozen reference) when ``beta > 0``; averaged over each
   rollout's generated tokens, then over rollouts.

At the first update ``new == old`` to ~1e-6 (the on-policy check in the tests).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers.models.qwen3_vl.modeling_qwen3_vl import BaseModelOutputWithDeepstackFeatures

from eval.render import TurnRenderer
from train.rollout import Rollout


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


def token_advantages(batch: PolicyBatch, advantages: list[list[float]]) -> torch.Tensor:
    """The advantage of every generated token: ``advantages[row][step]`` of its rollout and
    decision step (under sequence credit every step of a rollout holds the rollout's)."""
    return torch.tensor(
        [advantages[r][s] for r, s in zip(batch.rows.tolist(), batch.steps.tolist(), strict=True)],
        dtype=torch.float32,
    )


def window_features(model, renderer: TurnRenderer, rollouts: list[Rollout], device) -> tuple:
    """Encode the (shared) window frames once; replicate the features for every rollout row."""
    pixel_values, grid = renderer.encode_frames(rollouts[0].window.frames)
    feats = model.model.get_image_features(pixel_values.to(device), grid.to(device))
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
) -> torch.Tensor:
    """Current-policy log-probs of the generated tokens (same parametrisation as the sampler).
    ``frames=False`` leaves the frames out, as a loss forward without video tensors would (tests)."""
    device = next(model.parameters()).device
    feats, grid = window_features(model, renderer, rollouts, device)
    ids = batch.input_ids.to(device)
    vision = {"mm_encoder_outputs": {"image": feats}} if frames else {}
    out = model.model(
        input_ids=ids,
        attention_mask=batch.attention_mask.to(device),
        mm_token_type_ids=(ids == renderer.image_pad_id).int(),
        image_grid_thw=grid.to(device),
        **vision,
    )
    hidden = out.last_hidden_state[batch.rows.to(device), batch.positions.to(device)]
    logits = model.lm_head(hidden).float() / temperature
    targets = batch.targets.to(device)
    full = torch.log_softmax(renderer.mask_text_logits(logits), dim=-1).gather(1, targets[:, None])[:, 0]
    pair = torch.stack([logits[:, renderer.silence_id], logits[:, renderer.response_id]], dim=-1)
    chosen = (targets == renderer.response_id).long()
    two_way = torch.log_softmax(pair, dim=-1).gather(1, chosen[:, None])[:, 0]
    return torch.where(batch.is_decision.to(device), two_way, full)


def grpo_loss(
    new: torch.Tensor,
    batch: PolicyBatch,
    advantages: torch.Tensor,
    clip_eps: float,
    beta: float = 0.0,
    ref: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped-ratio GRPO loss over generated tokens (``advantages``: one per token, see
    ``token_advantages``); returns (loss, parts for logging)."""
    device = new.device
    adv = advantages.to(device)
    old = batch.old_logprobs.to(device)
    ratio = torch.exp(new - old)
    clipped = torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps)
    per_token = -torch.minimum(ratio * adv, clipped * adv)
    kl = torch.zeros_like(new)
    if beta > 0:
        if ref is None:
            raise ValueError("beta > 0 needs the reference model's log-probs")
        delta = ref.to(device) - new
        kl = torch.exp(delta) - delta - 1
        per_token = per_token + beta * kl
    rows = batch.rows.to(device)
    n_rows = int(rows.max()) + 1
    counts = torch.zeros(n_rows, device=device).index_add_(0, rows, torch.ones_like(new))
    per_row = torch.zeros(n_rows, device=device).index_add_(0, rows, per_token) / counts.clamp(min=1)
    loss = per_row.mean()
    parts = {
        "loss": float(loss.detach()),
        "clip_fraction": float(((ratio - clipped).abs() > 1e-8).float().mean()),
        "ratio_mean": float(ratio.detach().mean()),
        "kl": float(kl.detach().mean()),
        "generated_tokens": int(new.numel()),
    }
    return loss, parts
