"""Experiment tracking: a small logger interface with ``none`` and ``wandb`` back ends, and the
pairing of a training run with its evaluations.

    logger = make_logger(cfg.logger, run_name="sft_4b", config=plain_cfg, run_dir=run_dir, job_type="train")
    logger.log_metrics({"loss": 0.3}, step=500, prefix="grpo")       # x axis: train/global_step
    logger.log_table("eval/p3i/per_task", columns, rows)       # a Path cell is logged as an image
    logger.log_images("eval/p3i/timeline", [png, ...], captions)
    logger.finish()

One W&B run per training run, its evaluations beside it:

- Every metric is logged against ``train/global_step`` (the Trainer's own step metric, declared as
  the step metric of everything), so the loss and the eval curves share one x axis.
- A training run writes ``<run_dir>/wandb.json`` (its id, name, group, project) when its W&B run
  starts (:func:`remember_run`); its group is the run name, or the sweep's name for a sweep point.
- An evaluation of a checkpoint of that run (``eval.run checkpoint=<run_dir>/checkpoint-N``,
  ``eval.watch run_dir=<run_dir>``) logs into one *paired* eval run: id ``<training id>-eval``, the
  same group, name ``<training name>-eval``, resumed at every checkpoint and written under the
  training run's own W&B folder, so each eval metric draws one curve over the checkpoints' steps
  next to the loss, and ``wandb sync <run_dir>/wandb`` uploads both. W&B does not let a second
  process write into a run that is still being written, hence the pair rather than one run.
- ``logger=none`` needs no W&B at all (imported only by the ``wandb`` back end). The API key is read
  by W&B from ``WANDB_API_KEY``; it is never in the config and never logged.

The timelines a run logs as images are drawn by ``eval.timelines``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infra.files import write_text_atomic
from infra.registry import Registry

STEP_KEY = "train/global_step"
RUN_FILE = "wandb.json"
#: The logger back ends (config ``logger.name``): name -> class (``infra.registry``).
LOGGERS = Registry("logger", {"none": "infra.tracking:EvalLogger", "wandb": "infra.tracking:WandbLogger"})


def flatten(metrics: dict[str, Any], prefix: str) -> dict[str, float]:
    """Numeric leaves of a nested metrics dict, keyed ``prefix/a/b``."""
    out: dict[str, float] = {}
    for k, v in metrics.items():
        key = f"{prefix}/{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[key] = float(v)
    return out


def remember_run(run_dir: str | Path, run: Any) -> Path:
    """Write ``<run_dir>/wandb.json``: the identity of a training run's W&B run, for its evaluations."""
    record = {
        "id": run.id,
        "name": run.name,
        "group": run.group or run.name,
        "project": run.project,
        "entity": run.entity,
    }
    return write_text_atomic(Path(run_dir) / RUN_FILE, json.dumps(record, indent=1) + "\n")


def training_run(run_dir: str | Path | None) -> dict | None:
    """The ``wandb.json`` of a training run dir, if its run logged to W&B."""
    path = Path(run_dir) / RUN_FILE if run_dir else None
    return json.loads(path.read_text()) if path is not None and path.is_file() else None


class EvalLogger:
    """Logs nothing (``logger=none``); the interface of every back end."""

    #: Whether anything is logged (callers skip building what only a logger would read).
    active = False

    def __init__(self, cfg: Any = None, run_name: str = "", config: dict | None = None, **_: Any):
        pass

    def log_metrics(self, metrics: dict[str, Any], step: int, prefix: str) -> None:
        pass

    def log_table(self, name: str, columns: list[str], rows: list[list]) -> None:
        pass

    def log_images(self, name: str, paths: list[Path], captions: list[str]) -> None:
        pass

    def finish(self) -> None:
        pass


class WandbLogger(EvalLogger):
    """A W&B run (``WANDB_MODE=offline`` writes it under ``<dir>/wandb``). ``job_type="train"``: the
    training run of ``run_dir`` (its id from ``WANDB_RUN_ID`` when set, so a requeued job continues
    it); ``job_type="eval"`` with a ``run_dir`` whose training run is known: the paired eval run
    (module docstring); else a run of its own."""

    active = True

    def __init__(
        self,
        cfg: Any,
        run_name: str,
        config: dict | None = None,
        group: str | None = None,
        run_dir: str | Path | None = None,
        job_type: str = "eval",
    ):
        import wandb

        self.wandb = wandb
        init: dict[str, Any] = {"name": run_name, "group": group, "job_type": job_type}
        trained = training_run(run_dir) if job_type == "eval" else None
        if trained is not None:  # the paired eval run of a training run
            init |= {
                "id": f"{trained['id']}-eval",
                "name": f"{trained['name']}-eval",
                "group": trained["group"],
                "resume": "allow",
            }
        elif job_type == "train" and os.environ.get("WANDB_RUN_ID"):
            init |= {"id": os.environ["WANDB_RUN_ID"], "resume": os.environ.get("WANDB_RESUME", "allow")}
        if run_dir is not None:
            Path(run_dir).mkdir(parents=True, exist_ok=True)
            init["dir"] = str(run_dir)
        elif os.environ.get("WANDB_DIR"):  # read at each run: W&B itself reads it once per process
            init["dir"] = os.environ["WANDB_DIR"]
        env_run = {k: os.environ.pop(k) for k in ("WANDB_RUN_ID", "WANDB_RESUME") if k in os.environ}
        try:
            self.run = wandb.init(
                project=cfg.project,
                entity=cfg.entity,
                mode=cfg.mode,
                tags=list(cfg.tags),
                config=config or {},
                reinit="finish_previous",
                **init,
            )
        finally:
            os.environ.update(env_run)
        self.run.define_metric(STEP_KEY)
        self.run.define_metric("*", step_metric=STEP_KEY)
        if job_type == "train" and run_dir is not None:
            remember_run(run_dir, self.run)
        self.step = 0

    def log_metrics(self, metrics, step, prefix):
        self.step = step
        self.run.log({STEP_KEY: step, **flatten(metrics, prefix)})

    def log_table(self, name, columns, rows):
        """A cell holding a ``Path`` (an image file) becomes a ``wandb.Image``."""
        data = [[self.wandb.Image(str(v)) if isinstance(v, Path) else v for v in r] for r in rows]
        self.run.log({STEP_KEY: self.step, name: self.wandb.Table(columns=columns, data=data)})

    def log_images(self, name, paths, captions):
        images = [self.wandb.Image(str(p), caption=c) for p, c in zip(paths, captions, strict=True)]
        self.run.log({STEP_KEY: self.step, name: images})

    def finish(self):
        self.run.finish()


#: W&B modes that send nothing, so need no API key.
KEYLESS_MODES = ("offline", "disabled", "dryrun")


def _netrc_key(host: str) -> bool:
    """Whether the ``.netrc`` (``$NETRC``, else ``~/.netrc``) holds a password for ``host``."""
    import netrc
    from urllib.parse import urlparse

    path = Path(os.environ.get("NETRC") or Path.home() / ".netrc")
    try:
        found = (
            netrc.netrc(str(path)).authenticators(urlparse(host).hostname or host) if path.is_file() else None
        )
    except (netrc.NetrcParseError, OSError):
        return False
    return bool(found and found[2])


def _settings_key() -> bool:
    """Whether W&B's own settings file holds an API key."""
    folder = Path(os.environ.get("WANDB_CONFIG_DIR") or Path.home() / ".config" / "wandb")
    try:
        return "api_key" in (folder / "settings").read_text(encoding="utf-8")
    except OSError:
        return False


def check_logger(cfg: Any) -> None:
    """Refuse, before anything loads, a ``logger=wandb`` that would send (mode neither offline nor
    disabled) with no API key W&B could find: ``WANDB_API_KEY`` (or ``WANDB_IDENTITY_TOKEN_FILE``),
    the ``.netrc`` entry of ``WANDB_BASE_URL`` or W&B's settings. The key itself is never read out."""
    mode = os.environ.get("WANDB_MODE") or cfg.mode
    if cfg.name != "wandb" or str(mode).lower() in KEYLESS_MODES:
        return
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return
    if _netrc_key(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")) or _settings_key():
        return
    raise ValueError(
        f"logger=wandb (mode {mode}) has no W&B API key: export WANDB_API_KEY=<your key> (or run "
        "`wandb login`), or log locally with WANDB_MODE=offline (`wandb sync` later), or logger=none"
    )


def make_logger(
    cfg: Any,
    run_name: str,
    config: dict | None = None,
    group: str | None = None,
    run_dir: str | Path | None = None,
    job_type: str = "eval",
) -> EvalLogger:
    return LOGGERS.get(cfg.name)(
        cfg, run_name=run_name, config=config, group=group, run_dir=run_dir, job_type=job_type
    )


def format_table(columns: list[str], rows: list[list]) -> str:
    """A plain-text table (floats with one decimal, None as -) for the console."""
    cells = [
        [f"{v:.1f}" if isinstance(v, float) else ("-" if v is None else str(v)) for v in r] for r in rows
    ]
    widths = [max(len(c), *(len(r[j]) for r in cells)) for j, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(lines)


@dataclass
class LoggerConfig:
    name: str = "none"
    """``none`` or ``wandb``."""
    project: str = "proactive-vlm"
    entity: str | None = None
    mode: str = "disabled"
    """W&B mode: ``online``, ``offline`` or ``disabled``."""
    tags: list[str] = field(default_factory=list)
