"""``eval.run`` over many processes: each rank streams a share of the records, rank 0 merges and scores.

    accelerate launch --config_file conf/accelerate/ddp.yaml --num_processes 2 -m eval.run checkpoint=DIR ...
    sbatch --nodes=2 --gpus-per-node=8 slurm/eval.sh checkpoint=DIR benchmark=p3i ...   (16 ranks)

The rank and world size come from the environment a launcher sets (``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, read by ``infra.ranks.Ranks`` for every stage); without them (or ``WORLD_SIZE=1``) ``eval.run`` is
the one process it always was, writing ``predictions.jsonl`` itself. With ``WORLD_SIZE=W > 1``:

1. **The split** (:func:`split`). Every record has a shard key: its id (the OVO-Bench official
   runner keys by video, so one video's probes stay in one causal pass: ``shard_key``). The distinct
   keys are sorted; the key at sorted position ``i`` goes to rank ``i mod W`` (``infra.ranks.shard``). Each rank's share keeps
   the records' file order, and its batches are the same fixed plan over that share on every run.
   The split depends only on the record set and ``W``, never on the file order or the host.
2. **Setup, rank 0 only**, holding the output folder's lock: the config check (and the setting aside
   of another weights' evaluation) of a one-process run, ``gt.jsonl``, and :func:`adopt`: rows found
   in prediction files of another layout (``predictions.jsonl``, or the shards of a launch with
   another world size) are copied, each into the shard of the rank that owns its id now, then the old
   shards are removed. So a resume with another world size re-splits safely: nothing finished is
   redone, nothing is lost (copy before delete: a crash part way redoes only the copy).
3. **Manifests**: each rank writes ``predictions.rank-R-of-W.manifest.json`` (a layout version, the
   records file, how many records, their sha256 over the whole records, its share, and what decides
   its predictions: ``eval.provenance.decides``, the config and the weights' sha256). After a
   barrier every rank reads all ``W`` of them (:func:`check_manifests`): ranks that read different
   record sets (another file on another node, a records file rewritten between node starts), run
   with another config (``threshold=0.5`` on one, ``0.05`` on another) or other weights, or write
   another manifest version stop at once with an error naming both manifests (and the key and both
   values), before anything is streamed.
4. **Streaming**: each rank appends its share to ``predictions.rank-R-of-W.jsonl``
   (``eval.store.PredictionLog``: fsynced per record, a torn last line cut on resume), skipping ids
   already there. A rank killed part way (its launcher then ends the others) leaves its shard with
   whatever finished; the rerun redoes only the missing records of every shard.
5. **Merge and score, rank 0 only**, after a barrier: :func:`merge` checks each shard holds exactly
   its share (no foreign id, none missing) and writes ``predictions.jsonl`` in record order
   (atomically); then scoring, ``metrics.json``, timelines and W&B exactly as one process does. The
   shards and manifests stay (a rerun finds everything done and only re-scores). The other ranks log
   their share and print nothing on stdout, so rank 0's metrics JSON is the launch's last line.

The barriers are the rank layer's (``infra.ranks``) on a gloo group over the launcher's
``MASTER_ADDR:MASTER_PORT`` (:class:`RankGroup`): gloo works the same on CPU hosts and GPU nodes
(nothing goes on a GPU), and its timeout (``EVAL_RANK_TIMEOUT_S``, default 7 days) is a plain wait,
unlike NCCL's watchdog, so a rank may finish hours before the slowest one. A rank that dies is
noticed by the launcher (torch's elastic agent ends the other workers), not by a timeout.

Multi-process threshold sweeps (``-m``) are refused: each point reads the other points' merged
predictions, and a sweep's points under one launch are not worth the bookkeeping; run the points one
launch each, or sweep in one process.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from data_builders.records import RecordError, Stream
from eval.provenance import describe_difference, digest, record_fingerprint
from eval.store import PredictionLog
from infra.files import write_text_atomic
from infra.ranks import Ranks, barrier, gather, shard

log = logging.getLogger("eval.ranks")
PREDICTIONS = "predictions.jsonl"
#: How long a barrier waits for the slowest rank (seconds), from the environment.
TIMEOUT_ENV = "EVAL_RANK_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 7 * 24 * 3600
#: The manifest layout: a rank that writes another one runs other code, and the launch stops.
MANIFEST_VERSION = 2


def shard_path(out: Path, rank: int, world: int) -> Path:
    """Where rank ``rank`` of ``world`` appends its predictions (``predictions.jsonl`` for one process)."""
    return out / (PREDICTIONS if world == 1 else f"predictions.rank-{rank}-of-{world}.jsonl")


def manifest_path(out: Path, rank: int, world: int) -> Path:
    return out / f"predictions.rank-{rank}-of-{world}.manifest.json"


def records_fingerprint(streams: list[Stream]) -> str:
    """sha256 of the records, whole and in order (what every rank must agree on)."""
    h = hashlib.sha256()
    for s in streams:
        h.update(record_fingerprint(s).encode() + b"\n")
    return h.hexdigest()


def split(
    streams: list[Stream], world: int, key: Callable[[Stream], str] = lambda s: s.id
) -> list[list[Stream]]:
    """The share of each rank: the distinct keys in sorted order, position ``i`` to rank ``i mod world``;
    each share in the records' order."""
    keys = sorted({key(s) for s in streams})
    owner = {k: r for r in range(world) for k in shard(keys, r, world)}
    shares: list[list[Stream]] = [[] for _ in range(world)]
    for s in streams:
        shares[owner[key(s)]].append(s)
    return shares


def write_manifest(
    out: Path, ranks: Ranks, streams: list[Stream], share: list[Stream], records: Path, decision: dict
) -> dict:
    """This rank's manifest (written atomically); returns it. ``decision`` is what decides this rank's
    predictions (``eval.provenance.decides``: the config and the weights' sha256)."""
    manifest = {
        "manifest": MANIFEST_VERSION,
        "rank": ranks.rank,
        "world": ranks.world,
        "records_file": str(records),
        "records": len(streams),
        "records_sha256": records_fingerprint(streams),
        "share": len(share),
        "host": os.uname().nodename,
        "decides_sha256": digest(decision),
        "decides": decision,
    }
    write_text_atomic(manifest_path(out, ranks.rank, ranks.world), json.dumps(manifest, indent=1) + "\n")
    return manifest


def _read_manifest(path: Path, rank: int, world: int) -> dict:
    if not path.exists():
        raise RecordError(f"rank {rank} of {world} wrote no manifest (did it start?)", file=path)
    try:
        manifest = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RecordError(f"rank {rank}'s manifest is not JSON: {exc}", file=path) from None
    if not isinstance(manifest, dict) or manifest.get("manifest") != MANIFEST_VERSION:
        version = manifest.get("manifest") if isinstance(manifest, dict) else None
        raise RecordError(
            f"rank {rank}'s manifest is of version {version!r}, this eval.run writes {MANIFEST_VERSION}: "
            "every rank must run the same code",
            file=path,
        )
    return manifest


def check_manifests(out: Path, world: int) -> list[dict]:
    """Every rank's manifest, all of the same record set, config and weights (``eval.provenance``),
    else a RecordError naming both files and, for the config, the first key that differs and both
    values."""
    manifests = [(manifest_path(out, r, world), None) for r in range(world)]
    manifests = [(path, _read_manifest(path, r, world)) for r, (path, _) in enumerate(manifests)]
    first_path, first = manifests[0]
    for path, m in manifests[1:]:
        if m["records_sha256"] != first["records_sha256"]:
            raise RecordError(
                f"the ranks disagree on the record set: rank {m['rank']} read {m['records']} records from "
                f"{m['records_file']} on {m['host']} (sha256 {m['records_sha256'][:12]}), rank 0 read "
                f"{first['records']} from {first['records_file']} on {first['host']} (sha256 "
                f"{first['records_sha256'][:12]}, {first_path}); give every rank the same records file",
                file=path,
            )
        if m["decides_sha256"] != first["decides_sha256"]:
            why = describe_difference(
                m["decides"],
                first["decides"],
                f"rank {m['rank']} on {m['host']}",
                f"rank 0 on {first['host']}",
            )
            raise RecordError(
                f"the ranks would predict differently: {why} ({first_path}); give every rank the same "
                "config and the same checkpoint files",
                file=path,
            )
    return [m for _, m in manifests]


def _foreign(out: Path, world: int) -> list[Path]:
    """Prediction files of another layout than ``world`` ranks."""
    own = {shard_path(out, r, world) for r in range(world)}
    found = sorted(out.glob("predictions.rank-*-of-*.jsonl"))
    if world > 1:
        found.insert(0, out / PREDICTIONS)
    return [p for p in found if p.exists() and p not in own]


def adopt(out: Path, shares: list[list[Stream]]) -> int:
    """Copy the rows of prediction files of another layout into this launch's files (each row into the
    shard of the rank that owns its id), then delete the other layout's shards; returns rows copied.
    A row whose id is not among the records is an error (the records changed under the run)."""
    world = len(shares)
    sources = _foreign(out, world)
    if not sources:
        return 0
    owner = {s.id: r for r, share in enumerate(shares) for s in share}
    targets = [PredictionLog(shard_path(out, r, world)) for r in range(world)]
    have = [t.done_ids() for t in targets]
    copied = 0
    for src in sources:
        found = PredictionLog(src)
        found.repair()  # a torn last line (a kill mid-write) is not a finished record
        for row in found.rows():
            r = owner.get(row["id"])
            if r is None:
                raise RecordError(
                    "a prediction for a record that is not among the records evaluated (were the "
                    "records changed since this run started?)",
                    file=src,
                    record=row["id"],
                )
            if row["id"] not in have[r]:
                targets[r].append(row)
                have[r].add(row["id"])
                copied += 1
    for src in sources:
        if src.name != PREDICTIONS:  # a shard of another world size: all its rows are copied now
            src.unlink()
            m = src.with_name(src.name.removesuffix(".jsonl") + ".manifest.json")
            m.unlink(missing_ok=True)
    if copied:
        names = ", ".join(p.name for p in sources)
        log.warning(
            "%s: took %d finished record(s) from %s into the %d-rank layout", out, copied, names, world
        )
    return copied


def merge(out: Path, streams: list[Stream], shares: list[list[Stream]]) -> list[dict]:
    """The rows of every rank's shard in record order, written to ``predictions.jsonl``; a shard holding
    an id of another share, or missing one of its own, is a RecordError naming it."""
    world = len(shares)
    by_id: dict[str, dict] = {}
    for rank, share in enumerate(shares):
        path = shard_path(out, rank, world)
        own = {s.id for s in share}
        rows = PredictionLog(path).rows()
        for row in rows:
            if row["id"] not in own:
                raise RecordError(
                    f"the record is not in rank {rank}'s share of {world} (the ranks split differently?)",
                    file=path,
                    record=row["id"],
                )
            by_id[row["id"]] = row
        missing = [s.id for s in share if s.id not in by_id]
        if missing:
            raise RecordError(
                f"rank {rank} of {world} left {len(missing)} of its {len(share)} records unwritten "
                f"(first: {missing[0]}); rerun the same command to finish them",
                file=path,
            )
    rows = [by_id[s.id] for s in streams]
    text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    write_text_atomic(out / PREDICTIONS, text)
    return rows


class RankGroup:
    """Barriers between the ranks of a launch: a gloo process group (see the module docstring)."""

    def __init__(self, ranks: Ranks):
        import torch.distributed as dist

        self.dist = dist
        self.ranks = ranks
        timeout = float(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT_S))
        for key in ("MASTER_ADDR", "MASTER_PORT"):
            if key not in os.environ:
                raise ValueError(
                    f"WORLD_SIZE={ranks.world} but no {key}: start the ranks with accelerate launch (or torchrun)"
                )
        self.own = not dist.is_initialized()
        if self.own:
            dist.init_process_group(
                "gloo", rank=ranks.rank, world_size=ranks.world, timeout=timedelta(seconds=timeout)
            )

    def barrier(self) -> None:
        barrier()

    def gather(self, obj) -> list:
        """Every rank's ``obj``, in rank order (``infra.ranks.gather``; also a barrier)."""
        return gather(obj)

    def close(self) -> None:
        if self.own and self.dist.is_initialized():
            self.dist.destroy_process_group()
