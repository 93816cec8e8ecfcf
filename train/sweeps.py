"""Hydra sweeps you can compare: one folder and one W&B run per point, named by the swept values only.

    python -m train.grpo -m init=runs/sft/final reward.reward_weights.prs=1,2 reward.redundancy.lambda=0.1,0.2
    python -m eval.sweep_table runs/grpo_sweep         # one row per point: its values, final and best scores

- :func:`note_swept_keys` (called by the entry point before Hydra parses the command line) records
  which keys the command sweeps (``reward.reward_weights.prs=1,2``, ``x=range(1,4)``) in the environment
  variable :data:`SWEEP_KEYS_ENV`, which every point's process inherits (local or Slurm jobs).
- The ``sweep_point_dir`` resolver names a point's folder by those keys alone
  (``reward.redundancy.lambda=0.1,reward.reward_weights.prs=2``), not by every fixed override of the command.
- The ``local_gpus`` resolver gives the local launcher the node's GPUs (it would hide them with 0).
- :func:`sweep_identity`: inside a point, the sweep's name (the sweep folder's name, e.g.
  ``grpo_sweep``: the W&B group of every point), the point's name (its folder) and its swept values.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

SWEEP_KEYS_ENV = "PROACTIVE_SWEEP_KEYS"


def swept_keys(argv: list[str]) -> list[str]:
    """The keys a command line sweeps (a comma list or a sweep function), in order."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    candidates = [a for a in argv if "=" in a and not a.startswith("-")]
    parsed = OverridesParser.create().parse_overrides(candidates)
    return [o.key_or_group for o in parsed if o.is_sweep_override()]


def note_swept_keys(argv: list[str]) -> None:
    """Record the swept keys of a multirun command line for its points (module docstring)."""
    if "-m" in argv or "--multirun" in argv:
        os.environ[SWEEP_KEYS_ENV] = ",".join(swept_keys(argv))


def _point_overrides() -> list[str]:
    from hydra.core.hydra_config import HydraConfig

    task = list(HydraConfig.get().overrides.task)
    keys = os.environ.get(SWEEP_KEYS_ENV)
    if keys is None:  # a sweep started without note_swept_keys: every override of the point
        return task
    wanted = set(keys.split(","))
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
