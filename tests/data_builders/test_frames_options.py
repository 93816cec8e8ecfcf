"""The frames stage refuses options it cannot run with, naming the option, before any work."""

from __future__ import annotations

import subprocess
import sys

import pytest

from data_builders.build import build_source
from data_builders.frames import cache_frames


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"steps_per_second": -1.0}, r"steps_per_second=-1\.0: must be a finite number more than 0"),
        ({"steps_per_second": 0.0}, r"steps_per_second=0\.0: must be a finite number more than 0"),
        ({"steps_per_second": float("nan")}, r"steps_per_second=nan: must be a finite number"),
        ({"workers": 0}, r"workers=0: must be a whole number, at least 1"),
        ({"workers": -2}, r"workers=-2: must be a whole number, at least 1"),
    ],
)
def test_bad_options_are_refused_before_any_work(tmp_path, options, message):
    build_source("toy", tmp_path / "toy", options={"n": 1, "seed": 0}, workers=1)
    with pytest.raises(ValueError, match=message):
        cache_frames(tmp_path / "toy", tmp_path / "frames", progress=False, **options)
    assert not (tmp_path / "frames").exists()


def test_the_command_names_the_bad_option(tmp_path):
    build_source("toy", tmp_path / "toy", options={"n": 1, "seed": 0}, workers=1)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "data_builders",
            "frames",
            f"records={tmp_path / 'toy'}",
            "steps_per_second=-1",
        ]
        + [f"paths.frame_cache_dir={tmp_path / 'frames'}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    assert "steps_per_second=-1.0: must be a finite number more than 0" in proc.stderr
    assert not (tmp_path / "frames").exists()
