"""The rank layer (``infra.ranks``): the launcher's variables read in one place, and collectives that
are the identity in one process and agree over a real 2-process gloo group."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from infra.ranks import Ranks, all_reduce, any_rank, barrier, broadcast, gather, is_rank_zero, shard
from tests.conftest import free_port

ROOT = Path(__file__).resolve().parents[2]

#: One rank of a 2-process launch: every collective of the layer, and the run control's agreed
#: signal and budget; prints what it got as one JSON line.
RANK_SCRIPT = """
import json, os, signal, sys, time
from datetime import timedelta
import torch.distributed as dist
from infra.ranks import Ranks, all_reduce, any_rank, barrier, broadcast, gather, shard
from infra.run_control import RunControl

ranks = Ranks.from_env()
dist.init_process_group("gloo", rank=ranks.rank, world_size=ranks.world, timeout=timedelta(seconds=60))
control = RunControl("t", "step", time_budget_s=3600 if ranks.rank == 0 else 0.01)
control.begin(10)
if ranks.rank == 1:
    os.kill(os.getpid(), signal.SIGUSR1)  # this rank alone is signalled
time.sleep(0.05)
out = {
    "rank": ranks.rank,
    "sum": all_reduce([ranks.rank + 1.0, 10.0]),
    "max": all_reduce([ranks.rank * 5.0, -ranks.rank], "max"),
    "any": any_rank(ranks.rank == 1),
    "none": any_rank(False),
    "gather": gather({"r": ranks.rank}),
    "broadcast": broadcast(f"from {ranks.rank}"),
    "shard": shard(list("abcde"), ranks.rank, ranks.world),
    "received": control.received,
    "signalled": control.signalled(),
    "over_budget": control.over_budget(3, 10),
    "stopped_by": control.stopped_by,
}
barrier()
control.finish()
dist.destroy_process_group()
print(json.dumps(out))
"""


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, Ranks(0, 1, 0)),
        ({"RANK": "3", "WORLD_SIZE": "8"}, Ranks(3, 8, 3)),
        ({"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1"}, Ranks(5, 8, 1)),
    ],
)
def test_the_launchers_variables_are_read_in_one_place(monkeypatch, env, expected):
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert Ranks.from_env() == expected
    assert is_rank_zero() is (expected.rank == 0) is Ranks.from_env().main


@pytest.mark.parametrize(
    ("env", "message"),
    [({"RANK": "x"}, "must be integers"), ({"RANK": "2", "WORLD_SIZE": "2"}, "need 0 <= RANK < WORLD_SIZE")],
)
def test_a_bad_launch_environment_is_refused(monkeypatch, env, message):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ValueError, match=message):
        Ranks.from_env()


def test_one_process_collectives_are_the_identity():
    assert all_reduce([1, 2.5]) == [1.0, 2.5] and all_reduce([3, -1], "max") == [3.0, -1.0]
    assert any_rank(True) is True and any_rank(False) is False
    assert gather({"a": 1}) == [{"a": 1}] and broadcast([1, 2]) == [1, 2]
    barrier()  # nothing to wait for


def test_a_share_is_every_worlds_item_from_the_rank():
    items = list(range(7))
    shares = [shard(items, r, 3) for r in range(3)]
    assert shares == [[0, 3, 6], [1, 4], [2, 5]]
    assert sorted(x for s in shares for x in s) == items  # each item once
    assert shard([0, 1], 3, 4) == []


@pytest.mark.ranks
def test_two_ranks_agree_on_every_collective_and_on_a_stop():
    """Two processes in a gloo group: sums and maxima over both, the flag of rank 1 seen by rank 0,
    gathered and broadcast objects; rank 1 alone is signalled and rank 1 alone is past its time
    budget, yet both stop, for the same reason."""
    port = str(free_port())
    procs = []
    for rank in (0, 1):
        env = {**os.environ, "PYTHONPATH": str(ROOT), "RANK": str(rank), "LOCAL_RANK": str(rank)}
        env |= {"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "OMP_NUM_THREADS": "1"}
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", RANK_SCRIPT],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    outs = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=120)
        assert p.returncode == 0, stderr[-3000:]
        outs.append(json.loads(stdout.strip().splitlines()[-1]))
    for out in outs:
        assert out["sum"] == [3.0, 20.0] and out["max"] == [5.0, 0.0]
        assert out["any"] is True and out["none"] is False
        assert out["gather"] == [{"r": 0}, {"r": 1}] and out["broadcast"] == "from 0"
        assert out["signalled"] is True and out["over_budget"] is True
        assert out["stopped_by"] == "time_budget"  # the budget was asked last
    assert [o["shard"] for o in outs] == [["a", "c", "e"], ["b", "d"]]
    assert [o["received"] for o in outs] == [None, 10]  # SIGUSR1 reached rank 1 only
