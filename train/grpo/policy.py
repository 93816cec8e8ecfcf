"""The GRPO policy loss over streaming rollouts, with the window's frames in the loss forward.

A streaming rollout interleaves the window's frames (user turns) with the model's decisions, so the
loss forward must see those frames; trl's ``GRPOTrainer`` does not carry them (docs/grpo.md says what
was tried). The update is written here, on plain torch, as a function of the rollouts:

1. The G rollouts of a window are right-padded into one batch. The window's frames go through the
   vision encoder once (merger gradients flow), and the features are reused for every row.
2. One teacher-forced forward, through the model's own ``forward`` (so DeepSpeed sees it), gives
   the logits at the generated positions only: ``logits_to_keep`` is a boolean (G, L) mask of the
   positions that predict a generated token, so the LM head runs on those hidden states alone, in
   the model's dtype, and the log-softmax in fp32. Each token's log-prob is computed exactly as the
   engine sampled it: decision tokens from the two-way softmax over ``</Silence>`` /
   ``</Response>``, text tokens (and a generated ``<|im_end|>``) from the vocabulary less the tokens
   a response may not contain (``TurnRenderer.banned_text_ids``), both at the rollout temperature.
3. Per-token loss ``-min(r A, clip(r, 1 - epsilon, 1 + epsilon_high) A)`` with ``r = exp(new - old)``
   and ``A`` the token's advantage (``token_advantages``), plus ``beta * KL`` (k3 estimator against a
   frozen reference) when ``beta > 0``; the update's loss is ``sum_t w_t loss_t`` over the generated
   tokens of every window with signal, with the weights of ``loss_type`` (:data:`LOSS_WEIGHTS`,
   from the counts of the whole update, all ranks together, so the loss is the same however the
   windows are split over processes).

At the first update ``new == old`` to ~1e-6 (the on-policy check in the tests).
"""

from __future__ import annotations

from collections.abc import Callable
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


def token_advantages(batch: PolicyBatch, advantages: list[list[float]]) -> torch.Tensor:
    """The advantage of every generated token: ``advantages[row][step]`` of its rollout and
    decision step (under sequence credit every step of a rollout holds the rollout's)."""
    return torch.tensor(
        [advantages[r][s] for r, s in zip(batch.rows.tolist(), batch.steps.tolist(), strict=True)],
        dtype=torch.float32,
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


@dataclass(frozen=True)
class UpdateCounts:
    """What the loss of one update is normalized by: totals over the windows with signal of the
    whole update (every rank's), and the longest possible rollout."""

    rollouts: int
    groups: int
    tokens: int
    max_tokens: int


#: ``loss_type`` -> per-token weight ``fn(row_tokens, group_tokens, counts)`` (``row_tokens``: the
#: generated tokens of each token's rollout; ``group_tokens``: of its window's group). The update's
#: loss is ``sum_t weight_t * loss_t`` over every generated token of every window with signal.
LOSS_WEIGHTS: dict[str, Callable[[torch.Tensor, int, UpdateCounts], torch.Tensor]] = {
    "grpo": lambda row_tokens, group_tokens, c: 1.0 / (row_tokens.float() * c.rollouts),
    "bnpo": lambda row_tokens, group_tokens, c: torch.full_like(
        row_tokens, 1.0 / (group_tokens * c.groups), dtype=torch.float32
    ),
    "dr_grpo": lambda row_tokens, group_tokens, c: torch.full_like(
        row_tokens, 1.0 / (c.rollouts * c.max_tokens), dtype=torch.float32
    ),
    "dapo": lambda row_tokens, group_tokens, c: torch.full_like(
        row_tokens, 1.0 / c.tokens, dtype=torch.float32
    ),
}


def token_weights(batch: PolicyBatch, loss_type: str, counts: UpdateCounts) -> torch.Tensor:
    """(N,) weights of one window's generated tokens in the update's loss."""
    return LOSS_WEIGHTS[loss_type](batch.row_tokens(), int(batch.targets.numel()), counts)


def grpo_loss(
    new: torch.Tensor,
    batch: PolicyBatch,
    advantages: torch.Tensor,
    epsilon: float,
    beta: float = 0.0,
    ref: torch.Tensor | None = None,
    *,
    epsilon_high: float | None = None,
    weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped-ratio GRPO loss over one window's generated tokens (``advantages``: one per token,
    see ``token_advantages``). ``weights`` are the tokens' weights in the update (``token_weights``);
    None: this window alone under ``loss_type=grpo``. Returns (loss, parts): the parts hold means
    over this window (``loss``, ``clip_fraction``, ``ratio_mean``, ``kl``) and the sums the update
    adds up over windows and ranks (``*_sum``, ``tokens``)."""
    device = new.device
    adv = advantages.to(device)
    old = batch.old_logprobs.to(device)
    high = epsilon if epsilon_high is None else epsilon_high
    ratio = torch.exp(new - old)
    clipped = torch.clamp(ratio, 1 - epsilon, 1 + high)
    per_token = -torch.minimum(ratio * adv, clipped * adv)
    kl = torch.zeros_like(new)
    if beta > 0:
        if ref is None:
            raise ValueError("beta > 0 needs the reference model's log-probs")
        delta = ref.to(device) - new
        kl = torch.exp(delta) - delta - 1
        per_token = per_token + beta * kl
    if weights is None:
        n_rows = int(batch.rows.max()) + 1
        weights = LOSS_WEIGHTS["grpo"](
            batch.row_tokens(), new.numel(), UpdateCounts(n_rows, 1, new.numel(), 1)
        )
    loss = (weights.to(device) * per_token).sum()
    n = new.numel()
    was_clipped = float(((ratio - clipped).abs() > 1e-8).float().sum())
    parts = {
        "loss": float(loss.detach()),
        "clip_fraction": was_clipped / n,
        "ratio_mean": float(ratio.detach().mean()),
        "kl": float(kl.detach().mean()),
        "tokens": n,
        "clipped_sum": was_clipped,
        "ratio_sum": float(ratio.detach().sum()),
        "kl_sum": float(kl.detach().sum()),
    }
    return loss, parts
