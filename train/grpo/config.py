"""Typed schema of ``conf/grpo.yaml`` (``python -m train.grpo``): every key, its unit and why."""

from __future__ import annotations

from dataclasses import dataclass, field, make_dataclass
from typing import Any

from engine.config import DataRootConfig
from engine.step_choice import STEPS as ENGINE_STEPS
from infra.schema import bounded, store_schema
from train.grpo.algorithm import ADVANTAGES, OBJECTIVES, SCALES
from train.grpo.rewards import REWARDS
from train.stage_config import StageConfig

#: What a stop on non-finite losses says (``n`` updates in a row, the last at update ``step``).
NONFINITE_MESSAGE = (
    "{n} updates in a row had a non-finite loss (last at update {step}); stopping. Lower the learning "
    "rate or check the data."
)


@dataclass
class GRPOStageConfig(StageConfig):
    """Rollouts and updates (the ``grpo`` block)."""

    output_dir: str = "runs/grpo"
    """Run directory: ``checkpoint-<step>`` dirs, ``final``, config, ``run_info.json``, ``history.jsonl``."""
    eval_split: str | None = "val"
    """Held-out split evaluated every ``eval_every`` updates (None: no evaluation)."""
    window_steps: int = bounded(20, ge=1)
    """Decision steps per rollout window (one GRPO prompt). Windows keep the clip clock and hold the
    targets that land on their steps (``data_builders.stream_steps.step_windows``), as SFT's do."""
    negative_share: float = bounded(0.25, ge=0, le=1)
    """Share of windows without a target."""
    num_generations: int = bounded(4, ge=2)
    """Rollouts per window (G, trl's ``num_generations``); advantages are centred within the group."""
    windows_per_step: int = bounded(8, ge=1)
    """Windows (groups) per update, over all ranks: with N processes, rank r rolls out windows
    ``r, r + N, ...`` of the update's draw (``infra.ranks.shard``), so a run is the same
    whatever the process count. G x ``windows_per_step`` rollouts per update."""
    credit: str = "sequence"
    """The advantage estimator (``train.grpo.algorithm.ADVANTAGES``). ``sequence``: one advantage per
    rollout (GRPO as published); ``decision``: one per decision step, from per-step rewards that sum
    to the rollout's."""
    gamma: float = bounded(0.0, ge=0, le=1)
    """Discount of later steps' rewards in a decision's return (``credit=decision`` only). At 0 each
    decision answers for its own increment of the reward. With PRS-B, which credits a reply made
    before its target, that pays early guesses unless gamma > exp(-alpha) (0.95 at alpha 0.05), and
    so high a gamma brings back the collapse to silence; a causal reward (PRS-U) has neither issue."""
    temperature: float = bounded(1.0, gt=0)
    """Sampling temperature of decisions (two-way softmax) and response tokens."""
    max_new_tokens: int = bounded(16, ge=1)
    compile_rollouts: bool = False
    """Roll out with the language model's forward compiled (``engine.streaming.EngineConfig.compile``):
    faster rollouts once its graphs are built, minutes for a 4B model's at the first update of a
    process. The updates themselves run eagerly."""
    engine_step: str = "auto"
    """The rollouts' engine step (``engine.streaming.EngineConfig.step``): ``auto`` (the compiled
    static step where the device gains from it, else eager: ``engine.step_choice``), ``eager`` or
    ``static`` (compiled with ``compile_rollouts=true``)."""
    learning_rate: float = bounded(5e-7, ge=0)
    epsilon: float = bounded(0.2, gt=0)
    """Ratio clipping of the GRPO objective: ``clip(r, 1 - epsilon, 1 + epsilon_high)`` (trl's name)."""
    epsilon_high: float | None = bounded(None, gt=0)
    """Upper clipping bound (DAPO's clip-higher, e.g. 0.28); None: ``epsilon``."""
    beta: float = bounded(0.0, ge=0)
    """KL coefficient against the initial policy (0: no reference model)."""
    loss_type: str = "grpo"
    """How the per-token losses of an update are averaged (trl's ``loss_type``; ``train.grpo.algorithm.OBJECTIVES``):
    ``grpo`` each rollout's token mean, averaged over rollouts; ``bnpo`` each window group's token
    mean, averaged over groups; ``dr_grpo`` the token sum over rollouts x the longest possible rollout
    (``window_steps`` x (``max_new_tokens`` + 2) tokens), constant; ``dapo`` the token sum over every
    generated token of the update, all ranks together."""
    scale_rewards: str = "group"
    """Divide centred rewards by their standard deviation within the ``group`` (GRPO), over the
    whole update's ``batch`` (all ranks), or ``none`` (Dr. GRPO) (trl's ``scale_rewards``;
    ``train.grpo.algorithm.SCALES``)."""
    max_steps: int = bounded(100, ge=0)
    """Updates."""
    save_every: int = bounded(50, ge=0)
    save_total_limit: int = bounded(2, ge=1)
    eval_every: int = bounded(0, ge=0)
    """Updates between held-out evaluations of ``eval_split`` (0: none during the run)."""
    eval_threshold: float = bounded(0.5, ge=0, le=1)
    eval_benchmark: str = "p3i"
    """The held-out evaluations' benchmark, a ``conf/benchmark/<name>.yaml`` (p3i: at the data's
    steps per second), e.g. ``ovo`` with ``eval_records`` built by ``source=ovo``."""
    eval_records: str | None = None
    """Records (a file or build dir, e.g. a public benchmark's build) evaluated instead of
    ``<data.dir>/<eval_split>``."""
    best_metric: str = "with_negatives/prs_b"
    """The held-out figure ``keep_best`` maximizes: a ``/`` path into the benchmark's metrics
    (``total`` for ovo, ``answer_accuracy`` for streamingbench_proactive, ``ESTP-F1`` for estp)."""
    keep_best: bool = False
    """Keep the weights with the best held-out ``best_metric`` (default PRS-B, negatives counted) in
    ``<output_dir>/best``, the starting point (update 0) and the last update included; ties keep the
    earlier. Needs ``eval_every`` and ``eval_split`` (or ``eval_records``). ``python -m train.grpo``
    then returns (and prints) ``best``."""
    dist_timeout_s: float = bounded(7200.0, gt=0)
    """How long a rank waits in a collective under DeepSpeed (seconds): the other ranks wait while
    rank 0 evaluates the held-out split or writes a checkpoint."""


def _reward_config() -> type:
    """The ``reward`` block's schema: ``reward_weights`` and one options block per reward of
    ``train.grpo.rewards.REWARDS``, so a registered reward's block needs no line here."""
    weights = ("reward_weights", dict[str, float], field(default_factory=lambda: {"prs": 1.0}))
    blocks = [(name, dict[str, Any], field(default_factory=dict)) for name in REWARDS]
    schema = make_dataclass("RewardConfig", [weights, *blocks])
    schema.__module__ = __name__
    schema.__doc__ = """The reward (``conf/reward/*.yaml``, built by ``train.grpo.rewards.build_reward``): the
    weight of each registered reward (``reward_weights``: trl's, keyed by name; zero weights are still
    logged) and each one's options block. Typed at the top, so ``reward.reward_weights.prs=abc`` and a
    misspelt ``+reward.weight.prs=2`` fail when the config is validated; a block's options are the
    reward function's keyword-only parameters, checked against its signature (names and types,
    ``train.grpo.rewards.check_options``) when ``build_reward`` runs, before the model loads."""
    return schema


RewardConfig = _reward_config()


@dataclass
class EntryConfig:
    """A function that runs instead of the plain GRPO stage, given the whole config: an experiment
    (``experiment=toy_overfire`` sets ``train.experiments.toy_overfire.run_experiment``)."""

    target: str | None = None
    """Dotted path of ``fn(cfg) -> dict``; its result is printed as JSON."""
    options: dict[str, Any] = field(default_factory=dict)
    """The entry's own settings, validated by the entry."""


@dataclass
class GRPOConfig(DataRootConfig):
    run_name: str = "grpo"
    init: str | None = None
    """The SFT checkpoint to improve (a model + processor dir), or ``random``: the ``model`` config as
    it is (tests, benchmarks). Required: without it GRPO would silently train an untrained model."""
    reward: RewardConfig = field(default_factory=RewardConfig)
    grpo: GRPOStageConfig = field(default_factory=GRPOStageConfig)
    entry: EntryConfig = field(default_factory=EntryConfig)


store_schema("grpo", GRPOConfig)


def reward_spec(reward: Any) -> dict[str, Any]:
    """The ``reward`` block as a plain dict, as ``train.grpo.rewards.build_reward`` takes it.

    >>> reward_spec({"reward_weights": {"prs": 2.0}, "prs": {"variant": "u"}, "redundancy": {}, "format": {}})
    {'reward_weights': {'prs': 2.0}, 'prs': {'variant': 'u'}, 'redundancy': {}, 'format': {}}
    """
    from omegaconf import DictConfig, OmegaConf

    return OmegaConf.to_container(reward, resolve=True) if isinstance(reward, DictConfig) else dict(reward)


def check_choices(g: Any) -> None:
    """The ``grpo`` block's named choices, checked before anything heavy loads: ``credit``,
    ``scale_rewards`` and ``loss_type`` against the registries of ``train.grpo.algorithm``."""
    named = [
        ("loss_type", OBJECTIVES.names()),
        ("scale_rewards", SCALES.names()),
        ("credit", ADVANTAGES.names()),
    ]
    for key, allowed in [*named, ("engine_step", ENGINE_STEPS)]:
        value = getattr(g, key)
        if value not in allowed:
            raise ValueError(f"grpo.{key}={value!r}: choose one of {', '.join(allowed)}")
