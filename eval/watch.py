"""Evaluate every complete checkpoint of a training run once, as it appears, and chart it in W&B.

    python -m eval.watch run_dir=runs/sft_4b benchmark=p3i data=mix_p3i data.dir=/data/mix_p3i
    python -m eval.watch run_dir=runs/toy_sft data=toy once=true              # one pass, then exit
    EVAL_MODULE=eval.watch sbatch slurm/eval.sh run_dir=runs/sft_4b benchmark=p3i data=mix_p3i

Every ``poll_s`` seconds the watcher lists the run's complete checkpoints
(``engine.checkpoints.complete_checkpoints``: ``checkpoint-<step>`` dirs holding ``COMPLETE``, so a
checkpoint still being written is never read) and runs ``eval.run.evaluate`` on each one not yet in
``<run_dir>/eval_watch.json`` for this evaluation config with the weights it holds now (the key
``<benchmark>/<checkpoint-N>@<config sha256[:12]>``, :func:`ledger_key`: a watcher with another
threshold or limit keeps its own entries, and evaluates into ``<benchmark>@<sha>/`` when the default
folder holds the other config's evaluation), with ``checkpoint=<that dir>`` and
``step=<its training step>``, into ``<run_dir>/eval/<benchmark>/<checkpoint-N>/`` (or
``<out_dir>/<checkpoint-N>/``). A ``run_dir`` that does not exist yet (the watcher submitted
with the training job, which is still queued) is waited for up to ``run_dir_wait_s`` (default 24 h;
the log says until when; with ``once=true`` none, unless given), then it is an error naming it. A result is recorded (atomically: write, fsync, rename) only after its
evaluation finished, so a killed watcher redoes at most the checkpoint it was on, and that one resumes
from its ``predictions.jsonl``; a restarted watcher evaluates nothing twice. Each entry holds the
sha256 of the weights it evaluated (``engine.checkpoints.fingerprint_dir``; a poll re-reads a file only
when its size or modification time changed): a new run in the same dir (``sft.resume=none``)
writes other weights under the same ``checkpoint-<step>`` names, so they are evaluated again, the old
entry kept in the new one's ``superseded`` list (and ``eval.run`` moves the old evaluation's files to
``superseded/``). A checkpoint that the trainer's ``save_total_limit`` deleted before its
evaluation finished is recorded as ``deleted``. Run one watcher per run dir and benchmark.

``launch=accelerate num_processes=N`` runs each evaluation as ``accelerate launch --num_processes N
-m eval.run`` on this node (its config handed over as a file, :func:`launch_command`): the ranks
split the records and rank 0 scores (``eval.ranks``); the watcher itself stays one process.

W&B: with ``logger_from_run=true`` (default) the evaluations go to the training run's project and
entity (its ``config.yaml``; ``WANDB_MODE`` from the environment wins over the recorded mode), into
the training run's paired eval run (``infra.tracking``: same group, id ``<training id>-eval``, under
``<run_dir>/wandb``), each checkpoint logged against ``train/global_step`` = its step, so every
benchmark metric is one curve beside the training loss. A ``WANDB_RUN_ID`` / ``WANDB_RESUME``
inherited from a training job is dropped, so an evaluation never writes into the training run itself.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from engine.checkpoints import (
    COMPLETE_MARKER,
    CheckpointError,
    checkpoint_step,
    complete_checkpoints,
    fingerprint_dir,
    render_given,
    render_overrides,
    saved_render,
)
from engine.preflight import check_stage
from eval.config import EvalConfig
from eval.preflight import EVAL
from eval.provenance import decides, digest
from infra.entry import refuse, rewrite_argv, run_command
from infra.files import write_text_atomic
from infra.progress import console
from infra.schema import CONF_DIR, bounded, compose, literal, load_literal, store_schema, validate

log = logging.getLogger("eval.watch")
CONF = str(CONF_DIR)
LEDGER = "eval_watch.json"
#: Environment that would point an evaluation's W&B run at the training run.
TRAINING_RUN_ENV = ("WANDB_RUN_ID", "WANDB_RESUME")


@dataclass
class WatchConfig(EvalConfig):
    """``python -m eval.watch``: ``conf/eval.yaml``'s evaluation, applied to each new checkpoint."""

    split: str = "val"
    """The split of ``data`` each checkpoint is evaluated on: checkpoint selection reads the held-out
    ``val``, never ``test`` (a benchmark score reads the benchmark's records: ``records=``)."""
    run_dir: str | None = None
    """The training run dir to watch (``sft.output_dir`` / ``grpo.output_dir``)."""
    poll_s: float = 60.0
    """Seconds between looks for new checkpoints."""
    once: bool = False
    """Evaluate what is there now, then exit (tests, cron)."""
    stop_after_final: bool = True
    """Exit once the run wrote ``final/`` and every complete checkpoint is evaluated."""
    logger_from_run: bool = True
    """Log to the W&B project/entity/tags of ``<run_dir>/config.yaml`` instead of the ``logger`` group."""
    launch: str = "inline"
    """``inline``: each evaluation in this process; ``accelerate``: each one an ``accelerate launch
    --num_processes <num_processes> -m eval.run`` on this node (``eval.ranks``)."""
    num_processes: int = bounded(1, ge=1)
    """Processes (GPUs) of each evaluation with ``launch=accelerate``."""
    run_dir_wait_s: float | None = bounded(None, ge=0)
    """How long to wait for a ``run_dir`` that does not exist yet (a training job still queued), then
    fail naming it; 0 fails at once; null: a day (86400 s), 0 with ``once=true``."""


WATCH_KEYS = {f.name for f in fields(WatchConfig)} - {f.name for f in fields(EvalConfig)} | {"split"}
store_schema("watch", WatchConfig, keys=[f.name for f in fields(WatchConfig) if f.name in WATCH_KEYS])


def read_ledger(run_dir: Path) -> dict[str, dict]:
    """``{"<benchmark>/<checkpoint-N>": record}`` of what was evaluated (empty if nothing yet)."""
    path = run_dir / LEDGER
    return json.loads(path.read_text()) if path.exists() else {}


def record(run_dir: Path, key: str, entry: dict) -> None:
    """Add one entry to the ledger atomically (re-read first, so entries are never lost)."""
    ledger = read_ledger(run_dir) | {key: entry}
    write_text_atomic(run_dir / LEDGER, json.dumps(ledger, indent=1, sort_keys=True) + "\n")  # no temp left


def config_sha256(point: DictConfig) -> str:
    """sha256 of what decides one checkpoint's evaluation but its weights (``eval.provenance``)."""
    return digest(decides(point, None))


def ledger_key(point: DictConfig) -> str:
    """``<benchmark>/<checkpoint-N>@<config sha256[:12]>``: a watcher with another evaluation config
    (threshold, limit, render, ...) keeps entries of its own; the weights are checked per entry."""
    return f"{point.benchmark.name}/{Path(point.checkpoint).name}@{config_sha256(point)[:12]}"


def pending(cfg: DictConfig, run_dir: Path) -> list[Path]:
    """Complete checkpoints of ``run_dir`` not yet in the ledger for this evaluation config with the
    weights they hold now, oldest first."""
    done = read_ledger(run_dir)
    todo = []
    for checkpoint in complete_checkpoints(run_dir):
        key = ledger_key(checkpoint_config(cfg, run_dir, checkpoint))
        entry = done.get(key)
        known = (entry or {}).get("weights")
        if not known or entry.get("status") != "done":  # never evaluated (or recorded no weights)
            todo.append(checkpoint)
            continue
        now = fingerprint_dir(checkpoint, known)
        if now["sha256"] != known["sha256"]:
            todo.append(checkpoint)
        elif now["files"] != known["files"]:  # same bytes, rewritten or copied: no need to re-read
            record(run_dir, key, entry | {"weights": now})
    return todo


def run_logger(cfg: DictConfig, run_dir: Path) -> dict:
    """The logger block for the evaluations: the training run's W&B project when it logged to W&B."""
    own = OmegaConf.to_container(cfg.logger, resolve=True)
    saved = run_dir / "config.yaml"
    if not cfg.logger_from_run or not saved.exists():
        return own
    trained = OmegaConf.to_container(load_literal(saved), resolve=True).get("logger") or {}
    if trained.get("name") != "wandb":
        return own
    mode = os.environ.get("WANDB_MODE") or trained.get("mode") or own["mode"]
    return (
        own | {k: trained[k] for k in ("name", "project", "entity", "tags") if k in trained} | {"mode": mode}
    )


def checkpoint_config(cfg: DictConfig, run_dir: Path, checkpoint: Path) -> DictConfig:
    """The ``eval.run`` config of one checkpoint: the watcher's config less its own keys."""
    plain = OmegaConf.to_container(cfg, resolve=True)
    for key in WATCH_KEYS:
        plain.pop(key)
    plain |= {"checkpoint": str(checkpoint), "step": checkpoint_step(checkpoint)}
    plain |= {"out_dir": str(_out_dir(cfg, run_dir, checkpoint, plain)), "logger": run_logger(cfg, run_dir)}
    return validate(OmegaConf.create(literal(plain)), EvalConfig)  # resolved once: read as text now


def _out_dir(cfg: DictConfig, run_dir: Path, checkpoint: Path, plain: dict) -> Path:
    """``<out_dir or run_dir/eval/<benchmark>>/<checkpoint-N>``; when that folder holds an evaluation
    of another config (another watcher's), ``<run_dir>/eval/<benchmark>@<config sha256[:12]>/...``."""
    if cfg.out_dir:
        return Path(cfg.out_dir) / checkpoint.name
    folder = run_dir / "eval" / cfg.benchmark.name / checkpoint.name
    saved = folder / "config.yaml"
    if not saved.is_file():
        return folder
    theirs = OmegaConf.to_container(load_literal(saved), resolve=True)
    if decides(theirs, None) == decides(validate(OmegaConf.create(literal(plain)), EvalConfig), None):
        return folder
    sha = digest({k: v for k, v in decides(plain, None).items() if k != "checkpoint"})[:12]
    return run_dir / "eval" / f"{cfg.benchmark.name}@{sha}" / checkpoint.name


def _run_evaluate(cfg: DictConfig) -> dict:
    from eval.run import evaluate

    return evaluate(cfg)


def launch_command(point: DictConfig, config_dir: Path, num_processes: int) -> list[str]:
    """The ``accelerate launch`` of one checkpoint's evaluation: its whole config saved as
    ``<config_dir>/eval.yaml`` (with the Hydra settings of ``conf/eval.yaml``), read back by
    ``eval.run --config-path <config_dir> --config-name eval``."""
    plain = OmegaConf.to_container(point, resolve=True)
    hydra = {"output_subdir": None, "run": {"dir": "."}, "job": {"chdir": False}}
    quiet = [{"override hydra/job_logging": "none"}, {"override hydra/hydra_logging": "none"}]
    OmegaConf.save(
        OmegaConf.create({"defaults": ["_self_", *quiet], **literal(plain), "hydra": hydra}),
        config_dir / "eval.yaml",
    )
    with socket.socket() as sock:  # a port of its own: two watchers on one node must not meet
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    accelerate = shutil.which("accelerate", path=str(Path(sys.executable).parent)) or "accelerate"
    return [
        accelerate,
        "launch",
        "--config_file",
        str(Path(CONF) / "accelerate" / "ddp.yaml"),
        "--num_processes",
        str(num_processes),
        "--main_process_port",
        str(port),
        "-m",
        "eval.run",
        "--config-path",
        str(config_dir),
        "--config-name",
        "eval",
    ]


def launch_evaluate(point: DictConfig, num_processes: int) -> dict:
    """One checkpoint's evaluation as a multi-process launch (:func:`launch_command`); its metrics."""
    with tempfile.TemporaryDirectory(prefix="eval-watch-") as tmp:
        cmd = launch_command(point, Path(tmp), num_processes)
        done = subprocess.run(cmd, check=False)
    if done.returncode != 0:
        raise RuntimeError(
            f"{num_processes}-process evaluation of {point.checkpoint} exited {done.returncode}"
        )
    return json.loads((Path(point.out_dir) / "metrics.json").read_text())


def evaluate_checkpoint(
    cfg: DictConfig, run_dir: Path, checkpoint: Path, evaluate: Callable[[DictConfig], dict]
) -> dict:
    """Evaluate one checkpoint and record it; returns the ledger entry."""
    point = checkpoint_config(cfg, run_dir, checkpoint)
    key = ledger_key(point)
    before = read_ledger(run_dir).get(key)
    weights = fingerprint_dir(checkpoint, (before or {}).get("weights"))
    entry = {"checkpoint": str(checkpoint), "step": point.step, "out_dir": point.out_dir, "weights": weights}
    entry["config_sha256"] = config_sha256(point)
    if before is not None:  # an evaluation of other weights under this name (a retrain): kept
        entry["superseded"] = [
            {k: v for k, v in before.items() if k != "superseded"},
            *before.get("superseded", []),
        ]
    log.info("evaluating %s (step %d) on %s", checkpoint, point.step, cfg.benchmark.name)
    t0 = time.time()
    try:
        entry["metrics"] = evaluate(point)
        entry["status"] = "done"
    except Exception:
        if (checkpoint / COMPLETE_MARKER).exists():
            raise
        log.warning("%s was deleted before its evaluation finished; skipping it", checkpoint)
        entry["status"] = "deleted"
    entry["seconds"] = round(time.time() - t0, 1)
    entry["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    record(run_dir, key, entry)
    return entry


def wait_for_run_dir(run_dir: Path, wait_s: float, poll_s: float) -> None:
    """Return once ``run_dir`` exists; wait up to ``wait_s`` seconds for it (logged with the deadline),
    then raise ``FileNotFoundError`` naming it."""
    if run_dir.is_dir():
        return
    deadline = time.time() + wait_s
    if wait_s > 0:
        log.info(
            "run_dir=%s does not exist yet: waiting until %s (run_dir_wait_s=%g) for the training run to make it",
            run_dir,
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(deadline)),
            wait_s,
        )
    while not run_dir.is_dir():
        left = deadline - time.time()
        if left <= 0:
            raise FileNotFoundError(
                f"run_dir={run_dir}: no such folder after waiting {wait_s:g} s (run_dir_wait_s; "
                "give the training run dir to watch, or check that its job started)"
            )
        time.sleep(min(poll_s, left))
    log.info("run_dir=%s appeared", run_dir)


def watch(
    cfg: DictConfig,
    evaluate: Callable[[DictConfig], dict] = _run_evaluate,
    checked: bool = False,
    render_from_run: bool = False,
) -> list[str]:
    """Poll ``cfg.run_dir`` and evaluate each new complete checkpoint once; returns the ledger keys
    evaluated by this call. Stops after one pass (``once``) or when the run finished (``final/``).
    ``checked``: the command already ran :func:`_check_start` on ``cfg``; ``render_from_run``: once
    the run dir exists, evaluate at the render block it trains with (:func:`with_run_render`)."""
    if not cfg.run_dir:
        raise ValueError("give run_dir=<training run dir>")
    if not checked:
        _check_start(cfg)
    run_dir = Path(cfg.run_dir)
    wait_for_run_dir(run_dir, run_dir_wait(cfg), cfg.poll_s)
    if render_from_run:
        cfg = with_run_render(cfg, run_dir)
    for key in TRAINING_RUN_ENV:
        os.environ.pop(key, None)
    if cfg.launch not in ("inline", "accelerate"):
        raise ValueError(f"launch={cfg.launch!r}: give inline or accelerate")
    if cfg.launch == "accelerate" and evaluate is _run_evaluate:
        evaluate = functools.partial(launch_evaluate, num_processes=cfg.num_processes)
    evaluated: list[str] = []
    while True:
        todo = pending(cfg, run_dir)
        for checkpoint in todo:
            if not (checkpoint / COMPLETE_MARKER).exists():  # rotated away since the listing
                continue
            evaluate_checkpoint(cfg, run_dir, checkpoint, evaluate)
            evaluated.append(ledger_key(checkpoint_config(cfg, run_dir, checkpoint)))
        if todo:
            continue  # new checkpoints may have landed while evaluating
        if cfg.once or (cfg.stop_after_final and (run_dir / "final").exists()):
            return evaluated
        time.sleep(cfg.poll_s)


def load_config(overrides: list[str] | None = None) -> DictConfig:
    """``conf/watch.yaml`` composed with command-line style overrides and validated (tests)."""
    return compose("watch", render_overrides(overrides or [], key="run_dir"), WatchConfig)


def with_run_render(cfg: DictConfig, run_dir: Path) -> DictConfig:
    """``cfg`` with the render block ``run_dir`` trains with (``engine.checkpoints.saved_render``), for
    a run dir that did not exist when the command was composed; ``cfg`` itself when it has none."""
    saved = saved_render(run_dir)
    if not saved:
        return cfg
    cfg = cfg.copy()
    for key, value in saved.items():
        cfg.render[key] = value
    log.info("run_dir=%s: evaluating at the render block it trains with %s", run_dir, saved)
    return cfg


def _job(cfg: DictConfig, checked: bool, render_from_run: bool) -> None:
    """The watch and its one JSON line; a mistake found on the way: one line, exit 2."""
    console()
    try:
        evaluated = watch(cfg, checked=checked, render_from_run=render_from_run)
    except (ValueError, FileNotFoundError) as exc:  # CheckpointError, PreflightError too
        refuse("eval.watch", str(exc))
    print(json.dumps({"run_dir": cfg.run_dir, "evaluated": evaluated}))


def run_dir_wait(cfg: DictConfig) -> float:
    """Seconds to wait for a missing run dir: ``run_dir_wait_s``, else a day, or none under ``once``."""
    if cfg.run_dir_wait_s is not None:
        return cfg.run_dir_wait_s
    return 0.0 if cfg.once else 86400.0


def _check_start(cfg: DictConfig) -> None:
    """What ``watch`` refuses at once, before waiting for the run dir: the pre-flight
    (``engine.preflight``: the split is one the data set has), a missing run dir under ``once=true``."""
    check_stage(EVAL, cfg)
    if cfg.once and cfg.run_dir_wait_s is None and cfg.run_dir and not Path(cfg.run_dir).is_dir():
        raise FileNotFoundError(
            f"run_dir={cfg.run_dir} does not exist (once=true evaluates what is there now)"
        )


def main() -> None:
    """The command line, composed and checked once (``infra.entry.run_command``). A run dir that
    exists gives its render block to the composition (``render_overrides``); one that does not yet
    is waited for by the watch, which then takes its render block (:func:`with_run_render`)."""
    rewrite_argv("eval.watch", functools.partial(render_overrides, key="run_dir"), CheckpointError)
    render_from_run = not render_given(sys.argv[1:])

    def command(cfg: DictConfig, _answer: None) -> None:
        _job(cfg, checked=True, render_from_run=render_from_run)

    @hydra.main(config_path=CONF, config_name="watch", version_base="1.3")
    def each_point(cfg: DictConfig) -> None:  # a Hydra flag (-m, ...): each point validated, checked
        _job(validate(cfg, WatchConfig), checked=False, render_from_run=render_from_run)

    run_command("eval.watch", "watch", WatchConfig, command, each_point, check=_check_start)


if __name__ == "__main__":
    main()
