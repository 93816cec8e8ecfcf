"""Where ``eval.run`` writes by default: the default config in ``runs/eval/<checkpoint>/<benchmark>/``,
any other config (the documented ``threshold=``, ``blank_frames=``, ``records=`` lines) beside it in
``<benchmark>@<label>/``, so the documented lines run one after another without a collision."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from eval.run import _recorded, _start_dir, default_out_dir, evaluate, load_config, out_label

ROOT = Path(__file__).resolve().parents[2]


def test_each_documented_eval_line_has_its_own_default_folder(tmp_path):
    runs = f"paths.runs_dir={tmp_path}"
    lines = {
        "quick start": ["model=qwen3_vl_4b", "benchmark=p3i", "data=toy", "split=test"],
        "blank": ["model=qwen3_vl_4b", "blank_frames=true"],
        "threshold": ["model=qwen3_vl_4b", "threshold=0.05"],
        "records": ["model=qwen3_vl_4b", "debug=cpu", "records=/tmp/toy/records.jsonl"],
        "two": ["model=qwen3_vl_4b", "threshold=0.3", "limit=8"],
        "memory": ["model=qwen3_vl_4b", "memory=on"],
    }
    folders = {k: default_out_dir(load_config([runs, *o])) for k, o in lines.items()}
    root = tmp_path / "eval" / "qwen3_vl_4b-untrained"
    assert folders["quick start"] == root / "p3i"
    assert folders["blank"] == root / "p3i@blank_frames-true"
    assert folders["threshold"] == root / "p3i@threshold-0.05"
    assert folders["two"] == root / "p3i@limit-8+threshold-0.3"
    assert folders["memory"] == root / "p3i_memory"
    assert re.fullmatch(r"p3i@[0-9a-f]{12}", folders["records"].name)  # a path: the config's sha256[:12]
    assert len(set(folders.values())) == len(folders)
    sweep = load_config([runs, "model=qwen3_vl_4b", "threshold=0.3"])
    assert out_label(sweep, sweep=True) is None  # a sweep's points sit below one base, by threshold
    assert default_out_dir(sweep, sweep=True) == root / "p3i"


def test_a_default_folder_holding_another_config_gives_way_and_an_explicit_one_refuses(tmp_path):
    runs = f"paths.runs_dir={tmp_path}"
    first = load_config([runs, "data.dir=/data/a"])
    folder = default_out_dir(first)
    _start_dir(folder, _recorded(first))  # what the first evaluation writes first
    other = load_config([runs, "data.dir=/data/b"])  # differs inside a block: no label tells them apart
    moved = default_out_dir(other)
    assert moved.parent == folder.parent and re.fullmatch(r"p3i@[0-9a-f]{12}", moved.name)
    assert default_out_dir(first) == folder
    explicit = load_config([runs, "data.dir=/data/b", f"out_dir={folder}"])
    with pytest.raises(ValueError, match="holds a run with another config .*pick another out_dir"):
        _start_dir(Path(explicit.out_dir), _recorded(explicit))
    assert yaml.safe_load((folder / "config.yaml").read_text())["data"]["dir"] == "/data/a"


@pytest.mark.slow  # two evaluations of the tiny model, the second as a user runs it
def test_the_documented_threshold_line_runs_after_the_default_one(tiny_checkpoint, toy_dir, tmp_path):
    common = [
        f"checkpoint={tiny_checkpoint}",
        f"records={toy_dir / 'records.jsonl'}",
        f"paths.cache_dir={tmp_path / 'cache'}",
        f"paths.runs_dir={tmp_path / 'runs'}",
        "render.max_pixels=4096",
        "max_new_tokens=2",
        "limit=2",
        "timelines=0",
        "view=false",
    ]
    evaluate(load_config(common), echo=False)
    done = subprocess.run(
        [sys.executable, "-m", "eval.run", *common, "threshold=0.05"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    base = default_out_dir(load_config(common))
    point = default_out_dir(load_config([*common, "threshold=0.05"]))
    assert point != base and point.parent == base.parent
    assert f"-> {point}" in done.stdout
    assert yaml.safe_load((base / "config.yaml").read_text())["threshold"] == 0.5
    assert yaml.safe_load((point / "config.yaml").read_text())["threshold"] == 0.05
    assert json.loads(done.stdout.strip().splitlines()[-1]) == json.loads(
        (point / "metrics.json").read_text()
    )
