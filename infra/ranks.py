"""The ranks of a launch, for every stage: who this process is, and the few collectives the stages use.

    ranks = Ranks.from_env()                 # RANK / WORLD_SIZE / LOCAL_RANK as a launcher sets them
    if is_rank_zero(): write_shared_files()
    stop = any_rank(flag)                    # True on every rank when it is True on one
    total, most = all_reduce([a, b], "sum")  # element-wise over the ranks
    rows = gather(my_rows)                   # one entry per rank, on every rank
    mine = shard(items, ranks.rank, ranks.world)

:meth:`Ranks.from_env` is the one reader of the launcher's variables (``accelerate launch`` and
``torchrun`` set them; unset, the process is rank 0 of 1). The collectives work on the default
``torch.distributed`` process group when one of several ranks exists (the stages make it: SFT's
Trainer through accelerate, GRPO through DeepSpeed, ``eval.run`` a gloo group) and are the identity
in one process, so a stage calls them the same way however it was started. A tensor collective runs
on the GPU of this rank under NCCL, on the CPU otherwise.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Literal


@dataclass(frozen=True)
class Ranks:
    """This process's place in a launch."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @classmethod
    def from_env(cls) -> Ranks:
        """From ``RANK`` / ``WORLD_SIZE`` / ``LOCAL_RANK`` (one process when unset)."""
        try:
            rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
            local = int(os.environ.get("LOCAL_RANK", str(rank)))
        except ValueError as exc:
            raise ValueError(f"RANK / WORLD_SIZE / LOCAL_RANK must be integers: {exc}") from None
        if world < 1 or not 0 <= rank < world:
            raise ValueError(f"RANK={rank} WORLD_SIZE={world}: need 0 <= RANK < WORLD_SIZE")
        return cls(rank, world, local)

    @property
    def main(self) -> bool:
        return self.rank == 0


def is_rank_zero() -> bool:
    """Whether this process is rank 0 of its launch (one process alone is). Rank 0 writes a run's
    shared files."""
    return Ranks.from_env().main


def _group():
    """``torch.distributed`` when a default process group of more than one rank exists, else None."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return dist
    return None


def _device():
    import torch
    import torch.distributed as dist

    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def barrier() -> None:
    """Wait for every rank (nothing to wait for in one process)."""
    dist = _group()
    if dist is not None:
        dist.barrier()


def all_reduce(values: list[float], op: Literal["sum", "max"] = "sum") -> list[float]:
    """``values`` summed (or their maximum taken) element-wise over the ranks, in float64."""
    dist = _group()
    if dist is None:
        return [float(v) for v in values]
    import torch

    t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=_device())
    dist.all_reduce(t, op=dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX)
    return t.tolist()


def any_rank(flag: bool) -> bool:
    """Whether ``flag`` is set on any rank; every rank gets the same answer (call it on every rank)."""
    return bool(all_reduce([float(bool(flag))], "max")[0])


def gather(obj: Any) -> list[Any]:
    """Every rank's ``obj`` (small and picklable), in rank order, on every rank."""
    dist = _group()
    if dist is None:
        return [obj]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def broadcast(obj: Any, src: int = 0) -> Any:
    """Rank ``src``'s ``obj`` on every rank."""
    dist = _group()
    if dist is None:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def shard(items: list, rank: int, world: int) -> list:
    """Rank ``rank``'s share of ``items``: every ``world``-th item from position ``rank``, in order.

    >>> shard(list(range(6)), 1, 4), shard(list(range(6)), 3, 4), shard([0, 1], 3, 4)
    ([1, 5], [3], [])
    """
    return list(items[rank::world])


def end_group() -> None:
    """Destroy the default process group, if one was made."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
