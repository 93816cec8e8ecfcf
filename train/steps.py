"""The arithmetic of a recipe's batch sizes and step counts, as the trainers do it.

``conf/experiment/p3i_4b_sft.yaml`` and ``conf/experiment/p3i_4b_grpo.yaml`` state the published
step counts; these functions are how the stages arrive at them (and the recipe test checks them):

>>> accumulation_steps(32, per_device=1, processes=8), accumulation_steps(32, per_device=1, processes=16)
(4, 2)
>>> sft_steps(13_368, per_device=1, processes=8, accumulation=4), sft_steps(13_368, 1, 16, 2)
(418, 418)
>>> grpo_updates(863, windows_per_step=6)
143
"""

from __future__ import annotations

import math


def accumulation_steps(global_batch: int, per_device: int, processes: int) -> int:
    """Gradient accumulation steps that make ``global_batch`` windows per optimizer step."""
    per_pass = per_device * processes
    if global_batch % per_pass:
        raise ValueError(
            f"sft.global_batch_size={global_batch} is not a multiple of per-device batch {per_device} x "
            f"{processes} process(es): pick a per-device batch or process count that divides it"
        )
    return global_batch // per_pass


def sft_steps(n_samples: int, per_device: int, processes: int, accumulation: int, epochs: float = 1.0) -> int:
    """Optimizer steps of the SFT Trainer: each process's loader yields ceil(n / (per-device x
    processes)) batches an epoch, and every ``accumulation`` of them (the last, shorter run too)
    make one step."""
    batches = math.ceil(n_samples / (per_device * processes))
    return math.ceil(math.ceil(batches / accumulation) * epochs)


def grpo_updates(n_windows: int, windows_per_step: int, epochs: float = 1.0) -> int:
    """Whole updates in ``epochs`` passes over the windows (each update draws the next
    ``windows_per_step`` of a seeded shuffle, ``train.grpo.loop.GRPOLoop``)."""
    return int(n_windows * epochs) // windows_per_step
