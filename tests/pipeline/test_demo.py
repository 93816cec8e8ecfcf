"""`make demo` end to end on the tiny model (CPU), shrunk: data -> untrained eval -> SFT -> GRPO -> summary."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_demo_runs_every_stage(tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "pipeline.demo",
        f"paths.root_dir={tmp_path}",
        "demo.n_streams=16",
        'demo.sft_overrides=["experiment=toy_sft","sft.max_steps=4","sft.time_budget_s=null"]',
        'demo.grpo_overrides=["experiment=toy_grpo","grpo.max_steps=1","grpo.windows_per_step=1"]',
    ]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads((tmp_path / "runs" / "demo" / "summary.json").read_text())
    training = summary.pop("training")
    assert list(summary) == ["untrained", "sft", "sft_blank_video", "grpo"]
    assert training["sft"] == {"done": 4, "planned": 4, "stopped_by": "max_steps"}
    assert training["grpo"] == {"done": 1, "planned": 1, "stopped_by": "max_steps"}
    assert "4 of 4 steps" in out.stdout and "1 of 1 updates" in out.stdout
    for metrics in summary.values():
        assert {"prs_u", "prs_b", "prs_u_prime", "prs_b_prime", "per_task", "micro"} <= set(metrics)
        assert 0.0 <= metrics["prs_b"] <= 100.0
    lines = out.stdout.splitlines()
    last = json.loads(lines[-1])  # every stage ends with one JSON object line
    assert last["summary"] == str(tmp_path / "runs" / "demo" / "summary.json") and last["seconds"] > 0
    assert any(line.startswith("stage") and "PRS-B" in line for line in lines)
    assert (tmp_path / "runs" / "demo" / "grpo" / "final" / "model.safetensors").exists()
