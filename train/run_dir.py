"""Run directories: what a run was (resolved config, git commit, package versions) and where to resume.

A run directory holds ``config.yaml`` (the resolved config), ``run_info.json`` (git commit and
whether the tree was dirty, package versions, host, start time) written once when the run starts
(a resumed run appends its start to ``resumes.jsonl`` instead), and the Trainer's
``checkpoint-<step>/`` directories. A checkpoint counts as complete once it holds ``COMPLETE``
(written after the Trainer saved model, processor, optimizer, scheduler, RNG and trainer state), so
``resume=auto`` never restarts from a checkpoint a killed job left half-written (the marker and the
listing are ``engine.checkpoints``', which evaluation reads too).

What stops a run (signals, the time budget, non-finite losses) is ``infra.run_control``'s; what
both training stages do with a run dir is here:

- :func:`rotate_checkpoints` keeps the newest ``keep`` complete checkpoints and never removes the
  last complete one (a checkpoint is rotated away only after a newer one is marked complete).
- after a ``NonFiniteLoss`` stop, :func:`retire_nonfinite` takes the completion
  marker off every newest checkpoint whose weights are not finite, so ``resume=auto`` restarts from
  the last healthy one.
- :func:`resolve_resume` refuses an unexpected fresh start: a run dir holding checkpoints of which
  none is complete, or a finished run (``final/``), is an error unless ``resume=none`` says so.
- :func:`set_aside_previous_run`: a fresh start (``resume=none``) in a run dir that holds an earlier
  run's checkpoints moves them, ``final/`` and ``best/`` into ``superseded/<time>/`` first, so no old
  ``COMPLETE`` marker stands beside the new run's files (a watcher or ``resume=auto`` would take an
  old run's checkpoint for the new run's).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from engine.checkpoints import COMPLETE_MARKER, complete_checkpoints, named_step
from infra.ranks import Ranks, end_group

log = logging.getLogger(__name__)
#: Marker left in place of ``COMPLETE`` on a checkpoint whose weights are not finite.
NONFINITE_MARKER = "NONFINITE"


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (a full disk, mostly): names the folder and the free space."""

    def __init__(self, folder: str | Path, cause: BaseException):
        folder = Path(folder)
        try:
            free = (
                f"{shutil.disk_usage(folder if folder.exists() else folder.parent).free / 2**30:.1f} GiB free"
            )
        except OSError:
            free = "free space unknown"
        super().__init__(f"cannot write checkpoint {folder} ({free}; is the disk full?): {cause}")


#: Messages of the errors torch and the OS raise when a write runs out of space.
_WRITE_FAILURES = ("unexpected pos", "PytorchStreamWriter failed", "No space left on device", "Disk quota")


def leave_launch(code: int = 0) -> None:
    """End a training stage's process: the process group destroyed; in a launch of several ranks the
    process then exits at once (``os._exit``), its streams and logs flushed, without interpreter
    teardown. A 2-rank GRPO job on CPU ended twice with one rank killed by SIGABRT after its work
    was done ("terminate called without an active exception": a native thread still joinable when
    the interpreter's teardown destroyed it, with the process group already destroyed the second
    time) and the other rank's launcher waiting five minutes on its exit barrier. Every file a stage
    writes is closed and its tracker finished before this is called. One process alone returns
    (``code`` 0) or exits with ``code`` as usual."""
    end_group()
    if Ranks.from_env().world > 1:
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    if code:
        sys.exit(code)


def is_write_failure(exc: BaseException) -> bool:
    """Whether an exception raised while training is a failed file write (a full disk)."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return any(m in str(exc) for m in _WRITE_FAILURES)


def checkpoint_dirs(run_dir: str | Path) -> list[Path]:
    """Every ``checkpoint-<step>`` dir of a run, complete or not, oldest first."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return []
    found = [(named_step(p), p) for p in run_dir.iterdir() if named_step(p) is not None]
    return [p for _, p in sorted(found) if p.is_dir()]


#: What a run leaves in its run dir besides its config and logs: set aside whole by a fresh start.
RUN_OUTPUTS = ("final", "best", "progress.json")


def set_aside_previous_run(run_dir: str | Path, keep: str | Path | None = None) -> Path | None:
    """Before a fresh start in ``run_dir``: move an earlier run's ``checkpoint-<step>`` dirs and
    :data:`RUN_OUTPUTS` into ``<run_dir>/superseded/<UTC time>/`` (nothing is deleted); returns that
    folder, or None when there was nothing to move. ``keep`` (the start checkpoint, when it lies in
    ``run_dir``) stays where it is."""
    run_dir = Path(run_dir)
    keep_at = Path(keep).resolve() if keep else None
    found = [*checkpoint_dirs(run_dir), *(run_dir / n for n in RUN_OUTPUTS if (run_dir / n).exists())]
    found = [p for p in found if keep_at is None or not keep_at.is_relative_to(p.resolve())]
    if not found:
        return None
    dest = run_dir / "superseded" / time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    while dest.exists():
        dest = dest.with_name(dest.name + "+")
    dest.mkdir(parents=True)
    for path in found:
        path.rename(dest / path.name)
    log.warning(
        "%s: a fresh start (resume=none) in a run dir holding an earlier run: its %s moved to %s",
        run_dir,
        ", ".join(p.name for p in found),
        dest,
    )
    return dest


def rotate_checkpoints(run_dir: str | Path, keep: int | None) -> list[Path]:
    """Delete complete checkpoints beyond the newest ``keep`` (None: keep all), and incomplete ones
    older than the oldest kept; returns what was deleted. Call it only after the newest checkpoint is
    marked complete, so the last complete checkpoint is never the one removed."""
    if keep is None:
        return []
    if keep < 1:
        raise ValueError(f"save_total_limit must be at least 1 (or null), got {keep}")
    complete = complete_checkpoints(run_dir)
    if not complete:
        return []
    kept = complete[-keep:]
    oldest_kept = int(kept[0].name.split("-")[1])
    gone = [p for p in checkpoint_dirs(run_dir) if p not in kept and int(p.name.split("-")[1]) < oldest_kept]
    for p in gone:
        shutil.rmtree(p)
    return gone


def _weights_finite(checkpoint: Path) -> bool:
    from safetensors.torch import load_file

    files = sorted(checkpoint.glob("*.safetensors"))
    return all(
        bool(t.isfinite().all()) for f in files for t in load_file(f).values() if t.is_floating_point()
    )


def retire_nonfinite(run_dir: str | Path) -> list[Path]:
    """After a non-finite stop: newest first, the complete checkpoints whose weights hold NaN/inf
    lose their ``COMPLETE`` marker (replaced by ``NONFINITE``), until a healthy one; returns them."""
    retired = []
    for ckpt in reversed(complete_checkpoints(run_dir)):
        if _weights_finite(ckpt):
            break
        (ckpt / COMPLETE_MARKER).rename(ckpt / NONFINITE_MARKER)
        retired.append(ckpt)
        log.warning("%s holds non-finite weights: no longer marked complete", ckpt)
    return retired


#: Packages whose versions decide what a run computes.
PACKAGES = (
    "torch",
    "transformers",
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


PROGRESS_FILE = "progress.json"


def write_progress(run_dir: str | Path, done: int, planned: int, stopped_by: str | None) -> dict:
    """``<run_dir>/progress.json``: steps (SFT) or updates (GRPO) done of those planned, and what
    stopped the run (``max_steps``, ``time_budget``, ``signal``); a budget that cut a run short is
    logged as a warning. The demo and the experiments report it."""
    record = {"done": int(done), "planned": int(planned), "stopped_by": stopped_by}
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    (Path(run_dir) / PROGRESS_FILE).write_text(json.dumps(record) + "\n")
    if stopped_by == "time_budget" and done < planned:
        log.warning("the time budget stopped %s after %d of %d steps", run_dir, done, planned)
    return record


def read_progress(run_dir: str | Path) -> dict | None:
    path = Path(run_dir) / PROGRESS_FILE
    return json.loads(path.read_text()) if path.exists() else None


class UnexpectedFreshStart(RuntimeError):
    """``resume=auto`` found a run dir it cannot resume and would silently start from step 0."""


def resolve_resume(resume: str | None, run_dir: str | Path) -> str | None:
    """The checkpoint to resume from: ``auto`` -> the newest complete one, or None for a new run dir;
    ``none`` / empty -> None (start from scratch, as asked); anything else -> that path (which must
    exist). ``auto`` on a run dir with checkpoints but none complete, or with a finished run
    (``final/``) and no checkpoint, raises :class:`UnexpectedFreshStart` instead of starting over."""
    if resume in (None, "", "none", "null", "false"):
        return None
    if resume == "auto":
        done = complete_checkpoints(run_dir)
        if done:
            return str(done[-1])
        found = checkpoint_dirs(run_dir)
        if found:
            raise UnexpectedFreshStart(
                f"{run_dir} holds {len(found)} checkpoint dir(s) ({found[-1].name} the newest) but none is "
                "complete (killed while saving, or retired after a non-finite stop): nothing to resume. "
                "Pass resume=none to start from scratch in it, or use another run dir."
            )
        if (Path(run_dir) / "final").exists():
            raise UnexpectedFreshStart(
                f"{run_dir} holds a finished run (final/) and no checkpoint to resume: pass resume=none "
                "to train again from scratch in it, or use another run dir."
            )
        return None
    if not Path(resume).is_dir():
        raise FileNotFoundError(f"resume={resume}: no such checkpoint directory")
    return resume
