"""Experiment tracking of an evaluation: a tiny logger interface with ``none`` and ``wandb`` back ends.

    logger = make_logger(cfg.logger, run_name="sft_checkpoint-500/p3i", config=plain_cfg)
    logger.log_metrics(metrics, step=500, prefix="eval/p3i")   # x axis: the checkpoint's training step
    logger.log_table("eval/p3i/per_task", columns, rows)
    logger.log_images("eval/p3i/timeline", [png, ...], captions)
    logger.finish()

Metrics are flattened (``eval/p3i/per_task/event_monitoring/prs_b``) and logged against
``trainer/global_step``, declared as their step metric, so the evaluations of successive
checkpoints (one W&B run each) line up on one chart. ``logger=none`` needs no W&B at all (it is
imported only by the ``wandb`` back end). The API key is read by W&B from ``WANDB_API_KEY``; it is
never in the config and never logged.

:func:`plot_timeline` draws one record as a PNG (matplotlib, Agg): P(</Response>) per step, the
threshold, target times (lines) and windows (spans), and the fires (markers).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from data_builders.files import id_file_name
from data_builders.records import Stream, step_times

STEP_KEY = "trainer/global_step"
LOGGERS: dict[str, Callable[..., EvalLogger]] = {}


def register_logger(name: str):
    def deco(cls):
        LOGGERS[name] = cls
        return cls

    return deco


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


@register_logger("none")
class EvalLogger:
    """Logs nothing (``logger=none``); the interface of every back end."""

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


@register_logger("wandb")
class WandbLogger(EvalLogger):
    """One W&B run per evaluation (``WANDB_MODE=offline`` writes it under ``WANDB_DIR``)."""

    def __init__(self, cfg: Any, run_name: str, config: dict | None = None, group: str | None = None):
        import wandb

        self.wandb = wandb
        self.run = wandb.init(
            project=cfg.project,
            entity=cfg.entity,
            mode=cfg.mode,
            name=run_name,
            group=group,
            job_type="eval",
            tags=list(cfg.tags),
            config=config or {},
            reinit="finish_previous",
        )
        self.run.define_metric(STEP_KEY)
        self.run.define_metric("eval/*", step_metric=STEP_KEY)
        self.step = 0

    def log_metrics(self, metrics, step, prefix):
        self.step = step
        self.run.log({STEP_KEY: step, **flatten(metrics, prefix)})

    def log_table(self, name, columns, rows):
        self.run.log({STEP_KEY: self.step, name: self.wandb.Table(columns=columns, data=rows)})

    def log_images(self, name, paths, captions):
        images = [self.wandb.Image(str(p), caption=c) for p, c in zip(paths, captions, strict=True)]
        self.run.log({STEP_KEY: self.step, name: images})

    def finish(self):
        self.run.finish()


def make_logger(cfg: Any, run_name: str, config: dict | None = None, group: str | None = None) -> EvalLogger:
    if cfg.name not in LOGGERS:
        raise KeyError(f"unknown logger {cfg.name!r} (known: {', '.join(sorted(LOGGERS))})")
    return LOGGERS[cfg.name](cfg, run_name=run_name, config=config, group=group)


def format_table(columns: list[str], rows: list[list]) -> str:
    """A plain-text table (floats with one decimal, None as -) for the console."""
    cells = [
        [f"{v:.1f}" if isinstance(v, float) else ("-" if v is None else str(v)) for v in r] for r in rows
    ]
    widths = [max(len(c), *(len(r[j]) for r in cells)) for j, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(lines)


def plot_timeline(
    stream: Stream, times: list[float], p: list[float], fired: list[int], threshold: float, path: Path
) -> Path:
    """One record's timeline as a PNG: P(response) per step, threshold, targets, fires."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = stream.clip_start
    fig, ax = plt.subplots(figsize=(8, 2.4), dpi=80)
    for i, target in enumerate(stream.targets):
        if target.window is not None:
            ax.axvspan(
                target.window[0] - t0,
                target.window[1] - t0,
                color="tab:green",
                alpha=0.2,
                label="target window" if i == 0 else None,
            )
        ax.axvline(target.time - t0, color="tab:green", lw=2, label="target" if i == 0 else None)
    x = [t - t0 for t in times]
    ax.plot(x, p, color="tab:blue", lw=1, label="P(response)")
    ax.axhline(threshold, color="grey", ls="--", lw=1, label=f"threshold {threshold:g}")
    fx = [xi for xi, f in zip(x, fired, strict=True) if f]
    fy = [pi for pi, f in zip(p, fired, strict=True) if f]
    ax.scatter(fx, fy, color="tab:red", marker="v", s=40, zorder=3, label="fire")
    ax.set_xlim(0, stream.duration)
    ax.set_ylim(0, 1)
    ax.set_xlabel("seconds since clip start")
    kind = "negative" if stream.is_negative else f"{len(stream.targets)} target(s)"
    ax.set_title(f"{stream.id} ({stream.task}, {kind}): {sum(fired)} fire(s)", fontsize=9)
    ax.legend(fontsize=6, loc="upper left", ncol=5)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    plt.close(fig)
    return path


def plot_timelines(
    streams: list[Stream], rows: list[dict], steps_per_second: float, threshold: float, out: Path
) -> list[Path]:
    """``out/timelines/<id>.png`` for each stream, from its predictions line (``p_response``, ``fired``);
    the file name is ``records.id_file_name`` of the id, so no id can name a path outside ``out``."""
    by_id = {r["id"]: r for r in rows}
    paths = []
    for s in streams:
        row = by_id[s.id]
        times = step_times(s, steps_per_second)[: len(row["p_response"])]
        paths.append(
            plot_timeline(
                s,
                times,
                row["p_response"],
                row["fired"],
                threshold,
                out / "timelines" / f"{id_file_name(s.id)}.png",
            )
        )
    return paths
