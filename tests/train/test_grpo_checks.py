"""GRPO refuses what cannot be right before anything heavy loads: no start point, a reward weight that
is not a number, a misspelt reward key, a reward option misspelt or of the wrong type."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Runs train.grpo's command line in-process and reports its exit status and whether torch got loaded.
PROBE = """
import sys
from train.grpo.run import main
sys.argv = ["train.grpo", *sys.argv[1:]]
try:
    main()
except SystemExit as exc:
    print("EXIT", exc.code, "torch" in sys.modules)
"""


def _grpo(tmp: Path, *overrides: str) -> tuple[str, str, float]:
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", PROBE, f"paths.root_dir={tmp}", *overrides],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return out.stdout.strip().splitlines()[-1], out.stderr, time.perf_counter() - t0


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ((), "GRPO needs init=<SFT checkpoint dir>"),
        (
            ("init=random", "reward.reward_weights.prs=abc"),
            "train.grpo: reward.reward_weights.prs: Value 'abc' of type 'str' could not be converted",
        ),
        (
            ("init=random", "+reward.weight.prs=2"),
            "train.grpo: unknown key reward.weight (did you mean reward.reward_weights?)",
        ),
        (
            ("init=random", "+reward.redundancy.lamda=0.1"),
            "reward 'redundancy': unknown option 'lamda' (its options: penalty, tasks, variant)",
        ),
        (
            ("init=random", "reward.redundancy.penalty=high"),
            "reward 'redundancy': option 'penalty' must be float, got 'high'",
        ),
        (("init=random", "grpo.num_generations=1"), "grpo.num_generations=1: must be at least 2"),
    ],
    ids=[
        "no-init",
        "weight-not-a-number",
        "misspelt-key",
        "misspelt-option",
        "option-of-a-wrong-type",
        "group-of-one",
    ],
)
def test_bad_grpo_configs_fail_before_the_model_loads(tmp_path, overrides, message):
    last, err, seconds = _grpo(tmp_path, *overrides)
    assert last == "EXIT 2 False", (last, err[-2000:])  # exit 2, torch never imported
    assert message in err
    print(f"{overrides}: failed in {seconds:.1f} s")  # the figure the README quotes (machine-dependent)
