"""GRPO's algorithm: advantage estimators, reward scales and objectives, as registered pure functions.

Everything a new GRPO variant changes lives here; the rest of ``train.grpo`` reads the registries:

- :data:`ADVANTAGES` (``grpo.credit``): ``fn(rewards, gamma, std) -> advantages`` over one window's
  group. ``rewards`` holds one row per rollout: its per-step rewards (``train.grpo.rewards.step_rewards``,
  summing to the rollout's reward) when the estimator is marked ``per_step=True``
  (:func:`advantage_estimator`), else its one reward as a one-element row. It returns a row of the
  same length per rollout (a one-element row holds for every decision step of its rollout).
  ``std`` is the reward scale's spread (None: the group's own).
- :data:`SCALES` (``grpo.scale_rewards``): ``fn(count, total, squares) -> std | None`` from the
  :func:`moments` of every rank's step returns of the update (``group``: None, ``batch``: their
  std, ``none``: ``1 - eps``, so the centred values stay as they are).
- :data:`OBJECTIVES` (``grpo.loss_type``): ``fn(row_tokens, group_tokens, counts) -> weights``, the
  weight of each generated token in the update's loss ``sum_t w_t loss_t`` (``row_tokens``: the
  generated tokens of each token's rollout; ``group_tokens``: of its window's group; ``counts``:
  :class:`UpdateCounts`, the totals of the whole update, all ranks together, so the loss is the same
  however the windows are split over processes).
- :func:`grpo_loss`: the per-token loss ``-min(r A, clip(r, 1 - epsilon, 1 + epsilon_high) A)``
  with ``r = exp(new - old)`` and ``A`` the token's advantage (:func:`token_advantages`), plus
  ``beta * KL`` (k3 estimator against a frozen reference) when ``beta > 0``, weighted by the objective.

A new estimator, scale or objective is a function here and one line in its registry's table (or
``REGISTRY.add(name, "module:attr")`` from elsewhere, as the tests do); ``train.grpo.config``
accepts exactly the registered names. The module imports no torch: it works on the tensors it is
given (``train.grpo.policy`` computes the log-probs), so the config check stays light.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from infra.registry import Registry

if TYPE_CHECKING:
    import torch

    from train.grpo.policy import PolicyBatch

#: ``grpo.credit`` -> advantage estimator.
ADVANTAGES = Registry(
    "grpo.credit",
    {
        "sequence": "train.grpo.algorithm:sequence_advantages",
        "decision": "train.grpo.algorithm:decision_advantages",
    },
)
#: ``grpo.scale_rewards`` -> the spread advantages are divided by.
SCALES = Registry(
    "grpo.scale_rewards",
    {
        "group": "train.grpo.algorithm:group_scale",
        "batch": "train.grpo.algorithm:batch_std",
        "none": "train.grpo.algorithm:no_scale",
    },
)
#: ``grpo.loss_type`` -> per-token weights of the update's loss.
OBJECTIVES = Registry(
    "grpo.loss_type",
    {
        "grpo": "train.grpo.algorithm:grpo_weights",
        "bnpo": "train.grpo.algorithm:bnpo_weights",
        "dr_grpo": "train.grpo.algorithm:dr_grpo_weights",
        "dapo": "train.grpo.algorithm:dapo_weights",
    },
)
EPS = 1e-4


def advantage_estimator(*, per_step: bool) -> Callable:
    """Mark an estimator as taking per-step rewards (``per_step=True``) or one reward per rollout."""

    def mark(fn: Callable) -> Callable:
        fn.per_step = per_step
        return fn

    return mark


# -- advantage estimators ----------------------------------------------------------------------


def step_returns(step_rewards: list[list[float]], gamma: float) -> list[list[float]]:
    """Each step's discounted return ``G_j = sum_{i>=j} gamma^(i-j) r_i``, per rollout.

    >>> step_returns([[1.0, 0.0, 2.0]], 0.5)
    [[1.5, 1.0, 2.0]]
    """
    out = []
    for rewards in step_rewards:
        acc, row = 0.0, []
        for r in reversed(rewards):
            acc = r + gamma * acc
            row.append(acc)
        out.append(row[::-1])
    return out


@advantage_estimator(per_step=True)
def decision_advantages(
    step_rewards: list[list[float]], gamma: float, std: float | None = None, eps: float = EPS
) -> list[list[float]]:
    """Per-decision advantages of a group from its per-step rewards (``train.grpo.rewards.step_rewards``).

    The G rollouts of a window see the same frames at the same steps, so a decision is compared with
    the group's decisions at the same step: return ``G_j = sum_{i>=j} gamma^(i-j) r_i``, minus the
    group's mean return at step j, divided by the std of those differences over the steps where
    the rollouts differ (steps where all agree would only shrink the std and inflate the rest). A
    reply that repeats an earlier one is charged at its own step, and the first on-time reply is
    credited at its own, which a single advantage per rollout cannot tell apart. With ``gamma=0``
    and rollouts that differ at one step only, that step gets GRPO's per-rollout advantages and
    every other step 0. All zeros when every rollout's return is the same at every step.

    ``std`` replaces the group's own spread (``grpo.scale_rewards``: ``batch`` passes the update's,
    ``none`` passes 1 - eps so the differences stay as they are).

    >>> [[round(a, 3) for a in row] for row in decision_advantages([[0.0, 1.0, -0.7], [0.0, 1.0, 0.0]], 0.0)]
    [[0.0, 0.0, -1.0], [0.0, 0.0, 1.0]]
    """
    lengths = {len(r) for r in step_rewards}
    if len(lengths) != 1:
        raise ValueError(f"rollouts of one window must have the same number of steps, got {sorted(lengths)}")
    returns = step_returns(step_rewards, gamma)
    g = len(returns)
    base = [sum(col) / g for col in zip(*returns, strict=True)]
    diff = [[x - b for x, b in zip(row, base, strict=True)] for row in returns]
    live = [col for col in zip(*diff, strict=True) if any(abs(x) > 1e-12 for x in col)]
    if not live:
        return [[0.0] * len(row) for row in diff]
    if std is None:
        std = (sum(x * x for col in live for x in col) / (g * len(live))) ** 0.5
    return [[x / (std + eps) for x in row] for row in diff]


@advantage_estimator(per_step=False)
def sequence_advantages(
    rewards: list[list[float]], gamma: float, std: float | None = None
) -> list[list[float]]:
    """GRPO as published: ``(r - mean) / (std + eps)`` of each rollout's one reward within the group,
    one advantage for every token of the rollout (``gamma`` plays no part)."""
    return decision_advantages(rewards, 0.0, std)


def group_advantages(rewards: list[float], eps: float = EPS, std: float | None = None) -> list[float]:
    """(r - mean) / (std + eps) within a group; all zeros when the rewards are all equal. The
    one-step case of :func:`decision_advantages` (``std`` as there).

    >>> [round(a, 3) for a in group_advantages([1.0, 0.0, 0.0, 1.0])]
    [1.0, -1.0, -1.0, 1.0]
    >>> [round(a, 3) for a in group_advantages([1.0, 0.0], std=1.0)]
    [0.5, -0.5]
    """
    return [row[0] for row in decision_advantages([[r] for r in rewards], 0.0, std, eps)]


def step_advantages(
    credit: str, rewards: list[list[float]], gamma: float, std, steps: list[int]
) -> list[list[float]]:
    """The ``credit`` estimator's advantages of one group, one per decision step of each rollout
    (``steps``: each rollout's step count; a one-element row holds for all its steps)."""
    rows = ADVANTAGES.get(credit)(rewards, gamma, std)
    return [row * n if len(row) == 1 else row for row, n in zip(rows, steps, strict=True)]


# -- reward scales -----------------------------------------------------------------------------


def moments(values: list[float]) -> tuple[float, float, float]:
    """(count, sum, sum of squares): what ranks add up for an update-wide std (``batch_std``)."""
    return float(len(values)), float(sum(values)), float(sum(v * v for v in values))


def batch_std(count: float, total: float, squares: float) -> float:
    """Population std from summed :func:`moments` (``scale_rewards=batch``: over the whole update).

    >>> batch_std(*moments([1.0, 0.0, 0.0, 1.0]))
    0.5
    """
    if count == 0:
        return 0.0
    mean = total / count
    return max(squares / count - mean * mean, 0.0) ** 0.5


def group_scale(count: float, total: float, squares: float) -> None:
    """``scale_rewards=group``: each group's own spread (the estimator's)."""
    return None


def no_scale(count: float, total: float, squares: float) -> float:
    """``scale_rewards=none`` (Dr. GRPO): divided by ``std + eps``, the centred values as they are."""
    return 1.0 - EPS


# -- objectives --------------------------------------------------------------------------------


@dataclass(frozen=True)
class UpdateCounts:
    """What the loss of one update is normalized by: totals over the windows with signal of the
    whole update (every rank's), and the longest possible rollout."""

    rollouts: int
    groups: int
    tokens: int
    max_tokens: int


def grpo_weights(row_tokens: torch.Tensor, group_tokens: int, c: UpdateCounts) -> torch.Tensor:
    """Each rollout's token mean, averaged over the update's rollouts."""
    return 1.0 / (row_tokens.float() * c.rollouts)


def bnpo_weights(row_tokens: torch.Tensor, group_tokens: int, c: UpdateCounts) -> torch.Tensor:
    """Each window group's token mean, averaged over the update's groups."""
    return row_tokens.float().new_full(row_tokens.shape, 1.0 / (group_tokens * c.groups))


def dr_grpo_weights(row_tokens: torch.Tensor, group_tokens: int, c: UpdateCounts) -> torch.Tensor:
    """The token sum over rollouts x the longest possible rollout: a constant divisor."""
    return row_tokens.float().new_full(row_tokens.shape, 1.0 / (c.rollouts * c.max_tokens))


def dapo_weights(row_tokens: torch.Tensor, group_tokens: int, c: UpdateCounts) -> torch.Tensor:
    """The token sum over every generated token of the update."""
    return row_tokens.float().new_full(row_tokens.shape, 1.0 / c.tokens)


def token_weights(batch: PolicyBatch, loss_type: str, counts: UpdateCounts) -> torch.Tensor:
    """(N,) weights of one window's generated tokens in the update's loss."""
    return OBJECTIVES.get(loss_type)(batch.row_tokens(), int(batch.targets.numel()), counts)


def token_advantages(batch: PolicyBatch, advantages: list[list[float]]) -> torch.Tensor:
    """The advantage of every generated token: ``advantages[row][step]`` of its rollout and
    decision step (under sequence credit every step of a rollout holds the rollout's)."""
    values = [advantages[r][s] for r, s in zip(batch.rows.tolist(), batch.steps.tolist(), strict=True)]
    return batch.old_logprobs.new_tensor(values)


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
    ratio = (new - old).exp()
    clipped = ratio.clamp(1 - epsilon, 1 + high)
    per_token = -(ratio * adv).minimum(clipped * adv)
    kl = new.new_zeros(new.shape)
    if beta > 0:
        if ref is None:
            raise ValueError("beta > 0 needs the reference model's log-probs")
        delta = ref.to(device) - new
        kl = delta.exp() - delta - 1
        per_token = per_token + beta * kl
    if weights is None:
        n_rows = int(batch.rows.max()) + 1
        weights = grpo_weights(batch.row_tokens(), new.numel(), UpdateCounts(n_rows, 1, new.numel(), 1))
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
