"""``logger=wandb`` that would send with no API key is refused before anything loads, in one line
saying how to fix it; offline mode, a key in the environment or in ``.netrc`` pass; no key is shown."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from infra.tracking import check_logger

ROOT = Path(__file__).resolve().parents[2]
WANDB = OmegaConf.create({"name": "wandb", "mode": "online"})


@pytest.fixture
def no_key(tmp_path, monkeypatch):
    for var in ("WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE", "WANDB_MODE", "WANDB_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    return tmp_path


def test_a_wandb_logger_without_a_key_is_refused_and_with_one_passes(no_key, monkeypatch):
    with pytest.raises(ValueError, match="no W&B API key: export WANDB_API_KEY=.* WANDB_MODE=offline"):
        check_logger(WANDB)
    check_logger(OmegaConf.create({"name": "none", "mode": "online"}))
    monkeypatch.setenv("WANDB_MODE", "offline")
    check_logger(WANDB)
    monkeypatch.delenv("WANDB_MODE")
    (no_key / "netrc").write_text("machine api.wandb.ai\n  login user\n  password sentinel-key-123\n")
    check_logger(WANDB)
    (no_key / "netrc").write_text("machine other.host\n  login user\n  password sentinel-key-123\n")
    with pytest.raises(ValueError) as refused:
        check_logger(WANDB)
    assert "sentinel" not in str(refused.value)
    monkeypatch.setenv("WANDB_API_KEY", "sentinel-key-123")
    check_logger(WANDB)


def test_eval_run_with_wandb_and_no_key_stops_before_loading_in_one_line(no_key, toy_dir):
    env = {k: v for k, v in os.environ.items()} | {"PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "eval.run", "logger=wandb", f"records={toy_dir / 'records.jsonl'}"]
    cmd += [f"paths.runs_dir={no_key / 'runs'}", f"paths.cache_dir={no_key / 'cache'}", "limit=1"]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("eval.run: logger=wandb (mode online) has no W&B API key: export WANDB_API_KEY=")
    assert not (no_key / "cache").exists() and not (no_key / "runs").exists()  # nothing built or written
