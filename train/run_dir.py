"""Run directories: what a run was (resolved config, git commit, package versions) and where to resume.

A run directory holds ``config.yaml`` (the resolved config), ``run_info.json`` (git commit and
whether the tree was dirty, package versions, host, start time) written once when the run starts
(a resumed run appends its start to ``resumes.jsonl`` instead), and the Trainer's
``checkpoint-<step>/`` directories. A checkpoint counts as complete once it holds ``COMPLETE``
(written after the Trainer saved model, processor, optimizer, scheduler, RNG and trainer state), so
``resume=auto`` never restarts from a checkpoint a killed job left half-written (the marker and the
listing are ``eval.checkpoints``', which evaluation reads too).

Both training stages stop the same way: :class:`Preempted` after a signal (checkpoint saved, exit
:data:`REQUEUE_EXIT_CODE` for the sbatch script to requeue) and :class:`NonFiniteLoss` after too
many NaN/inf losses in a row.
"""

from __future__ import annotations

import json
import platform
import subprocess
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from eval.checkpoints import complete_checkpoints

#: Exit status of a run that saved a checkpoint on SIGUSR1 / SIGTERM and should be requeued. 75 is
#: the "temporary failure, try again" status of sysexits.h; 124 is left to ``timeout``'s own exit.
REQUEUE_EXIT_CODE = 75


class Preempted(RuntimeError):
    """A signal arrived: a checkpoint was saved (``checkpoint``, None if there was none to save) and
    the entry point exits with ``exit_code`` for the sbatch script to requeue."""

    def __init__(self, checkpoint: Path | None, exit_code: int = REQUEUE_EXIT_CODE):
        super().__init__(f"preempted: saved {checkpoint}; exit {exit_code} to be requeued")
        self.checkpoint = checkpoint
        self.exit_code = exit_code


class NonFiniteLoss(RuntimeError):
    """Too many NaN/inf losses in a row: the run is diverging or the data is broken."""


#: Packages whose versions decide what a run computes.
PACKAGES = (
    "torch",
    "transformers",
    "trl",
    "peft",
    "accelerate",
    "deepspeed",
    "datasets",
    "tokenizers",
    "numpy",
    "hydra-core",
    "wandb",
    "decord",
    "av",
)


def git_commit(repo: str | Path = ".") -> dict[str, Any]:
    """``{"commit": sha or None, "dirty": bool or None}`` of the repo holding ``repo``."""

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def write_run_info(run_dir: str | Path, cfg: DictConfig | dict, repo: str | Path = ".") -> Path:
    """Write ``config.yaml`` and ``run_info.json`` once; on later starts append to ``resumes.jsonl``."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    info_path = run_dir / "run_info.json"
    started = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "host": platform.node()}
    if info_path.exists():
        with (run_dir / "resumes.jsonl").open("a") as fh:
            fh.write(json.dumps({**started, **git_commit(repo)}) + "\n")
        return info_path
    container = OmegaConf.create(cfg) if isinstance(cfg, dict) else cfg
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(container, resolve=True))
    info = {
        **started,
        "git": git_commit(repo),
        "python": platform.python_version(),
        "packages": package_versions(),
    }
    info_path.write_text(json.dumps(info, indent=1, sort_keys=True) + "\n")
    return info_path


def resolve_resume(resume: str | None, run_dir: str | Path) -> str | None:
    """The checkpoint to resume from: ``auto`` -> newest complete one (None if there is none),
    ``none`` / empty -> None, anything else -> that path (which must exist)."""
    if resume in (None, "", "none", "null", "false"):
        return None
    if resume == "auto":
        done = complete_checkpoints(run_dir)
        return str(done[-1]) if done else None
    if not Path(resume).is_dir():
        raise FileNotFoundError(f"train.resume={resume}: no such checkpoint directory")
    return resume
