"""GRPO reward functions: signature, parts, weights, and agreement with the evaluator's PRS."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from data_builders.records import Target
from metrics.prs import prs_scores, redundant_replies
from train.grpo.rewards import REWARDS, build_reward, step_rewards

ROOT = Path(__file__).resolve().parents[2]


def turn(t, text):
    return {"time": t, "text": text}


def rollout_from(reply_times, text="</Response> Warning!", steps=40):
    replies = set(reply_times)
    return [turn(float(s), text if s in replies else "</Silence>") for s in range(steps)]


TARGETS = [Target(time=10.0, content="", label="Warning"), Target(time=30.0, content="", label="Warning")]


def values(reward, rollouts, targets, tasks):
    return [reward(r, t, task).value for r, t, task in zip(rollouts, targets, tasks, strict=True)]


def test_prs_reward_is_the_evaluator_prs():
    rollouts = [rollout_from([5, 12, 13, 29]), rollout_from([10, 30]), rollout_from([])]
    for variant in ("u", "b"):
        scored = [
            REWARDS.get("prs")(r, TARGETS, "event_monitoring", variant=variant, alpha=0.05) for r in rollouts
        ]
        expected = [getattr(prs_scores([10.0, 30.0], r), variant) for r in ([5, 12, 13, 29], [10, 30], [])]
        assert [s.value for s in scored] == pytest.approx(expected, abs=1e-12)
        assert scored[0].parts["prs_b"] == pytest.approx((math.exp(-0.1) / 3 + math.exp(-0.05)) / 2)


def test_a_window_only_target_is_due_at_its_centre():
    """The records' own rule (``Target.from_dict``) sets the time; the reward reads it as it is."""
    target = Target.from_dict({"window": [8.0, 12.0], "content": "", "label": "Warning"})
    assert target.time == 10.0
    on_time = REWARDS.get("prs")(rollout_from([10]), [target], "accident_warning")
    assert on_time.value == pytest.approx(1.0)


def test_label_content_and_invalid_turns_in_prs():
    wrong = [turn(10.0, "</Response> All clear."), turn(30.0, "</Response> Warning!")]
    assert REWARDS.get("prs")(wrong, TARGETS, "accident_warning", variant="b").value == pytest.approx(0.5)
    invalid = [turn(10.0, "Warning!"), turn(30.0, "</Response> Warning!")]  # no decision token: not a reply
    assert REWARDS.get("prs")(invalid, TARGETS, "accident_warning", variant="b").value == pytest.approx(0.5)


def test_redundancy_counts_and_task_filter():
    fn = build_reward(
        {"reward_weights": {"redundancy": 1.0}, "redundancy": {"penalty": 0.2, "tasks": ["accident_warning"]}}
    )
    r = rollout_from([10, 11, 12, 30]) + [turn(40.0, "garbage")]
    penalized, other = fn(r, TARGETS, "accident_warning"), fn(r, TARGETS, "crime_alert")
    assert (penalized.value, other.value) == (pytest.approx(-0.2 * 3), 0.0)
    assert penalized.parts["redundancy/redundant"] == 2 and penalized.parts["redundancy/invalid"] == 1
    assert redundant_replies([], [1.0, 2.0, 3.0]) == 3


def test_format_share_and_egoserve_tags():
    fn = REWARDS.get("format")
    r = [
        turn(0.0, "</Silence>"),
        turn(1.0, "</Response> [safety] Hot!"),
        turn(2.0, "</Response> [weather] Rain"),
    ]
    assert values(fn, [r, r, []], [[]] * 3, ["egoserve", "event_monitoring", "egoserve"]) == [
        pytest.approx(2 / 3),
        1.0,
        0.0,
    ]


def test_conf_yamls_build_and_weights_combine():
    paths = sorted((ROOT / "conf" / "reward").glob("*.yaml"))
    assert {p.name for p in paths} >= {"prs.yaml"}
    for path in paths:  # the reward group's reward_weights are build_reward's weights
        assert path.read_text().startswith("# python -m train.grpo reward=")
        cfg = yaml.safe_load(path.read_text())
        assert set(cfg["reward_weights"]) == {"prs", "redundancy", "format"}
        build_reward(cfg)
    cfg = yaml.safe_load((ROOT / "conf" / "reward" / "prs.yaml").read_text())
    del cfg["reward_weights"]
    cfg["reward_weights"] = {"prs": 2.0, "redundancy": 1.0, "format": 0.5}
    reward = build_reward(cfg)
    r = rollout_from([10, 11, 30])
    scored = reward(r, TARGETS, "accident_warning")
    value, parts = scored.value, scored.parts
    prs_b = prs_scores([10.0, 30.0], [10.0, 11.0, 30.0]).b
    assert value == pytest.approx(2.0 * prs_b - 0.2 * 1 + 0.5 * 1.0)
    assert parts["reward/reward"] == pytest.approx(value)
    assert parts["prs/prs"] == pytest.approx(prs_b) and parts["format/format"] == 1.0


def test_unknown_reward_name_fails():
    with pytest.raises(KeyError, match="unknown reward"):
        build_reward({"reward_weights": {"prs": 1.0, "brevity": 1.0}})
    with pytest.raises(ValueError, match=r"reward 'redundancy': unknown option 'lamda'"):
        build_reward({"reward_weights": {"redundancy": 1.0}, "redundancy": {"lamda": 0.2}})
    with pytest.raises(ValueError, match="variant must be 'u' or 'b'"):
        build_reward({"reward_weights": {"prs": 1.0}, "prs": {"variant": "x"}})
    with pytest.raises(
        KeyError, match=r"unknown reward keys \['weights'\]"
    ):  # not a default weight, silently
        build_reward({"weights": {"redundancy": 1.0}})


@settings(max_examples=200, deadline=None)
@given(
    replies=st.lists(st.integers(0, 39), max_size=12),
    wrong=st.lists(st.integers(0, 39), max_size=3),
    negative=st.booleans(),
)
def test_step_rewards_split_the_rollout_reward(replies, wrong, negative):
    """Per-step rewards sum to R(all turns) - R(no turns), and are 0 at every silent step."""
    reward = build_reward({"reward_weights": {"prs": 1.0, "redundancy": 1.0, "format": 0.5}})
    r = rollout_from(replies)
    for s_ in wrong:
        r[s_] = turn(float(s_), "no decision token")
    targets = [] if negative else TARGETS
    steps = step_rewards(reward, r, targets, "accident_warning")
    total = reward(r, targets, "accident_warning").value
    empty = reward([], targets, "accident_warning").value
    assert len(steps) == 40
    assert sum(steps) == pytest.approx(total - empty, abs=1e-9)
    assert empty == (1.0 if negative else 0.0)


def test_step_rewards_credit_the_first_reply_and_charge_repeats():
    reward = build_reward({"reward_weights": {"prs": 1.0, "redundancy": 1.0}, "redundancy": {"penalty": 0.2}})
    steps = step_rewards(reward, rollout_from([10, 11, 12], steps=20), TARGETS[:1], "accident_warning")
    assert steps[10] == pytest.approx(1.0)  # on time, right label: the whole PRS
    assert steps[11] == pytest.approx(1 / 2 - 1 - 0.2)  # the target's score halves, one penalty
    assert steps[12] == pytest.approx(1 / 3 - 1 / 2 - 0.2)
    assert [x for k, x in enumerate(steps) if k not in (10, 11, 12)] == [0.0] * 17
    negative = step_rewards(reward, rollout_from([3, 4], steps=20), [], "accident_warning")
    assert negative[3] == pytest.approx(-1.2) and negative[4] == pytest.approx(-0.2)


# A reward nobody ships (docs/design.md, "Adding a benchmark, a reward or a data source"): the share
# of turns that reply at or after ``after`` seconds.
LATE = """
from train.grpo.rewards import Scored


def late_reward(turns, targets, task, *, after: float = 0.0) -> Scored:
    late = sum(t["time"] >= after and t["text"].startswith("</Response>") for t in turns)
    return Scored(late / len(turns) if turns else 0.0, {"late": late})
"""


@pytest.fixture
def late(tmp_path, monkeypatch):
    """``late_reward`` in a module on the path and its line in the table (``REWARDS.add``, what the
    table's line in train/grpo/rewards.py does); unlisted afterwards."""
    (tmp_path / "late_reward_mod.py").write_text(LATE)
    monkeypatch.syspath_prepend(str(tmp_path))
    REWARDS.add("late", "late_reward_mod:late_reward")
    yield
    REWARDS.remove("late")
    sys.modules.pop("late_reward_mod", None)


def test_a_new_reward_is_one_function_and_one_table_line(late):
    rollout = rollout_from([3, 12, 25], steps=30)  # three replies, two of them at 10 s or later
    reward = build_reward({"reward_weights": {"late": 3.0, "format": 1.0}, "late": {"after": 10.0}})
    scored = reward(rollout, TARGETS, "accident_warning")
    assert scored.value == pytest.approx(3.0 * 2 / 30 + 1.0 * 1.0)
    with pytest.raises(ValueError, match=r"^reward 'late': unknown option 'before' \(its options: after\)$"):
        build_reward({"reward_weights": {"late": 1.0}, "late": {"before": 1.0}})
    with pytest.raises(ValueError, match=r"^reward 'late': option 'after' must be float, got 'soon'$"):
        build_reward({"reward_weights": {"late": 1.0}, "late": {"after": "soon"}})
    with pytest.raises(KeyError, match=r"unknown reward\(s\) \['lately'\]"):
        build_reward({"reward_weights": {"lately": 1.0}})


#: In a fresh interpreter: ``late_reward``'s line added to the table before the config schema is
#: read (as a line in train/grpo/rewards.py would be), the grpo root composed with its YAML from a
#: second config folder, checked as ``python -m train.grpo`` checks it, and the reward computed once.
CHECK = """
import json, sys
from train.grpo.rewards import REWARDS
REWARDS.add("late", "late_reward_mod:late_reward")
from infra.schema import compose
from train.grpo.config import GRPOConfig
from train.grpo.run import check_config
try:
    cfg = compose("grpo", ["init=random", "reward=late", *sys.argv[1:]], GRPOConfig)
    reward = check_config(cfg)
except ValueError as exc:
    print(json.dumps({"error": str(exc)}))
else:
    turns = [{"time": float(s), "text": "</Response> Warning!" if s in (3, 12, 25) else "</Silence>"} for s in range(30)]
    print(json.dumps({"value": reward(turns, [], "accident_warning").value, "late": dict(cfg.reward.late)}))
"""


def test_a_new_reward_is_one_function_and_one_yaml_file(tmp_path):
    """A reward nobody ships, added as docs/design.md says: its function (with its table line) and
    ``conf/reward/late.yaml``. Its option is typed by the signature: set from the YAML, checked by
    name and type with a one-line error naming the reward."""
    (tmp_path / "late_reward_mod.py").write_text(LATE)
    (tmp_path / "conf" / "reward").mkdir(parents=True)
    (tmp_path / "conf" / "reward" / "late.yaml").write_text(
        "reward_weights:\n  prs: 0.0\n  late: 3.0\n  format: 1.0\nlate:\n  after: 10.0\n"
    )

    def check(*overrides):
        env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}"}
        argv = [sys.executable, "-c", CHECK, f"hydra.searchpath=[file://{tmp_path / 'conf'}]", *overrides]
        out = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        return json.loads(out.stdout.strip().splitlines()[-1])

    assert check() == {"value": pytest.approx(3.0 * 2 / 30 + 1.0), "late": {"after": 10.0}}
    assert check("reward.late.after=20") == {
        "value": pytest.approx(3.0 * 1 / 30 + 1.0),
        "late": {"after": 20},
    }
    assert check("reward.late.after=soon") == {
        "error": "reward: reward 'late': option 'after' must be float, got 'soon'"
    }
    assert check("+reward.late.before=1") == {
        "error": "reward: reward 'late': unknown option 'before' (its options: after)"
    }
