"""``python -m perf prs`` prints its figures as one JSON object on the last line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_entry_point():
    """The bench runs and prints its figures; how fast is the bench command's to say, not a test's."""
    proc = subprocess.run(
        [sys.executable, "-m", "perf", "prs", "--samples", "500", "--repeats", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["samples"] == 500 and result["targets"] == 10 and result["replies"] == 20
    assert result["prs_samples_per_s"] > 0 and result["prs_samples_per_s_content"] > 0
