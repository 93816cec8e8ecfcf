"""`make demo` end to end on the tiny model (CPU): it runs and prints the step-by-step decisions."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_demo_runs_end_to_end(tmp_path):
    cmd = [sys.executable, "-m", "train.demo", f"paths.root_dir={tmp_path}", "demo.n_streams=4"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert any(line.startswith("[1/4] toy data: 4 streams") for line in lines)
    steps = [line for line in lines if line.strip()[:1].isdigit() and "</" in line]
    assert len(steps) == 20
    assert (tmp_path / "runs" / "demo" / "data" / "records.jsonl").exists()
    assert "demo finished" in lines[-1]
