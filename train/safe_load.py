"""Reading checkpoint files without running code from them: ``torch.load(weights_only=True)``.

A ``.pt`` file is a pickle, and a pickle may name any callable for the loader to call; a file
planted in a run directory would run its code when a job resumes from it. Every ``.pt`` file a
resume reads goes through torch's restricted unpickler (tensors, numbers, strings, plain
containers) plus a short list of classes that only hold data:

- :func:`load_weights_only`: one file, with the classes named; a file that needs anything else is
  refused with :class:`UnsafeCheckpoint`, which names the file and what it asked for.
- :func:`guard_deepspeed_loads`: a DeepSpeed engine's own checkpoint engine reads with
  ``weights_only=False``; this swaps in one whose loads go through :func:`load_weights_only` with
  :func:`deepspeed_globals` (saving is unchanged), so DeepSpeed's ``load_checkpoint`` reads the model
  states and every rank's optimizer partition safely under ZeRO-2 and ZeRO-3. GRPO applies it after
  ``deepspeed.initialize`` (``train.grpo.parallel``), SFT after the Trainer's ``accelerator.prepare``
  (``train.sft.trainer.DecisionTrainer``).
"""

from __future__ import annotations

import functools
import pickle
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch


class UnsafeCheckpoint(ValueError):
    """A checkpoint file needs more than tensors and plain data to load: it was not written by this
    pipeline, or was altered since."""


def deepspeed_globals() -> list[type]:
    """The classes a DeepSpeed ZeRO-2 / ZeRO-3 checkpoint holds beside tensors and containers
    (fp32 or bf16): the optimizer partition's loss scaler (its scale and flags), the ZeRO stage
    (an ``IntEnum``) and, under ZeRO-2, a parameter fragment's address (two ints). None of them
    runs code when its fields are set."""
    from deepspeed.runtime.fp16.loss_scaler import LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum
    from deepspeed.utils.tensor_fragment import fragment_address

    return [LossScaler, ZeroStageEnum, fragment_address]


def _refused(path: Path, exc: Exception, allowed: list[type]) -> UnsafeCheckpoint:
    names = {f"{t.__module__}.{t.__qualname__}" for t in allowed}
    try:  # reads the pickle's opcodes only; nothing in it is called
        wanted = [g for g in torch.serialization.get_unsafe_globals_in_checkpoint(path) if g not in names]
    except Exception:  # a file too broken to list: torch's own reason below
        wanted = []
    if wanted:
        reason = f"it calls or builds {', '.join(wanted)}"
    else:
        found = re.search(r"WeightsUnpickler error: ([^\n]*)", str(exc))
        reason = found.group(1) if found else str(exc).splitlines()[0]
    also = f" (and {', '.join(sorted(names))})" if names else ""
    return UnsafeCheckpoint(
        f"{path}: refused to load: {reason}, and a checkpoint of this pipeline holds only tensors and "
        f"plain data{also}. It was not written by this pipeline or was altered since; nothing was run "
        "from it. Resume from another checkpoint (resume=<dir>) or remove this one."
    )


def load_weights_only(path: str | Path, map_location: Any = None, allowed: list[type] | None = None) -> Any:
    """``torch.load(path, weights_only=True)`` with the classes ``allowed`` besides torch's own
    data types; anything else is refused with :class:`UnsafeCheckpoint`."""
    path, allowed = Path(path), list(allowed or [])
    try:
        with torch.serialization.safe_globals(allowed):
            return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        raise _refused(path, exc, allowed) from None


class _WeightsOnlyLoads:
    """A DeepSpeed checkpoint engine whose ``load`` is :func:`load_weights_only`; everything else
    (saving, committing, which rank writes) is the wrapped engine's."""

    def __init__(self, inner: Any, allowed: list[type]):
        self.inner = inner
        self.allowed = allowed
        self.name = f"weights-only {getattr(inner, 'name', type(inner).__name__)}"

    def load(self, path: str, map_location: Any = None) -> Any:
        return load_weights_only(path, map_location, self.allowed)

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not set yet (a copy being built): no recursion through __getattr__
            raise AttributeError(name)
        return getattr(self.inner, name)


def guard_deepspeed_loads(engine: Any) -> Any:
    """Make every file DeepSpeed's ``load_checkpoint`` reads load with ``weights_only=True``.

    DeepSpeed reads a universal checkpoint (``checkpoint.load_universal``) with ``torch.load`` of
    its own, past the checkpoint engine: such a config is refused rather than left unguarded."""
    if engine.load_universal_checkpoint():
        raise ValueError(
            "DeepSpeed config checkpoint.load_universal=true: universal checkpoints are read with "
            "weights_only=False past the checkpoint engine; this pipeline resumes only its own ZeRO "
            "checkpoints (drop checkpoint.load_universal)"
        )
    if not isinstance(engine.checkpoint_engine, _WeightsOnlyLoads):
        engine.checkpoint_engine = _WeightsOnlyLoads(engine.checkpoint_engine, deepspeed_globals())
    return engine


def guarding_prepare(prepare: Callable) -> Callable:
    """``accelerator.prepare`` that applies :func:`guard_deepspeed_loads` to each DeepSpeed engine it
    returns, before anything (the Trainer's resume) loads a checkpoint into it."""
    from deepspeed import DeepSpeedEngine

    @functools.wraps(prepare)
    def prepare_guarded(*args, **kwargs):
        out = prepare(*args, **kwargs)
        for obj in out if isinstance(out, tuple) else (out,):
            if isinstance(obj, DeepSpeedEngine):
                guard_deepspeed_loads(obj)
        return out

    return prepare_guarded
