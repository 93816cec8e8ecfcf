"""Where a split's records are: one rule for every stage that reads a built split or a source.

A built split (``python -m data_builders mix``) or source (``build``) is a directory holding
``records.jsonl`` and parquet shards (``records-0000k-of-0000n.parquet``); ``load_streams`` reads
either. A directory without ``records.jsonl`` is read from its shards.

>>> records_file("data/mix/train.jsonl")
PosixPath('data/mix/train.jsonl')
"""

from __future__ import annotations

from pathlib import Path

RECORDS_JSONL = "records.jsonl"


def records_file(path: str | Path) -> Path:
    """What ``load_streams`` reads for ``path``: a directory's ``records.jsonl``, else the directory
    itself (its parquet shards); anything else as it is (a missing one is named by the reader)."""
    path = Path(path)
    if path.is_dir() and (path / RECORDS_JSONL).exists():
        return path / RECORDS_JSONL
    return path


def split_records(split_dir: str | Path) -> Path:
    """The records of a built split (``records.jsonl``, else its parquet shards); a split with
    neither fails with the commands that build one."""
    path = records_file(split_dir)
    if path.is_file() or (path.is_dir() and any(path.glob("*.parquet"))):
        return path
    raise FileNotFoundError(
        f"no records in {split_dir}: build the data first, e.g. "
        "`python -m data_builders build source=toy out=data/built/toy` and "
        "`python -m data_builders mix data=toy`"
    )
