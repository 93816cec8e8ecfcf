"""The SFT loss: focal, frequency-balanced cross-entropy on the decision tokens, plain cross-entropy on
the response text.

At every step the model's first assistant token is ``</Silence>`` or ``</Response>``; silence
outnumbers speech many times over (a 20 s toy clip has 19 silent steps and one response), so a plain
loss teaches a model to stay silent. At each decision position (``decision_mask >= 0``; the logits
that predict it sit one position earlier) the loss is

    w_c * (1 - p_t) ** gamma * -log p_t

with ``p_t`` the softmax probability over the full vocabulary of the target decision token, ``gamma``
the focal exponent and ``w_c`` the weight of the target's class (0 silence, 1 response). Every other
labelled token (response text, ``<|im_end|>``) keeps ordinary cross-entropy. The total is

    (decision_weight * sum of decision terms + text_weight * sum of text terms) / n_items

where ``n_items`` is the number of labelled tokens (over the whole accumulated, all-device batch when
the trainer passes it), so with ``gamma = 0``, unit class weights and unit part weights the total is
exactly the model's own token-mean cross-entropy.

Only the labelled positions need logits (the assistant tokens, a few percent of a window's
positions): the trainer asks the model for those alone (:func:`selected_logits`: the LM head runs on
the selected hidden states, in the model's dtype) and the log-softmax runs in fp32 on them
(:func:`loss_at_labels`), instead of B x T x V fp32 logits (~4 GB for a 30-frame window of the 4B
model; ``python -m perf step_memory`` measures the difference).

Class weights (:func:`class_weights`) are frequency-balanced, ``w_c = (N / (C * n_c)) ** power``,
then normalized so that their count-weighted mean is 1 (the loss keeps the scale of plain
cross-entropy). ``static`` takes the counts from the training set's ``stats.json``; ``dynamic``
recomputes them from each batch's decisions; ``none`` gives every class weight 1.

>>> class_weights([15, 5]).tolist()
[0.6666666865348816, 2.0]
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from engine.render import RESPONSE_CLASS, SILENCE_CLASS
from infra.registry import Registry
from train.sft.config import FOCAL_GAMMA

IGNORE_INDEX = -100


def class_weights(counts: Sequence[float] | torch.Tensor, power: float = 1.0) -> torch.Tensor:
    """Frequency-balanced class weights from per-class counts (index 0 silence, 1 response).

    ``w_c`` is proportional to ``n_c ** -power`` and normalized so that ``sum_c n_c w_c / N = 1``;
    with ``power = 1`` that is ``N / (C * n_c)``. A class with no examples gets weight 0 (it cannot
    occur in the loss) and the others share the normalization.

    >>> class_weights([3, 1], power=0.0).tolist()
    [1.0, 1.0]
    """
    n = torch.as_tensor(counts, dtype=torch.float32)
    present = n > 0
    if not bool(present.any()):
        return torch.ones_like(n)
    raw = torch.where(present, n.clamp(min=1.0) ** -power, torch.zeros_like(n))
    return raw * n.sum() / (raw * n).sum()


def counts_from_stats(path: str | Path) -> tuple[int, int]:
    """(silence, response) decision counts of a built split (its ``stats.json``)."""
    stats = json.loads(Path(path).read_text())
    d = stats["decisions"]
    return int(d["silence"]), int(d["response"])


@dataclass
class LossParts:
    """Sums and counts of one batch; the trainer accumulates them between logging steps."""

    loss: torch.Tensor
    """The total to back-propagate (see the module docstring)."""
    decision_sum: torch.Tensor
    """Sum of the (weighted, focal) decision terms."""
    text_sum: torch.Tensor
    """Sum of the text cross-entropy terms."""
    n_decisions: int
    n_text: int
    decision_ce_sum: torch.Tensor
    """Unweighted decision cross-entropy (for logging; comparable across loss settings)."""
    confusion: torch.Tensor
    """2x2 counts [target class, predicted class] at the decision positions (prediction:
    P(</Response>) from the two decision logits >= 0.5, as the streaming engine decides)."""


def unit_weights(static: torch.Tensor | None, classes: torch.Tensor, power: float) -> torch.Tensor:
    """``loss.balance=none``: both classes weigh 1."""
    return torch.ones(2)


def static_weights(static: torch.Tensor | None, classes: torch.Tensor, power: float) -> torch.Tensor:
    """``loss.balance=static``: the training split's weights (its ``stats.json``)."""
    return _require_static(static)


def batch_weights(static: torch.Tensor | None, classes: torch.Tensor, power: float) -> torch.Tensor:
    """``loss.balance=dynamic``: weights from the batch's own decision counts."""
    return class_weights(torch.bincount(classes, minlength=2).float(), power)


#: How the class weights of a batch are obtained: ``fn(static weights, batch decision classes, power)``.
WEIGHT_MODES = Registry(
    "loss.balance mode",
    {
        "none": "train.sft.losses:unit_weights",
        "static": "train.sft.losses:static_weights",
        "dynamic": "train.sft.losses:batch_weights",
    },
)


def _require_static(static: torch.Tensor | None) -> torch.Tensor:
    if static is None:
        raise ValueError("loss.balance=static needs class weights from the training set's stats.json")
    return static


def label_positions(
    labels: torch.Tensor, decision_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(keep, targets, classes): ``keep`` (B, T) bool, the positions whose logits predict a labelled
    token (position t predicts token t + 1; passed to the model as ``logits_to_keep``, the LM head
    runs on these hidden states only); then, row-major over those positions, the token each predicts
    and its decision class (-1 for a text token)."""
    keep = torch.zeros_like(labels, dtype=torch.bool)
    keep[:, :-1] = labels[:, 1:] != IGNORE_INDEX
    if bool(((decision_mask[:, 1:] >= 0) & ~keep[:, :-1]).any()):
        raise ValueError("a decision position has no label: decision_mask and labels disagree")
    return keep, torch.roll(labels, -1, dims=1)[keep], torch.roll(decision_mask, -1, dims=1)[keep]


def selected_logits(
    model, inputs: dict, labels: torch.Tensor, decision_mask: torch.Tensor, select: bool = True
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(logits, targets, classes) at the labelled positions, row-major: logits (N, V) in the model's
    dtype, the target token of each, and its decision class (-1 for a text token).

    ``select=True`` computes the logits of those positions only (the model's ``logits_to_keep``
    with a boolean mask: the LM head never sees the other hidden states); ``select=False`` computes
    them at every position and picks afterwards (what the memory benchmark compares against)."""
    keep, targets, classes = label_positions(labels, decision_mask)
    logits = model(**inputs, logits_to_keep=keep if select else 0).logits
    if not select:
        logits = logits[keep]
    return logits, targets, classes


def decision_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    decision_mask: torch.Tensor,
    *,
    decision_ids: tuple[int, int],
    gamma: float = FOCAL_GAMMA,
    weights: torch.Tensor | None = None,
    decision_weight: float = 1.0,
    text_weight: float = 1.0,
    n_items: int | torch.Tensor | None = None,
) -> LossParts:
    """The SFT loss of a batch from logits at every position.

    ``logits`` (B, T, V); ``labels`` (B, T) with -100 on unlabelled tokens; ``decision_mask`` (B, T)
    with the class at each decision token and -1 elsewhere; ``decision_ids`` the token ids of
    (``</Silence>``, ``</Response>``); ``weights`` the two class weights (None: 1, 1); ``n_items``
    the divisor (None: the batch's labelled tokens, after the shift). The same numbers as
    :func:`loss_at_labels` on the labelled positions' logits (what the trainer computes).
    """
    keep, targets, classes = label_positions(labels, decision_mask)
    return loss_at_labels(
        logits[keep],
        targets,
        classes,
        decision_ids=decision_ids,
        gamma=gamma,
        weights=weights,
        decision_weight=decision_weight,
        text_weight=text_weight,
        n_items=n_items,
    )


def loss_at_labels(
    logits: torch.Tensor,
    targets: torch.Tensor,
    classes: torch.Tensor,
    *,
    decision_ids: tuple[int, int],
    gamma: float = FOCAL_GAMMA,
    weights: torch.Tensor | None = None,
    decision_weight: float = 1.0,
    text_weight: float = 1.0,
    n_items: int | torch.Tensor | None = None,
) -> LossParts:
    """The SFT loss from the logits of the labelled positions only (:func:`selected_logits`): ``logits``
    (N, V) in any dtype (the log-softmax runs in fp32), ``targets`` (N,) the labelled tokens,
    ``classes`` (N,) each one's decision class or -1; ``n_items`` None: N."""
    nll = -torch.log_softmax(logits.float(), dim=-1).gather(-1, targets[:, None])[:, 0]
    dec_sel = classes >= 0
    dec_classes = classes[dec_sel]
    dec_nll = nll[dec_sel]
    if weights is None:
        weights = torch.ones(2)
    w = weights.to(dec_nll.device, dec_nll.dtype)[dec_classes]
    focal = (1.0 - torch.exp(-dec_nll)).clamp(min=0.0) ** gamma if gamma else torch.ones_like(dec_nll)
    decision_sum = (w * focal * dec_nll).sum()
    text_sum = nll[~dec_sel].sum()
    divisor = int(targets.numel()) if n_items is None else n_items
    if torch.is_tensor(divisor):
        divisor = divisor.to(nll.device, nll.dtype)
    loss = (decision_weight * decision_sum + text_weight * text_sum) / divisor
    with torch.no_grad():
        pair = logits[dec_sel][:, list(decision_ids)].float()
        predicted = (pair[:, 1] >= pair[:, 0]).long()  # softmax(pair)[1] >= 0.5
        confusion = torch.zeros(2, 2, dtype=torch.long, device=logits.device)
        confusion.index_put_((dec_classes, predicted), torch.ones_like(dec_classes), accumulate=True)
    return LossParts(
        loss=loss,
        decision_sum=decision_sum.detach(),
        text_sum=text_sum.detach(),
        n_decisions=int(dec_sel.sum()),
        n_text=int((~dec_sel).sum()),
        decision_ce_sum=dec_nll.detach().sum(),
        confusion=confusion,
    )


def decision_metrics(confusion: torch.Tensor) -> dict[str, float]:
    """Accuracy, per-class recall and fire rate (share of decisions predicted ``</Response>``) from a
    2x2 [target, predicted] count matrix.

    >>> decision_metrics(torch.tensor([[18, 1], [0, 1]]))["recall_response"]
    1.0
    """
    c = confusion.double()
    total = float(c.sum())
    if total == 0:
        return {}
    out = {
        "decision_accuracy": float(c.trace()) / total,
        "fire_rate": float(c[:, RESPONSE_CLASS].sum()) / total,
    }
    for name, k in (("silence", SILENCE_CLASS), ("response", RESPONSE_CLASS)):
        row = float(c[k].sum())
        if row:
            out[f"recall_{name}"] = float(c[k, k]) / row
    return out
