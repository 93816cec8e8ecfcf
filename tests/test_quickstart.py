"""The README's "Quick start on CPU", run as written in a fresh folder, each line a fresh process, with
fewer clips (64: the test split still holds clips with targets and a negative) and 2 SFT steps: the
lines run, and each ``eval.run``'s summary line counts the test records it scored, leads its JSON
line with the same headline, and the second compares itself with the first. Learning is not checked
here (1,500 steps: docs/experiments.md); the README's sample output has the shape checked here."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SETUP = "make setup && source .venv/bin/activate"
#: What the test changes in the README's lines, and only this: fewer clips, fewer SFT steps.
SMALL = {"n=512": "n=64"}
SFT_STEPS = ["sft.max_steps=2", "sft.logging_steps=1"]

NUMBER = r"(\d+\.\d)"
SUMMARY = re.compile(
    rf"^(?P<name>\S+) on p3i: with_negatives/prs_b {NUMBER} \(PRS-B, each negative counted in its task "
    r"\(100 when silent\)\) over (?P<clips>\d+) clips: (?P<targets>\d+) with targets, (?P<negatives>\d+) negatives$"
)
BEFORE_AFTER = re.compile(
    rf"^before -> after, the same (?P<n>\d+) records, with_negatives/prs_b: (?P<before_name>\S+) {NUMBER} -> "
    rf"(?P<after_name>\S+) {NUMBER} \(([+-]\d+\.\d); (?P<folder>\S+)\)$"
)


def section(title: str) -> str:
    text = README.read_text(encoding="utf-8")
    return text.split(f"\n## {title}", 1)[1].split("\n## ", 1)[0]


def cpu_lines() -> list[str]:
    """The command lines of the README's CPU quick start (its first code block), comments cut."""
    block = section("Quick start on CPU").split("```\n", 2)[1]
    return [line.split("#", 1)[0].strip() for line in block.splitlines() if line.split("#", 1)[0].strip()]


def sample_output() -> list[str]:
    """The output lines the README shows for the quick start (its second code block)."""
    return [line for line in section("Quick start on CPU").split("```\n")[3].splitlines() if line]


def test_the_readme_cpu_quick_start_comes_first_and_shows_what_the_commands_print():
    text = README.read_text(encoding="utf-8")
    assert text.index("\n## Quick start on CPU") < text.index("\n## Quick start on one GPU")
    lines = cpu_lines()
    assert lines[0] == SETUP and len(lines) == 6
    assert [line.split()[2] for line in lines[1:]] == [
        "data_builders",
        "data_builders",
        "eval.run",
        "train.sft",
        "eval.run",
    ]
    assert "checkpoint=null" in lines[3] and "checkpoint=runs/toy_sft/final" in lines[5]
    untrained, trained, compared = sample_output()
    a, b, c = SUMMARY.match(untrained), SUMMARY.match(trained), BEFORE_AFTER.match(compared)
    assert a and b and c, sample_output()
    assert (a["name"], b["name"], c["before_name"], c["after_name"]) == (
        "tiny-untrained",
        "toy_sft_final",
        "tiny-untrained",
        "toy_sft_final",
    )
    assert a["clips"] == c["n"] == "74" and (a["targets"], a["negatives"]) == ("51", "23")
    assert c["folder"] == "runs/eval/tiny-untrained/p3i"


def _run(line: str, cwd: Path) -> list[str]:
    args = line.split()
    assert args[:2] == ["python", "-m"], line
    env = {k: v for k, v in os.environ.items() if k not in ("PROACTIVE_ROOT", "PROACTIVE_CACHE")}
    env |= {
        "PYTHONPATH": str(ROOT),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "WANDB_MODE": "offline",
    }
    done = subprocess.run(
        [sys.executable, *args[1:]],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, f"{line}\n{done.stderr[-3000:]}"
    return done.stdout.strip().splitlines()


def _summary(lines: list[str], name: str, records: Path) -> float:
    """The summary line's figure, after checking its counts against ``records`` and the JSON line."""
    streams = [json.loads(x) for x in records.read_text().splitlines() if x.strip()]
    negatives = sum(1 for s in streams if not s.get("targets"))
    at = next(i for i, x in enumerate(lines) if x.startswith(f"{name} on p3i: "))
    m = SUMMARY.match(lines[at])
    assert m, lines[at]
    assert (m["name"], int(m["clips"]), int(m["negatives"])) == (name, len(streams), negatives)
    assert int(m["targets"]) == len(streams) - negatives > 0 and negatives > 0
    metrics = json.loads(lines[-1])
    assert next(iter(metrics)) == "with_negatives" and next(iter(metrics["with_negatives"])) == "prs_b"
    assert f"{metrics['with_negatives']['prs_b']:.1f}" == m.group(2)
    return metrics["with_negatives"]["prs_b"]


@pytest.mark.slow  # five fresh processes: build, mix, two evaluations, two SFT steps (about 2 min loaded)
def test_the_readme_cpu_quick_start_runs_as_written(tmp_path):
    lines = cpu_lines()[1:]  # the first is the setup this suite runs in
    for old, new in SMALL.items():
        assert sum(old in line for line in lines) == 1
        lines = [line.replace(old, new) for line in lines]
    out = {}
    for line in lines:
        extra = SFT_STEPS if " train.sft " in f"{line} " else []
        out[line] = _run(" ".join([line, *extra]), tmp_path)
    records = tmp_path / "data" / "toy" / "test" / "records.jsonl"
    before = _summary(out[lines[2]], "tiny-untrained", records)
    after = _summary(out[lines[4]], "toy_sft_final", records)
    m = BEFORE_AFTER.match(out[lines[4]][-2])
    assert m, out[lines[4]][-2:]
    assert (m["n"], m["before_name"], m["after_name"]) == (
        str(len(records.read_text().splitlines())),
        "tiny-untrained",
        "toy_sft_final",
    )
    assert (float(m.group(3)), float(m.group(5))) == (round(before, 1), round(after, 1))
    assert Path(m["folder"]) == Path("runs/eval/tiny-untrained/p3i")
