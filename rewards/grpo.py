"""GRPO reward functions, built on the same metric core the evaluator reports.

Call signature (trl's, with rollouts as turn lists)::

    reward(completions: list[list[dict]], **columns) -> list[float | None]

Each completion is one rollout: one turn ``{"time": s, "text": raw assistant text}`` per decision
step. Columns used: ``targets`` (per rollout, a list of ``Target.to_dict()`` dicts) and ``task``;
any other column (``prompts``, ``completion_ids``, ...) is ignored. Every reward object also has
``parts(completions, **columns) -> list[dict]`` (its sub-scores per rollout) and keeps the parts of
its last call in ``last_parts`` so the trainer can log them without scoring twice.

- ``prs``: PRS-U or PRS-B (``variant``) of the rollout's valid responses against the targets, with
  ``alpha`` and a pure content scorer (``label``, ``any`` or ``exact``). This is
  :func:`rewards.prs.prs_scores`, the function ``eval.score`` reports.
- ``redundancy``: ``-lambda`` per redundant or invalid turn, on the listed tasks only (0 elsewhere).
  Redundant: a reply to a target that already has one (under the ``variant`` assignment); on a
  sample with no targets every reply is redundant (our choice: there is nothing to reply to).
  Invalid: :func:`rewards.turns.parse_turn` says so (no decision token, empty response, unknown tag).
- ``format``: the share of well-formed turns (0.0 for a rollout with no turns).

:func:`build_reward` combines them with the weights of a ``conf/reward/*.yaml`` dict.

>>> turns = [{"time": 9.0, "text": "</Silence>"}, {"time": 10.0, "text": "</Response> Warning!"},
...          {"time": 11.0, "text": "</Response> Warning!"}]
>>> cols = {"targets": [[{"time": 10.0, "content": "", "label": "Warning"}]], "task": ["accident_warning"]}
>>> reward = build_reward({"weights": {"prs": 1.0, "redundancy": 1.0}})
>>> [round(r, 6) for r in reward([turns], **cols)]
[0.3]
>>> reward.last_parts[0]["prs/prs"], reward.last_parts[0]["redundancy/redundant"]
(0.5, 1)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rewards.content import ContentScorer, TargetText, get_content_scorer
from rewards.prs import DEFAULT_ALPHA, prs_scores, redundant_replies
from rewards.turns import ParsedTurn, allowed_categories, parse_turn

Rollout = Sequence[Mapping[str, Any]]
REWARD_FUNCTIONS: dict[str, Callable[..., RewardFunction]] = {}
DEFAULT_PENALTY_TASKS = ("accident_warning", "event_intervention")


def register_reward(name: str) -> Callable:
    """Decorator: register a reward factory ``(**config) -> RewardFunction`` under ``name``."""

    def deco(factory: Callable[..., RewardFunction]) -> Callable[..., RewardFunction]:
        REWARD_FUNCTIONS[name] = factory
        return factory

    return deco


def parse_rollout(rollout: Rollout, task: str | None) -> list[tuple[float, ParsedTurn]]:
    """(time, parsed turn) for every turn of a rollout, with the task's allowed category tags.

    >>> [p.kind for _, p in parse_rollout([{"time": 0, "text": "</Silence>"}, {"time": 1, "text": "x"}], None)]
    ['silence', 'invalid']
    """
    allowed = allowed_categories(task)
    return [(float(turn["time"]), parse_turn(str(turn["text"]), allowed)) for turn in rollout]


def _targets(raw: Sequence[Mapping[str, Any]]) -> tuple[list[float], list[TargetText]]:
    times, texts = [], []
    for t in raw:
        window = t.get("window")
        time = t.get("time")
        if time is None:
            if window is None:
                raise ValueError(f"target {dict(t)!r} has neither a time nor a window")
            time = (window[0] + window[1]) / 2
        times.append(float(time))
        texts.append(TargetText(t.get("content") or "", t.get("label"), t.get("category")))
    return times, texts


def _column(columns: Mapping[str, Any], name: str, n: int, default: Any = None) -> list:
    value = columns.get(name)
    if value is None:
        return [default] * n
    if len(value) != n:
        raise ValueError(f"column {name!r} has {len(value)} rows for {n} completions")
    return list(value)


class RewardFunction:
    """A named reward with trl's signature; subclasses implement ``score_one``."""

    name = "reward"

    def __init__(self) -> None:
        self.__name__ = self.name  # trl logs reward functions by __name__
        self.last_parts: list[dict[str, float]] = []

    def score_one(
        self, turns: list[tuple[float, ParsedTurn]], targets: Sequence[Mapping[str, Any]], task: str | None
    ) -> tuple[float, dict[str, float]]:
        raise NotImplementedError

    def parts(self, completions: Sequence[Rollout], **columns: Any) -> list[dict[str, float]]:
        """Per-rollout sub-scores (keys prefixed with the reward's name); the value is ``<name>/<name>``."""
        n = len(completions)
        targets = _column(columns, "targets", n, [])
        tasks = _column(columns, "task", n)
        out = []
        for rollout, tgt, task in zip(completions, targets, tasks, strict=True):
            value, parts = self.score_one(parse_rollout(rollout, task), tgt or [], task)
            out.append(
                {f"{self.name}/{self.name}": value, **{f"{self.name}/{k}": v for k, v in parts.items()}}
            )
        return out

    def __call__(self, completions: Sequence[Rollout], **columns: Any) -> list[float | None]:
        self.last_parts = self.parts(completions, **columns)
        return [p[f"{self.name}/{self.name}"] for p in self.last_parts]


class PRSReward(RewardFunction):
    """PRS of a rollout's valid replies (see the module docstring)."""

    name = "prs"

    def __init__(
        self, variant: str = "b", alpha: float = DEFAULT_ALPHA, content: str = "label", **content_config: Any
    ) -> None:
        super().__init__()
        if variant not in ("u", "b"):
            raise ValueError(f"prs variant must be 'u' or 'b', got {variant!r}")
        self.variant, self.alpha = variant, alpha
        self.content: ContentScorer = get_content_scorer(content, **content_config)

    def score_one(self, turns, targets, task):
        times, texts = _targets(targets)
        replies = [(t, p.text) for t, p in turns if p.kind == "response"]
        reply_times = [t for t, _ in replies]
        content = self.content

        def c(k: int, i: int) -> float:
            return content(replies[k][1], texts[i])

        s = prs_scores(times, reply_times, c, self.alpha)
        value = s.u if self.variant == "u" else s.b
        return value, {
            "prs_u": s.u,
            "prs_b": s.b,
            "prs_u_prime": s.u_prime,
            "prs_b_prime": s.b_prime,
            "replies": float(len(replies)),
        }


class RedundancyReward(RewardFunction):
    """``-lambda`` per redundant or invalid turn on the penalized tasks."""

    name = "redundancy"

    def __init__(
        self,
        penalty: float = 0.2,
        tasks: Sequence[str] = DEFAULT_PENALTY_TASKS,
        variant: str = "b",
        **extra: Any,
    ) -> None:
        super().__init__()
        # YAML spells the weight `lambda` (a Python keyword), so it arrives through **extra
        self.penalty = float(extra.pop("lambda", penalty))
        if extra:
            raise TypeError(f"unknown redundancy options: {sorted(extra)}")
        self.tasks, self.variant = frozenset(tasks), variant

    def score_one(self, turns, targets, task):
        times, _ = _targets(targets)
        invalid = sum(p.kind == "invalid" for _, p in turns)
        redundant = redundant_replies(times, [t for t, p in turns if p.kind == "response"], self.variant)
        value = -self.penalty * (redundant + invalid) if task in self.tasks else 0.0
        return value, {"redundant": redundant, "invalid": invalid}


class FormatReward(RewardFunction):
    """The share of well-formed turns."""

    name = "format"

    def __init__(self, **_: Any) -> None:
        super().__init__()

    def score_one(self, turns, targets, task):
        valid = sum(p.kind != "invalid" for _, p in turns)
        return (valid / len(turns) if turns else 0.0), {"turns": len(turns), "valid": valid}


register_reward("prs")(PRSReward)
register_reward("redundancy")(RedundancyReward)
register_reward("format")(FormatReward)


class CombinedReward(RewardFunction):
    """Weighted sum of registered rewards; ``parts`` holds every component's parts and ``total``."""

    name = "reward"

    def __init__(self, components: Mapping[str, tuple[float, RewardFunction]]) -> None:
        super().__init__()
        self.components = dict(components)

    def parts(self, completions: Sequence[Rollout], **columns: Any) -> list[dict[str, float]]:
        rows: list[dict[str, float]] = [{} for _ in completions]
        totals = [0.0] * len(completions)
        for name, (weight, fn) in self.components.items():
            for k, part in enumerate(fn.parts(completions, **columns)):
                rows[k].update(part)
                totals[k] += weight * part[f"{name}/{name}"]
        for row, total in zip(rows, totals, strict=True):
            row[f"{self.name}/{self.name}"] = total
        return rows


def step_rewards(reward: RewardFunction, completions: Sequence[Rollout], **columns: Any) -> list[list[float]]:
    """Per-turn rewards: ``r_j = R(turns[:j+1]) - R(turns[:j])`` for every turn j of every rollout.

    They telescope, ``sum_j r_j = R(turns) - R([])``, so they split a rollout's reward among its
    decisions without changing what it sums to: a reply is charged, at its own step, for what it
    adds (the first on-time reply earns the PRS) or costs (a repeat divides the target's score and
    takes the redundancy penalty). ``R([])`` is 0 on a window with a target and the silent score
    (PRS 1) on one without. Columns as for ``__call__``; ``reward.last_parts`` is left as it was.

    >>> reward = build_reward({"weights": {"prs": 1.0, "redundancy": 1.0}})
    >>> say = "</Response> Warning!"
    >>> turns = [{"time": 9.0, "text": "</Silence>"}, {"time": 10.0, "text": say}, {"time": 11.0, "text": say}]
    >>> cols = {"targets": [[{"time": 10.0, "content": "", "label": "Warning"}]], "task": ["accident_warning"]}
    >>> [round(r, 6) for r in step_rewards(reward, [turns], **cols)[0]]
    [0.0, 1.0, -0.7]
    """
    n = len(completions)
    prefixes, cols = [], {"targets": [], "task": []}
    for rollout, targets, task in zip(
        completions, _column(columns, "targets", n, []), _column(columns, "task", n), strict=True
    ):
        for j in range(len(rollout) + 1):
            prefixes.append(list(rollout[:j]))
            cols["targets"].append(targets)
            cols["task"].append(task)
    key = f"{reward.name}/{reward.name}"
    totals = [p[key] for p in reward.parts(prefixes, **cols)]
    out, at = [], 0
    for rollout in completions:
        values = totals[at : at + len(rollout) + 1]
        out.append([b - a for a, b in zip(values, values[1:])])
        at += len(rollout) + 1
    return out


def build_reward(config: Mapping[str, Any]) -> CombinedReward:
    """The combined reward of a ``conf/reward/*.yaml`` dict: ``weights`` by name, and one options
    dict per reward under its name. Zero-weight rewards are still computed, for logging.

    >>> r = build_reward({"weights": {"format": 1.0}})
    >>> r([[{"time": 0.0, "text": "</Silence>"}, {"time": 1.0, "text": "oops"}]])
    [0.5]
    """
    weights = dict(config.get("weights") or {"prs": 1.0})
    unknown = set(weights) - set(REWARD_FUNCTIONS)
    if unknown:
        raise KeyError(f"unknown reward(s) {sorted(unknown)} (known: {sorted(REWARD_FUNCTIONS)})")
    components = {
        name: (float(w), REWARD_FUNCTIONS[name](**dict(config.get(name) or {})))
        for name, w in weights.items()
    }
    return CombinedReward(components)
