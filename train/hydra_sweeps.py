"""Hydra sweeps you can compare: one folder and one W&B run per point, named by the swept values only.

    python -m train.grpo -m init=runs/sft/final reward.reward_weights.prs=1,2 reward.redundancy.penalty=0.1,0.2 grpo.eval_every=20
    python -m eval.sweep_table runs/grpo_sweep         # one row per point: its values, final and best scores

- The ``sweep_point_dir`` resolver names a point's folder by the keys the command sweeps alone
  (``reward.redundancy.penalty=0.1,reward.reward_weights.prs=2``), not by every fixed override of the
  command. Which keys it sweeps (``reward.reward_weights.prs=1,2``, ``x=range(1,4)``) is read from the
  command's overrides as Hydra saved them in the sweep folder (``multirun.yaml``, written before the
  first point starts, on the disk every point's job sees: local or Slurm).
- The ``local_gpus`` resolver gives the local launcher the node's GPUs (it would hide them with 0).
- :class:`SlurmRequestCheck` (a callback of ``hydra/launcher=slurm``): before submitit's launcher submits, asks
  Slurm whether a point's job can ever start (``slurm/submit.sh --check``: ``sbatch --test-only`` with
  the launcher's nodes, tasks, CPUs, GPUs and partition) and refuses the sweep, naming what it asks
  and what the partition's nodes have, instead of waiting for ever on jobs that pend.
- :func:`sweep_identity`: inside a point, the sweep's name (the sweep folder's name, e.g.
  ``grpo_sweep``: the W&B group of every point), the point's name (its folder) and its swept values.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

SUBMIT = Path(__file__).resolve().parents[1] / "slurm" / "submit.sh"


class SweepRequestError(RuntimeError):
    """Slurm can never start a sweep point's job as the launcher asks for it."""


def slurm_request(params: dict[str, Any]) -> list[str]:
    """The sbatch options of one sweep point's job, from the launcher's settings."""
    flags = {
        "nodes": params.get("nodes"),
        "ntasks-per-node": params.get("tasks_per_node"),
        "cpus-per-task": params.get("cpus_per_task"),
        "gpus-per-node": params.get("gpus_per_node") or None,
        "partition": params.get("partition"),
        "account": params.get("account"),
        "time": params.get("timeout_min"),
    }
    return [f"--{k}={v}" for k, v in flags.items() if v is not None]


def check_slurm_request(params: dict[str, Any]) -> None:
    """Raise :class:`SweepRequestError` when ``slurm/submit.sh --check`` says the point's job can
    never start (its message names the request and the partition's nodes)."""
    request = slurm_request(params)
    out = subprocess.run(
        ["bash", str(SUBMIT), "--check", *request, "--wrap=true"], capture_output=True, text=True
    )
    if out.returncode != 0:
        raise SweepRequestError(
            f"hydra/launcher=slurm: {out.stderr.strip()} (set hydra.launcher.cpus_per_task / gpus_per_node / "
            "nodes / partition)"
        )


class SlurmRequestCheck(Callback):
    """``hydra/launcher=slurm``'s callback: before the first point is submitted, the request is
    checked (:func:`check_slurm_request`); a refusal ends the command with exit 2 and Slurm's reason
    (a callback's exception would be only a warning to Hydra)."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            check_slurm_request(OmegaConf.to_container(config.hydra.launcher, resolve=True))
        except SweepRequestError as exc:
            print(exc, file=sys.stderr)
            sys.exit(2)


def swept_keys(argv: list[str]) -> list[str]:
    """The keys a command line sweeps (a comma list or a sweep function), in order."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    candidates = [a for a in argv if "=" in a and not a.startswith("-")]
    parsed = OverridesParser.create().parse_overrides(candidates)
    return [o.key_or_group for o in parsed if o.is_sweep_override()]


def _point_overrides() -> list[str]:
    """The point's own ``key=value`` overrides of the keys its sweep sweeps (every override of the
    point when the sweep folder holds no ``multirun.yaml``)."""
    from hydra.core.hydra_config import HydraConfig

    hydra = HydraConfig.get()
    task = list(hydra.overrides.task)
    saved = Path(hydra.sweep.dir)
    saved = (saved if saved.is_absolute() else Path(hydra.runtime.cwd) / saved) / "multirun.yaml"
    if not saved.is_file():
        return task
    wanted = set(swept_keys(list(OmegaConf.load(saved).hydra.overrides.task)))
    return [o for o in task if o.split("=", 1)[0].lstrip("+~") in wanted]


def sweep_point_dir() -> str:
    """The folder name of a sweep point: its swept ``key=value`` pairs, sorted by key."""
    return ",".join(sorted(_point_overrides())) or "point"


def local_gpus() -> int:
    """The GPUs this node lets the process see (``CUDA_VISIBLE_DEVICES``, else what torch counts):
    the local launcher gives every point all of them (``conf/hydra/launcher/local.yaml``)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip()])
    import torch

    return torch.cuda.device_count()


if not OmegaConf.has_resolver("sweep_point_dir"):
    OmegaConf.register_new_resolver("sweep_point_dir", sweep_point_dir, use_cache=False)
if not OmegaConf.has_resolver("local_gpus"):
    OmegaConf.register_new_resolver("local_gpus", local_gpus)


def sweep_identity() -> dict[str, Any] | None:
    """``{"sweep", "name", "point"}`` of the current sweep point, or None outside a multirun."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized() or HydraConfig.get().mode.name != "MULTIRUN":
        return None
    hydra = HydraConfig.get()
    point = dict(o.split("=", 1) for o in sorted(_point_overrides()))
    return {"sweep": Path(hydra.sweep.dir).name, "name": sweep_point_dir(), "point": point}
