"""How one GRPO update runs over processes: one process, or data parallel under DeepSpeed ZeRO.

    python -m train.grpo ...                                                      # one process
    accelerate launch --config_file conf/accelerate/zero2.yaml -m train.grpo ...  # one per GPU
    sbatch --gpus-per-node=8 slurm/grpo.sh ...                                    # the same, on Slurm nodes

:func:`from_environment` picks :class:`Single` (no launcher, or one process without DeepSpeed) or
:class:`DeepSpeedRanks` (``accelerate launch`` with a DeepSpeed config: ``ACCELERATE_USE_DEEPSPEED``
and ``ACCELERATE_DEEPSPEED_CONFIG_FILE`` in the environment; on CPU the ranks talk over gloo).
``train.grpo.loop.GRPOLoop`` runs the same update either way:

- Windows: the update's draw is the same on every rank; rank r rolls out windows ``r, r + N, ...``
  (``infra.ranks.shard``) with each window's own seed, so a run's rollouts do not depend on N. A rank
  with no window in the draw (fewer windows than ranks) rolls out a padding window it never counts.
- Rewards and advantages are computed per window group on its rank; ``scale_rewards=batch`` sums
  the moments of every rank's rewards (``infra.ranks.all_reduce``: the collectives are the rank
  layer's, the identity in one process).
- Gradients: every rank does the same number of loss forwards (the most windows with signal any
  rank has; padding forwards count with weight 0), and its loss is its share of the update's loss,
  times N because DeepSpeed averages the gradients of the ranks; the sum over ranks is then the
  single-process gradient. DeepSpeed clips the global norm and skips a step whose norm is not
  finite.
- ZeRO-3: parameters are sharded; :meth:`DeepSpeedRanks.full_weights` gathers them once for the
  whole rollout phase of an update (and for held-out evaluation), not once per streaming step.
- Checkpoints: rank 0 writes the HF directory (under ZeRO-3 from the gathered 16-bit weights);
  every rank writes its optimizer partition through DeepSpeed (``deepspeed/`` in the checkpoint);
  ``COMPLETE`` comes last, once every rank is done. Resume with the same number of processes; the
  engine reads those files with ``weights_only=True`` (``train.safe_load.guard_deepspeed_loads``).

A DeepSpeed JSON's ``"auto"`` values are filled here (:func:`deepspeed_config`) from the ``grpo``
block, as the Trainer fills them for SFT.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from datetime import timedelta
from pathlib import Path

import torch

from infra.ranks import Ranks
from train.safe_load import guard_deepspeed_loads

log = logging.getLogger(__name__)
DEEPSPEED_DIR, DEEPSPEED_TAG = "deepspeed", "state"


def bf16_enabled(setting: str) -> bool:
    """``grpo.bf16``: ``auto`` is bf16 on CUDA only."""
    if setting == "auto":
        return torch.cuda.is_available()
    return str(setting).lower() == "true"


class Single:
    """One process: plain AdamW, gradient clipping by torch; bf16 as autocast over fp32 weights."""

    world, rank = 1, 0

    def __init__(self, bf16: bool = False):
        self.bf16 = bf16
        self.model = self.module = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.max_grad_norm = 1.0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def setup(self, model, learning_rate: float, weight_decay: float, max_grad_norm: float) -> None:
        """Own ``model`` for training; in fp32 when it was loaded in a lower precision, so that
        updates of ~1e-7 are not rounded away (bf16 keeps ~3 significant digits)."""
        if next(model.parameters()).dtype != torch.float32:
            model.float()
        self.model = self.module = model
        params = [p for p in model.parameters() if p.requires_grad]
        # foreach: one kernel per operation over every tensor (the default on CUDA only); the same
        # values as the per-tensor loop, bit for bit (docs/performance.md, the GRPO update)
        self.optimizer = torch.optim.AdamW(params, lr=learning_rate, weight_decay=weight_decay, foreach=True)
        self.max_grad_norm = max_grad_norm

    def autocast(self):
        device = next(self.module.parameters()).device.type
        return torch.autocast(device, dtype=torch.bfloat16) if self.bf16 else contextlib.nullcontext()

    def full_weights(self):
        """Context in which the module's whole weights are on this rank (a no-op here)."""
        return contextlib.nullcontext()

    def backward(self, loss: torch.Tensor, last: bool) -> None:
        loss.backward()

    def step(self) -> float:
        """Clip, step, zero the gradients; returns the gradient norm before clipping."""
        params = [p for p in self.module.parameters() if p.requires_grad]
        norm = float(torch.nn.utils.clip_grad_norm_(params, self.max_grad_norm))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return norm

    def discard(self) -> None:
        """Drop the gradients of an update that is not applied (a non-finite loss)."""
        self.optimizer.zero_grad(set_to_none=True)

    # -- checkpoints -------------------------------------------------------------------------------

    def save_weights(self, path: Path) -> None:
        if self.is_main:
            self.module.save_pretrained(path, safe_serialization=True)

    def optimizer_state(self, path: Path) -> dict:
        """What ``grpo_state.pt`` holds beside the step."""
        return {"optimizer": self.optimizer.state_dict()}

    def load_optimizer(self, path: Path, state: dict) -> None:
        if "optimizer" not in state:
            raise ValueError(
                f"{path}: written by a multi-process (DeepSpeed) run; resume it with the same launch"
            )
        self.optimizer.load_state_dict(state["optimizer"])


def deepspeed_config(path: str | Path, *, max_grad_norm: float, bf16: bool, hidden_size: int) -> dict:
    """A DeepSpeed JSON with its ``"auto"`` values filled: one window group per micro-batch, no
    accumulation of DeepSpeed's own (the loop marks its last backward), ``grpo.max_grad_norm``,
    ``grpo.bf16``, and the bucket sizes the Trainer derives from the hidden size."""
    cfg = json.loads(Path(path).read_text())
    fills = {
        ("train_micro_batch_size_per_gpu",): 1,
        ("gradient_accumulation_steps",): 1,
        ("gradient_clipping",): max_grad_norm,
        ("bf16", "enabled"): bf16,
        ("fp16", "enabled"): False,
        ("zero_optimization", "reduce_bucket_size"): hidden_size * hidden_size,
        ("zero_optimization", "stage3_prefetch_bucket_size"): int(0.9 * hidden_size * hidden_size),
        ("zero_optimization", "stage3_param_persistence_threshold"): 10 * hidden_size,
    }

    def fill(node: dict, prefix: tuple) -> None:
        for key, value in list(node.items()):
            if isinstance(value, dict):
                fill(value, (*prefix, key))
            elif value == "auto":
                if (*prefix, key) not in fills:
                    raise ValueError(f"{path}: no value for {'.'.join((*prefix, key))}='auto' in GRPO")
                node[key] = fills[(*prefix, key)]

    fill(cfg, ())
    cfg.pop("train_batch_size", None)
    return cfg


class DeepSpeedRanks(Single):
    """Data parallel under DeepSpeed ZeRO (stage 1, 2 or 3), one process per device."""

    def __init__(self, config_file: str, bf16: bool, timeout_s: float):
        import deepspeed

        super().__init__(bf16)
        self.config_file = config_file
        cuda = torch.cuda.is_available()
        if cuda:
            torch.cuda.set_device(Ranks.from_env().local_rank)
        deepspeed.init_distributed(
            dist_backend="nccl" if cuda else "gloo", timeout=timedelta(seconds=timeout_s)
        )
        self.world, self.rank = torch.distributed.get_world_size(), torch.distributed.get_rank()
        self.device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
        self.engine = None

    def setup(self, model, learning_rate: float, weight_decay: float, max_grad_norm: float) -> None:
        import deepspeed

        cfg = deepspeed_config(
            self.config_file,
            max_grad_norm=max_grad_norm,
            bf16=self.bf16,
            hidden_size=int(model.config.text_config.hidden_size),
        )
        if not self.bf16 and next(model.parameters()).dtype != torch.float32:
            model.float()
        model.to(self.device)
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=learning_rate, weight_decay=weight_decay)
        self.engine, self.optimizer, _, _ = deepspeed.initialize(
            model=model, optimizer=optimizer, model_parameters=params, config=cfg
        )
        guard_deepspeed_loads(self.engine)  # resume reads every rank's files with weights_only=True
        self.model, self.module = self.engine, self.engine.module
        self.stage = int(self.engine.zero_optimization_stage())
        log.info("rank %d/%d: DeepSpeed ZeRO-%d, bf16 %s", self.rank, self.world, self.stage, self.bf16)

    def autocast(self):
        return contextlib.nullcontext()  # DeepSpeed holds the module in its training dtype

    @contextlib.contextmanager
    def full_weights(self):
        """ZeRO-3: gather every parameter once (the rollouts of an update, an evaluation), with
        DeepSpeed's per-module fetch hooks off meanwhile: ranks run different numbers of forward
        passes (reply lengths differ; rank 0 alone evaluates), and a hook's fetch is a collective."""
        if self.stage < 3:
            yield
            return
        import deepspeed

        offload = self.engine.optimizer.parameter_offload
        with deepspeed.zero.GatheredParameters(list(self.module.parameters()), modifier_rank=None):
            offload._remove_module_hooks()
            offload.forward_hooks, offload.backward_hooks = [], []
            try:
                yield
            finally:
                offload.setup_zero_stage3_hooks()

    def backward(self, loss: torch.Tensor, last: bool) -> None:
        self.engine.set_gradient_accumulation_boundary(last)
        self.engine.backward(loss)

    def step(self) -> float:
        self.engine.step()
        norm = self.engine.get_global_grad_norm()
        return float(norm) if norm is not None else float("nan")

    def discard(self) -> None:
        self.engine.step()  # a non-finite gradient norm: DeepSpeed skips the update and drops the gradients

    def save_weights(self, path: Path) -> None:
        """Rank 0 writes the HF weights; under ZeRO-3 every rank takes part in gathering them."""
        if self.stage == 3:
            state = self.engine._zero3_consolidated_16bit_state_dict()
            if self.is_main:
                self.module.save_pretrained(path, state_dict=state, safe_serialization=True)
        else:
            super().save_weights(path)

    def optimizer_state(self, path: Path) -> dict:
        """Every rank writes its partition of the optimizer under ``<checkpoint>/deepspeed``."""
        self.engine.save_checkpoint(
            str(path / DEEPSPEED_DIR), tag=DEEPSPEED_TAG, exclude_frozen_parameters=True
        )
        return {"deepspeed": DEEPSPEED_DIR, "world_size": self.world}

    def load_optimizer(self, path: Path, state: dict) -> None:
        if "deepspeed" not in state:
            raise ValueError(f"{path}: written by a single-process run; resume it with python -m train.grpo")
        if int(state["world_size"]) != self.world:
            raise ValueError(
                f"{path}: written by {state['world_size']} processes, resumed with {self.world}: "
                "resume with the same number of processes"
            )
        self.engine.load_checkpoint(
            str(Path(path) / state["deepspeed"]),
            tag=DEEPSPEED_TAG,
            load_optimizer_states=True,
            load_lr_scheduler_states=False,
            load_module_strict=False,
        )


def from_environment(bf16: bool, timeout_s: float) -> Single:
    """:class:`DeepSpeedRanks` under ``accelerate launch`` with a DeepSpeed config, else
    :class:`Single`; several processes without DeepSpeed are refused (the update's gradients
    would not be averaged)."""
    world = Ranks.from_env().world
    config_file = os.environ.get("ACCELERATE_DEEPSPEED_CONFIG_FILE")
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true" and config_file:
        return DeepSpeedRanks(config_file, bf16, timeout_s)
    if world > 1:
        raise RuntimeError(
            f"train.grpo with {world} processes needs a DeepSpeed config: accelerate launch --config_file "
            "conf/accelerate/zero2.yaml (or zero3.yaml); slurm/grpo.sh uses zero2.yaml by default"
        )
    return Single(bf16)
