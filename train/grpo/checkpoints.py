"""GRPO's run directory: its checkpoints (``checkpoint-<step>``) and the kept best weights (``best/``).

Checkpoints are ordinary HF directories (model + processor, safetensors) plus ``grpo_state.pt`` (the
step and, for one process, the optimizer state, read back with ``torch.load(weights_only=True)`` and
the step checked; under DeepSpeed each rank's optimizer partition is in ``deepspeed/``) and the
``COMPLETE`` marker, written once every rank has saved; older complete ones are rotated away
(``train.run_dir.rotate_checkpoints``). ``best/`` is written to ``best.tmp`` and swapped in, so a crash
leaves one whole copy; a copy left mid-swap is taken back when the next run starts.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import torch

from engine.checkpoints import COMPLETE_MARKER, checkpoint_name, named_step, write_render
from infra.ranks import barrier
from train.run_dir import CheckpointWriteError, is_write_failure, rotate_checkpoints
from train.safe_load import load_weights_only

log = logging.getLogger(__name__)
STATE_FILE = "grpo_state.pt"
BEST_DIR, BEST_FILE = "best", "best.json"


def best_value(metrics: dict, path: str) -> float:
    """The figure at ``path`` (``a/b``) of a held-out evaluation's metrics, as ``keep_best`` compares it."""
    value: object = metrics
    for key in path.split("/"):
        if not isinstance(value, dict) or key not in value:
            raise ValueError(
                f"grpo.best_metric={path}: the held-out metrics have no {key!r} "
                f"(top-level keys: {', '.join(sorted(metrics))})"
            )
        value = value[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"grpo.best_metric={path}: {value!r} is not a number")
    return float(value)


def kept_best(path: Path, metric: str) -> dict:
    """The ``best.json`` of a resumed run; one kept by another metric cannot be compared with."""
    best = json.loads(path.read_text())
    if best.get("metric") != metric:
        raise ValueError(
            f"{path} kept the best by {best.get('metric')!r}, this run maximizes grpo.best_metric={metric}: "
            f"set grpo.best_metric={best.get('metric')} or move {path.parent} away"
        )
    return best


class RunFiles:
    """What a GRPO run writes under ``run_dir``; ``parallel`` is its ``train.grpo.parallel`` runner."""

    def __init__(self, run_dir: Path, parallel, processor, renderer):
        self.run_dir, self.parallel = Path(run_dir), parallel
        self.processor, self.renderer = processor, renderer
        self.best_dir = self.run_dir / BEST_DIR

    def kept_best(self, metric: str) -> dict | None:
        """The best kept so far (a ``best.tmp`` left mid-swap is taken back first), or None."""
        tmp = self.best_dir.with_name(f"{BEST_DIR}.tmp")
        if self.parallel.is_main and not self.best_dir.exists() and (tmp / BEST_FILE).exists():
            tmp.rename(self.best_dir)  # crashed mid-swap
        barrier()
        best = self.best_dir / BEST_FILE
        return kept_best(best, metric) if best.exists() else None

    def save(self, step: int, complete: bool, keep: int) -> Path:
        """Every rank saves its part of ``checkpoint-<step>``; rank 0 marks it complete last (not
        ``complete``: left unmarked) and keeps the newest ``keep``."""
        par = self.parallel
        path = self.run_dir / checkpoint_name(step)
        try:
            if par.is_main:
                path.mkdir(parents=True, exist_ok=True)
            barrier()
            par.save_weights(path)
            state = par.optimizer_state(path)
            if par.is_main:
                self.processor.save_pretrained(path)
                write_render(path, self.renderer.cfg)
                torch.save({"step": step, **state}, path / STATE_FILE)
        except (OSError, RuntimeError) as exc:
            if not is_write_failure(exc):
                raise
            raise CheckpointWriteError(path, exc) from exc
        barrier()
        if not par.is_main:
            return path
        if not complete:
            log.warning("%s saved during a run of non-finite losses: not marked complete", path)
            return path
        (path / COMPLETE_MARKER).write_text(f"{step}\n")
        rotate_checkpoints(self.run_dir, keep)
        return path

    def load_state(self, checkpoint: str | Path, max_steps: int) -> int:
        """Optimizer state and step of a checkpoint (the weights were loaded with the model). The
        step is checked first: a whole number of updates within ``[0, grpo.max_steps]``, and the
        ``<step>`` of a ``checkpoint-<step>`` directory (both come from the same counter in :meth:`save`)."""
        file = Path(checkpoint) / STATE_FILE
        state = load_weights_only(file)
        step = state.get("step") if isinstance(state, dict) else None
        if type(step) is not int:
            raise ValueError(f"{file}: 'step' is {step!r}, not a whole number of updates")
        if not 0 <= step <= max_steps:
            raise ValueError(
                f"{file}: step {step} is outside [0, grpo.max_steps={max_steps}]"
                + (": raise grpo.max_steps to continue this run" if step > max_steps else "")
            )
        named = named_step(file.parent)
        if named is not None and named != step:
            raise ValueError(f"{file}: step {step}, but its directory is {file.parent.name}")
        self.parallel.load_optimizer(Path(checkpoint), state)
        return step

    def save_best(self, best: dict) -> None:
        """Weights to ``best.tmp``, then swapped in for ``best`` (a crash leaves one whole copy)."""
        par = self.parallel
        path, tmp = self.best_dir, self.best_dir.with_name(f"{BEST_DIR}.tmp")
        if par.is_main:
            shutil.rmtree(tmp, ignore_errors=True)
        barrier()
        par.save_weights(tmp)
        if par.is_main:
            self.processor.save_pretrained(tmp)
            write_render(tmp, self.renderer.cfg)
            (tmp / BEST_FILE).write_text(json.dumps(best) + "\n")
            (tmp / COMPLETE_MARKER).write_text(f"{best['step']}\n")  # last: the copy is whole
            shutil.rmtree(path, ignore_errors=True)
            tmp.rename(path)
            log.info(
                "best held-out %s so far: %.2f at update %d", best["metric"], best["value"], best["step"]
            )
        barrier()
