"""Shared fixtures: the tiny Qwen3-VL (built once per session) and a small toy data set; a free
TCP port for the tests that start process groups, and the lock that runs them alone under parallel
workers."""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if os.environ.get("PYTEST_XDIST_WORKER"):
    # ``make test`` runs the suite in parallel workers (pytest-xdist), one per core: one thread each,
    # here and in the processes a test starts, so the workers do not crowd each other's cores
    os.environ["OMP_NUM_THREADS"] = "1"

ROOT = Path(__file__).resolve().parents[1]
#: The local servers and release-file trees the evaluation and benchmark tests share.
pytest_plugins = ["tests.servers"]


@pytest.fixture(autouse=True)
def ranks_run_alone(request, tmp_path_factory):
    """Under parallel workers, a test marked ``ranks`` holds the session's lock alone, every other
    test shares it: ranks that wait on each other (DeepSpeed's shared-memory collectives poll) slow
    to a crawl when a third process takes one of their cores.

    A gate in front of the lock gives the lone test precedence: a test takes the gate before the
    lock, and only the lone one keeps it while it runs. Without it a worker waiting for the lock
    alone waited for a moment when no other test held it, which the other worker, going from test
    to test, rarely left (setups of 38-96 s, one worker idle all that time)."""
    with ranks_lock(tmp_path_factory, alone=request.node.get_closest_marker("ranks") is not None):
        yield


@contextlib.contextmanager
def ranks_lock(tmp_path_factory, alone: bool = False):
    """The session's ranks lock (see ``ranks_run_alone``): alone, or shared with every other test.
    A module fixture of a ``ranks`` file (set up before the test takes the lock alone) holds it
    shared for its one-process work, which then runs beside other tests, not while a worker waits.
    No lock without parallel workers."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        yield
        return
    base = tmp_path_factory.getbasetemp().parent
    with open(base / "ranks.gate", "a") as gate, open(base / "ranks.lock", "a") as lock:
        fcntl.flock(gate, fcntl.LOCK_EX)
        fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        if not alone:
            fcntl.flock(gate, fcntl.LOCK_UN)
        yield


def free_port() -> int:
    """A TCP port nothing listens on now, for a process group's rendezvous (``MASTER_PORT``,
    ``--main_process_port``; accelerate's default, 29500, may be taken by another run on the machine)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_module(
    module: str, *args: str, cwd: Path = ROOT, timeout: float = 300
) -> subprocess.CompletedProcess:
    """``python -m <module> <args>`` as a user runs it: a fresh process, the repo on PYTHONPATH, offline."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


#: Its sitecustomize.py: under FULL_DISK_DIR, a disk that fills up, or a read-only folder.
FULL_DISK = ROOT / "tests" / "full_disk"


def full_disk_run(
    module: str, args: list[str], folder: Path, budget: int | None, errno_name: str = "ENOSPC"
) -> subprocess.CompletedProcess:
    """``python -m <module> ARGS`` from the repo root; with ``budget``, writes under ``folder`` find
    no space once ``budget`` bytes were written (``errno_name="EROFS"``: every change there is refused
    at once, ``budget`` unused)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if budget is not None:
        env |= {"PYTHONPATH": f"{FULL_DISK}:{ROOT}", "FULL_DISK_DIR": str(folder)}
        env |= {"FULL_DISK_BYTES": str(budget), "FULL_DISK_ERRNO": errno_name}
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )


def _bind_mounts(folder: Path) -> bool:
    """Whether this system lets an unprivileged mount namespace bind ``folder`` read-only."""
    line = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0"'
    try:
        done = subprocess.run(
            ["unshare", "-rm", "sh", "-c", line, str(folder)], capture_output=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def read_only_run(module: str, args: list[str], folder: Path) -> subprocess.CompletedProcess:
    """``python -m <module> ARGS`` with ``folder`` read-only: a read-only bind mount of it in the
    process's own mount namespace where the system allows one (root ignores permission bits, so a
    chmod would not do), else every change there refused with EROFS by ``tests/full_disk``'s hook."""
    if not _bind_mounts(folder):
        return full_disk_run(module, args, folder, 0, "EROFS")
    line = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = ["unshare", "-rm", "sh", "-c", line, str(folder), sys.executable, "-m", module, *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)


def tiny_model_config() -> dict:
    from engine.config import model_preset

    return model_preset("tiny")


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory) -> Path:
    from engine.model import build_tiny_checkpoint

    return build_tiny_checkpoint(tiny_model_config(), tmp_path_factory.mktemp("tiny") / "ckpt")


@pytest.fixture(scope="session")
def tiny_model_and_processor(tiny_checkpoint):
    from engine.model import load_model_and_processor

    cfg = tiny_model_config() | {"path": str(tiny_checkpoint)}
    model, processor = load_model_and_processor(cfg)
    model.eval()
    return model, processor


@pytest.fixture(scope="session")
def toy_dir(tmp_path_factory) -> Path:
    from data_builders.record_io import write_jsonl
    from data_builders.synthetic.toy import generate_toy

    out = tmp_path_factory.mktemp("toy")
    write_jsonl(out / "records.jsonl", generate_toy(out, n=8, seed=0))
    return out


def read_offline_run(path: Path) -> dict:
    """What an offline W&B run file (``run-*.wandb``) holds: ``summary``, ``config``, ``history`` (one
    dict per logged row), ``run`` (id, name, group, job type) and ``ended`` (its exit record seen). The
    file is a 7-byte header, then a log of 32 KiB blocks of records (crc32, length, type =
    full/first/middle/last), each a protobuf ``Record``."""
    import json
    import struct

    from wandb.proto import wandb_internal_pb2 as pb

    data, block, pos, buf, records = path.read_bytes(), 32768, 7, b"", []
    while pos + 7 <= len(data):
        left = block - pos % block
        _, n, kind = struct.unpack("<IHB", data[pos : pos + 7]) if left >= 7 else (0, 0, 0)
        if n == 0 and kind == 0:
            pos += left
            continue
        frag, pos = data[pos + 7 : pos + 7 + n], pos + 7 + n
        if len(frag) < n:  # the writer is still writing this record: read what is whole
            break
        buf = frag if kind in (1, 2) else buf + frag
        if kind in (1, 4):
            records.append(buf)
    out = {"summary": {}, "config": {}, "history": [], "run": {}, "ended": False}
    for raw in records:
        rec = pb.Record()
        rec.ParseFromString(raw)
        kind = rec.WhichOneof("record_type")
        out["ended"] |= kind == "exit"
        if kind == "summary":
            out["summary"] |= {
                i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in rec.summary.update
            }
        elif kind == "run":
            out["config"] |= {i.key: json.loads(i.value_json) for i in rec.run.config.update}
            out["run"] = {
                "id": rec.run.run_id,
                "name": rec.run.display_name,
                "group": rec.run.run_group,
                "job_type": rec.run.job_type,
            }
        elif kind == "config":
            out["config"] |= {i.key: json.loads(i.value_json) for i in rec.config.update}
        elif kind == "history":
            out["history"].append(
                {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in rec.history.item}
            )
    return out


def wait_for_offline_run(run_dir: Path, timeout: float = 60.0) -> dict:
    """:func:`read_offline_run` of a run folder once its writer (a separate process) recorded the exit."""
    import time

    from google.protobuf.message import DecodeError

    deadline = time.time() + timeout
    while True:
        files = sorted(run_dir.glob("run-*.wandb"))
        try:
            found = read_offline_run(files[-1]) if files else None
        except DecodeError:  # a record caught part way through its write: read again
            if time.time() > deadline:
                raise
            found = None
        if (found and found["ended"]) or time.time() > deadline:
            assert found is not None, f"no run file in {run_dir}"
            return found
        time.sleep(0.2)


@pytest.fixture
def offline_run():
    """``offline_run(run_folder) -> dict``: :func:`wait_for_offline_run` (what an offline W&B run logged)."""
    return wait_for_offline_run


#: The 11 tensors of the tiny model's second language layer.
TINY_LAYER = "model.language_model.layers.1."


def drop_tiny_tensors(ckpt: Path, n: int = 11) -> list[str]:
    """Remove ``n`` tensors (the whole second language layer) from a tiny checkpoint's
    ``model.safetensors``; returns their names, sorted."""
    from safetensors.torch import load_file, save_file

    weights = load_file(ckpt / "model.safetensors")
    dropped = sorted(k for k in weights if k.startswith(TINY_LAYER))[:n]
    assert len(dropped) == n
    for name in dropped:
        del weights[name]
    save_file(weights, ckpt / "model.safetensors", metadata={"format": "pt"})
    return dropped


@pytest.fixture
def drop_tensors():
    """``drop_tensors(checkpoint_dir, n=11) -> names``: :func:`drop_tiny_tensors`."""
    return drop_tiny_tensors


def by_checkpoint(keys):
    """``eval.watch`` ledger keys (a list, or a ledger dict) without their ``@<config sha256>`` part:
    ``p3i/checkpoint-2``. One config per test, so the names stay unique."""
    if isinstance(keys, dict):
        return {k.split("@")[0]: v for k, v in keys.items()}
    return [k.split("@")[0] for k in keys]


def eval_overrides(checkpoint, records, tmp, *extra: str) -> list[str]:
    """``eval.run`` overrides of a quick tiny-model evaluation: its caches under ``tmp``, small frames."""
    return [
        f"checkpoint={checkpoint}",
        f"records={records}",
        f"paths.cache_dir={tmp / 'cache'}",
        f"paths.runs_dir={tmp / 'runs'}",
        "render.max_pixels=4096",
        "max_new_tokens=4",
        *extra,
    ]
