"""GRPO rewards, built on the same metric core the evaluator reports.

A reward is a pure function of one rollout::

    reward(turns, targets, task, **options) -> Scored(value, parts)

``turns`` holds one ``{"time": s, "text": raw assistant text}`` per decision step (:data:`Turns`);
``targets`` are the window's targets as the records hold them (``data_builders.records.Target``
fits :class:`TimedTarget`: its ``time`` is already the window's centre where the record gave only
a window); ``task`` is the stream's task. :data:`REWARDS` maps each name of ``reward.reward_weights``
to its function. A reward's options are its keyword-only parameters: their names, annotated types
and defaults are what its block in ``conf/reward/*.yaml`` may set (:func:`check_options`), so a new
reward is one function with its line in :data:`REWARDS` and one YAML file (docs/design.md).

- ``prs``: PRS-U or PRS-B (``variant``) of the rollout's valid responses against the targets, with
  ``alpha`` and a pure content scorer (``label``, ``any`` or ``exact``; ``label`` scores a target
  without a label with ``fallback``). This is
  :func:`metrics.prs.prs_scores`, the function ``eval.score`` reports.
- ``redundancy``: ``-penalty`` per redundant or invalid turn, on the listed tasks only (0 elsewhere).
  Redundant: a reply to a target that already has one (under the ``variant`` assignment); on a
  sample with no targets every reply is redundant (our choice: there is nothing to reply to).
  Invalid: :func:`data_builders.turn_grammar.parse_turn` says so (no decision token, empty response, unknown tag).
- ``format``: the share of well-formed turns (0.0 for a rollout with no turns).

:func:`build_reward` combines them with the weights of a ``conf/reward/*.yaml`` dict into a
:class:`WeightedReward`, itself a reward of the same shape whose parts hold every component's.

>>> from types import SimpleNamespace
>>> turns = [{"time": 9.0, "text": "</Silence>"}, {"time": 10.0, "text": "</Response> Warning!"},
...          {"time": 11.0, "text": "</Response> Warning!"}]
>>> targets = [SimpleNamespace(time=10.0, content="", label="Warning", category=None)]
>>> reward = build_reward({"reward_weights": {"prs": 1.0, "redundancy": 1.0}})
>>> scored = reward(turns, targets, "accident_warning")
>>> round(scored.value, 6), scored.parts["prs/prs"], scored.parts["redundancy/redundant"]
(0.3, 0.5, 1)
"""

from __future__ import annotations

import functools
import inspect
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from data_builders.turn_grammar import ParsedTurn, allowed_categories, parse_turn
from infra.registry import Registry
from metrics.content import ContentScorer, TargetLike, pure_scorer
from metrics.prs import DEFAULT_ALPHA, prs_scores, redundant_replies

#: A rollout's turns, the rewards' input: one ``{"time", "text"}`` per decision step.
Turns = Sequence[Mapping[str, Any]]
DEFAULT_PENALTY_TASKS = ("accident_warning", "event_intervention")


class TimedTarget(TargetLike, Protocol):
    """What a reward reads of a target: when the reply is due, and what the content scorer reads."""

    time: float


@dataclass(frozen=True)
class Scored:
    """A reward's value for one rollout and its sub-scores (logged, never fed back)."""

    value: float
    parts: dict[str, float] = field(default_factory=dict)


Reward = Callable[..., Scored]


def parse_rollout(turns: Turns, task: str | None) -> list[tuple[float, ParsedTurn]]:
    """(time, parsed turn) for every turn of a rollout, with the task's allowed category tags.

    >>> [p.kind for _, p in parse_rollout([{"time": 0, "text": "</Silence>"}, {"time": 1, "text": "x"}], None)]
    ['silence', 'invalid']
    """
    allowed = allowed_categories(task)
    return [(float(turn["time"]), parse_turn(str(turn["text"]), allowed)) for turn in turns]


@functools.cache
def _content_scorer(name: str, fallback: str) -> ContentScorer:
    return pure_scorer(name, fallback=fallback)


def prs_reward(
    turns: Turns,
    targets: Sequence[TimedTarget],
    task: str | None,
    *,
    variant: str = "b",
    alpha: float = DEFAULT_ALPHA,
    content: str = "label",
    fallback: str = "exact",
) -> Scored:
    """PRS of a rollout's valid replies (see the module docstring)."""
    if variant not in ("u", "b"):
        raise ValueError(f"prs variant must be 'u' or 'b', got {variant!r}")
    scorer = _content_scorer(content, fallback)
    replies = [(t, p.text) for t, p in parse_rollout(turns, task) if p.kind == "response"]
    s = prs_scores(
        [float(t.time) for t in targets],
        [t for t, _ in replies],
        lambda k, i: scorer(replies[k][1], targets[i]),
        alpha,
    )
    parts = {"prs_u": s.u, "prs_b": s.b, "prs_u_prime": s.u_prime, "prs_b_prime": s.b_prime}
    return Scored(s.u if variant == "u" else s.b, parts | {"replies": float(len(replies))})


def redundancy_reward(
    turns: Turns,
    targets: Sequence[TimedTarget],
    task: str | None,
    *,
    penalty: float = 0.2,
    tasks: Sequence[str] = DEFAULT_PENALTY_TASKS,
    variant: str = "b",
) -> Scored:
    """``-penalty`` per redundant or invalid turn on the penalized ``tasks``."""
    parsed = parse_rollout(turns, task)
    invalid = sum(p.kind == "invalid" for _, p in parsed)
    replies = [t for t, p in parsed if p.kind == "response"]
    redundant = redundant_replies([float(t.time) for t in targets], replies, variant)
    value = -float(penalty) * (redundant + invalid) if task in frozenset(tasks) else 0.0
    return Scored(value, {"redundant": redundant, "invalid": invalid})


def format_reward(turns: Turns, targets: Sequence[TimedTarget], task: str | None) -> Scored:
    """The share of well-formed turns."""
    parsed = parse_rollout(turns, task)
    valid = sum(p.kind != "invalid" for _, p in parsed)
    return Scored(valid / len(parsed) if parsed else 0.0, {"turns": len(parsed), "valid": valid})


#: Every reward by the name ``reward.reward_weights`` gives it: name -> its function (``infra.registry``).
REWARDS = Registry(
    "reward",
    {
        "prs": "train.grpo.rewards:prs_reward",
        "redundancy": "train.grpo.rewards:redundancy_reward",
        "format": "train.grpo.rewards:format_reward",
    },
)


@dataclass(frozen=True)
class WeightedReward:
    """The weighted sum of named rewards (each bound to its options). Its parts: every component's
    value (``<name>/<name>``) and parts (``<name>/<part>``), and the total (``reward/reward``)."""

    components: Mapping[str, tuple[float, Callable[[Turns, Sequence[TimedTarget], str | None], Scored]]]
    name: str = "reward"

    def __call__(self, turns: Turns, targets: Sequence[TimedTarget], task: str | None) -> Scored:
        parts: dict[str, float] = {}
        total = 0.0
        for name, (weight, reward) in self.components.items():
            scored = reward(turns, targets, task)
            parts[f"{name}/{name}"] = scored.value
            parts.update({f"{name}/{k}": v for k, v in scored.parts.items()})
            total += weight * scored.value
        parts[f"{self.name}/{self.name}"] = total
        return Scored(total, parts)


def step_rewards(
    reward: Callable[[Turns, Sequence[TimedTarget], str | None], Scored],
    turns: Turns,
    targets: Sequence[TimedTarget],
    task: str | None,
) -> list[float]:
    """Per-turn rewards: ``r_j = R(turns[:j+1]) - R(turns[:j])`` for every turn j of a rollout.

    They telescope, ``sum_j r_j = R(turns) - R([])``, so they split a rollout's reward among its
    decisions without changing what it sums to: a reply is charged, at its own step, for what it
    adds (the first on-time reply earns the PRS) or costs (a repeat divides the target's score and
    takes the redundancy penalty). ``R([])`` is 0 on a window with a target and the silent score
    (PRS 1) on one without.

    >>> from types import SimpleNamespace
    >>> reward = build_reward({"reward_weights": {"prs": 1.0, "redundancy": 1.0}})
    >>> say = "</Response> Warning!"
    >>> turns = [{"time": 9.0, "text": "</Silence>"}, {"time": 10.0, "text": say}, {"time": 11.0, "text": say}]
    >>> targets = [SimpleNamespace(time=10.0, content="", label="Warning", category=None)]
    >>> [round(r, 6) for r in step_rewards(reward, turns, targets, "accident_warning")]
    [0.0, 1.0, -0.7]
    """
    values = [reward(turns[:j], targets, task).value for j in range(len(turns) + 1)]
    return [b - a for a, b in zip(values, values[1:])]


def build_reward(config: Mapping[str, Any]) -> WeightedReward:
    """The weighted reward of a ``conf/reward/*.yaml`` dict: ``reward_weights`` by name, and one
    options dict per reward under its name. Zero-weight rewards are still computed, for logging. Each
    reward is tried once on an empty rollout, so a bad option fails here, before any model loads.

    >>> r = build_reward({"reward_weights": {"format": 1.0}})
    >>> r([{"time": 0.0, "text": "</Silence>"}, {"time": 1.0, "text": "oops"}], [], None).value
    0.5
    """
    stray = sorted(set(config) - {"reward_weights"} - set(REWARDS))
    if stray:
        raise KeyError(f"unknown reward keys {stray} (known: reward_weights and {sorted(REWARDS)})")
    weights = dict(config.get("reward_weights") or {"prs": 1.0})
    unknown = set(weights) - set(REWARDS)
    if unknown:
        raise KeyError(f"unknown reward(s) {sorted(unknown)} (known: {sorted(REWARDS)})")
    components = {}
    for name, weight in weights.items():
        if isinstance(weight, bool) or not isinstance(weight, int | float):
            raise ValueError(f"reward {name!r}: its weight must be a number, got {weight!r}")
        bound = functools.partial(REWARDS.get(name), **check_options(name, config.get(name) or {}))
        bound([], [], None)  # the options' values checked (a variant, a content scorer's name)
        components[name] = (float(weight), bound)
    return WeightedReward(components)


def reward_options(name: str) -> dict[str, inspect.Parameter]:
    """The options of the reward ``name``: its function's keyword-only parameters, each with its
    annotation resolved to a type (``inspect.Parameter.annotation``) and its default.

    >>> {k: (p.annotation, p.default) for k, p in reward_options("redundancy").items() if k != "tasks"}
    {'penalty': (<class 'float'>, 0.2), 'variant': (<class 'str'>, 'b')}
    """
    fn = REWARDS.get(name)
    hints = typing.get_type_hints(fn)
    params = inspect.signature(fn).parameters.values()
    return {p.name: p.replace(annotation=hints.get(p.name, Any)) for p in params if p.kind is p.KEYWORD_ONLY}


def check_options(name: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` of the reward ``name`` checked against its signature: every name one of its
    options, every value of its option's type (an int is a float; a list or tuple a sequence of its
    items' type). A bad one raises ``ValueError`` in one line naming the reward.

    >>> check_options("redundancy", {"penalty": "high"})
    Traceback (most recent call last):
    ...
    ValueError: reward 'redundancy': option 'penalty' must be float, got 'high'
    """
    known = reward_options(name)
    for key, value in options.items():
        if key not in known:
            raise ValueError(
                f"reward {name!r}: unknown option {key!r} (its options: {', '.join(known) or 'none'})"
            )
        hint = known[key].annotation
        if not _fits(value, hint):
            raise ValueError(f"reward {name!r}: option {key!r} must be {_type_name(hint)}, got {value!r}")
    return dict(options)


def _fits(value: Any, hint: Any) -> bool:
    """Whether ``value`` (plain config data) is of the annotated type ``hint``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, a) for a in args)
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin is not None and issubclass(origin, Sequence) and origin is not str:
        item = args[0] if args else Any
        return isinstance(value, list | tuple) and all(_fits(v, item) for v in value)
    return isinstance(value, origin or hint)


def _type_name(hint: Any) -> str:
    return (
        hint.__name__
        if isinstance(hint, type)
        else str(hint).replace("typing.", "").replace("collections.abc.", "")
    )
