"""Writing a build's files: straight into a folder, or staged and moved into ``out`` in one step.

``write_outputs(out, records, errors)`` writes ``records.jsonl``, parquet shards, ``stats.json`` and
``errors.jsonl`` into a hidden staging folder inside ``out`` and then moves each file into ``out``
with one rename (:func:`commit`): a crash or a full disk while writing leaves ``out`` as it was,
and no file in ``out`` is ever half written. The build driver (``data_builders.build``) and the
mixture stage (``data_builders.mixture``, all its splits in one staging folder) both write this way.
A staging folder is held by its writer (:class:`~infra.files.WriterLock`); the next writer
into ``out`` removes those whose writer was killed before it could clean up.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from data_builders.record_io import write_jsonl, write_parquet
from data_builders.records import Stream
from data_builders.splits import RECORDS_JSONL
from data_builders.stats import compute_stats
from data_builders.toolkit import ConversionError
from infra.files import WriterLock, remove_dead_writes

#: Where a build over ``max_error_rate`` leaves its files, inside ``out``.
FAILED_DIR = "failed_build"


class BuildFailed(RuntimeError):
    """The build converted too few records (or could not start); the message says how many and why."""


def write_files(
    dest: Path,
    records: list[Stream],
    errors: list[ConversionError] | None = None,
    shard_size: int = 10_000,
    steps_per_second: float = 1.0,
    counts: dict[str, int] | None = None,
) -> list[Path]:
    """``records.jsonl``, parquet shards ``records-0000k-of-0000n.parquet``, ``stats.json`` and
    (when ``errors`` is given) ``errors.jsonl`` written straight into ``dest``."""
    if not isinstance(shard_size, int) or shard_size < 1:
        raise BuildFailed(f"shard_size must be a whole number of records >= 1, got {shard_size!r}")
    dest.mkdir(parents=True, exist_ok=True)
    files = [dest / RECORDS_JSONL]
    write_jsonl(files[0], records)
    files += write_parquet(dest, records, shard_size=shard_size)
    stats = dest / "stats.json"
    stats.write_text(
        json.dumps(compute_stats(records, steps_per_second, counts), indent=1, sort_keys=True) + "\n"
    )
    files.append(stats)
    if errors is not None:
        files.append(dest / "errors.jsonl")
        write_jsonl(files[-1], [e.to_dict() for e in errors])
    return files


#: Prefix of the staging folders inside ``out``.
STAGING_PREFIX = ".staging-"


@contextmanager
def staging_dir(out: Path) -> Iterator[Path]:
    """A fresh hidden folder inside ``out`` (created if needed) for a build's files; removed on
    exit, whatever happened (and ``out`` too, when this created it and it is still empty).

    The folder is held with a :class:`~infra.files.WriterLock` while it is in use, and the
    staging folders in ``out`` whose lock is free (their writer was killed before its cleanup ran)
    are removed, each named in the log; a live writer's staging folder is left alone."""
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
        held = WriterLock.folder(out, STAGING_PREFIX)
    except (FileExistsError, NotADirectoryError):
        raise BuildFailed(f"out={out} exists and is not a folder") from None
    except OSError as exc:
        raise BuildFailed(f"cannot write into out={out}: {exc}") from None
    tmp = held.path
    try:
        remove_dead_writes(p for p in sorted(out.glob(STAGING_PREFIX + "*")) if p != tmp)
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        held.release()
        if created and out.is_dir() and not any(out.iterdir()):
            out.rmdir()


def commit(staging: Path, out: Path) -> list[Path]:
    """Move a finished build from ``staging`` into ``out``: each file replaces its namesake in one
    rename (nothing is copied, so a full disk cannot cut a file), then shards of an older build
    that the new one does not have, and an older failed build, are removed. Returns the new paths."""
    names = sorted(p.name for p in staging.iterdir() if not p.name.startswith("."))
    order = sorted(names, key=lambda n: (n == RECORDS_JSONL, n == "stats.json", n))  # records last
    for name in order:
        src, dst = staging / name, out / name
        if src.is_dir() and dst.exists():
            os.replace(dst, staging / f".old-{name}")
        os.replace(src, dst)
    for old in out.glob("records-*-of-*.parquet"):
        if old.name not in names:
            old.unlink()
    failed = out / FAILED_DIR
    if failed.is_dir() and (failed / "errors.jsonl").exists():
        shutil.rmtree(failed)
    return [out / n for n in names]


def write_outputs(
    out: Path,
    records: list[Stream],
    errors: list[ConversionError] | None = None,
    shard_size: int = 10_000,
    steps_per_second: float = 1.0,
    counts: dict[str, int] | None = None,
) -> list[Path]:
    """:func:`write_files` into a staging folder, then :func:`commit` into ``out``: a failure while
    writing leaves what ``out`` held before. Old shards there are replaced or removed."""
    out = Path(out)
    with staging_dir(out) as tmp:
        write_files(tmp, records, errors, shard_size, steps_per_second, counts)
        return commit(tmp, out)
