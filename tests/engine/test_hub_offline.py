"""A hub id with no way to the hub (offline mode, or an endpoint that does not answer) and no copy in
the cache: ``eval.model`` and ``eval.run`` end in seconds with one line naming the id and
``model.path=DIR``, instead of retrying the hub for minutes or a 60-line traceback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HUB_ID = "Qwen/Qwen3-VL-4B-Instruct"


def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(args: list[str], tmp: Path, **env: str) -> subprocess.CompletedProcess:
    """The command as a user runs it; the timeout is far below the minutes of retries it took."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_OFFLINE"))}
    env = {**base, "PYTHONPATH": str(ROOT), "HF_HOME": str(tmp / "hf"), **env}
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=170
    )


@pytest.mark.parametrize("offline", [True, False])
def test_a_hub_id_without_the_hub_is_refused_in_seconds(tmp_path, monkeypatch, offline):
    """The check itself, timed apart from the interpreter's start (a loaded 2-core machine takes
    a minute to import torch): at most the 5 s the hub gets to answer."""
    from huggingface_hub import constants

    from engine.model import HubUnreachable, hub_options

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", offline)
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    t0 = time.monotonic()
    with pytest.raises(HubUnreachable, match=f"model.path={HUB_ID} .* pass model.path=DIR"):
        hub_options(HUB_ID)
    assert time.monotonic() - t0 < 10
    snapshot = tmp_path / "hub" / "models--Qwen--Qwen3-VL-4B-Instruct" / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("0" * 40)
    assert hub_options(HUB_ID) == {"local_files_only": True}  # a cached copy loads without the hub


@pytest.mark.parametrize("way", ["offline", "no answer"])
def test_eval_model_on_a_hub_id_without_the_hub_says_so_in_one_line(tmp_path, way):
    env = (
        {"HF_HUB_OFFLINE": "1"} if way == "offline" else {"HF_ENDPOINT": f"http://127.0.0.1:{closed_port()}"}
    )
    done = run(["eval.model", "model=qwen3_vl_4b"], tmp_path, **env)
    assert done.returncode == 2, done.stderr[-2000:]
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"eval.model: model.path={HUB_ID} is no local folder")
    assert "pass model.path=DIR" in line
    assert (
        "offline mode (HF_HUB_OFFLINE=1)" if way == "offline" else "no network: http://127.0.0.1:"
    ) in line


def test_eval_run_on_a_hub_id_without_the_hub_says_so_in_one_line(tmp_path, toy_dir):
    args = ["eval.run", "model=qwen3_vl_4b", f"records={toy_dir / 'records.jsonl'}"]
    args += [f"paths.runs_dir={tmp_path / 'runs'}", "limit=1"]
    done = run(args, tmp_path, HF_ENDPOINT=f"http://127.0.0.1:{closed_port()}")
    assert done.returncode == 2, done.stderr[-2000:]
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"eval.run: model.path={HUB_ID} is no local folder") and "model.path=DIR" in line
