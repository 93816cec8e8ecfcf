"""Stream records on disk: JSON Lines (one record per line, keys in a fixed order) and parquet shards
that ``datasets.load_dataset("parquet", ...)`` loads; where a record's video file is. Reading
validates every record (:meth:`data_builders.records.Stream.from_dict`); invalid input raises
:class:`~data_builders.records.RecordError` naming the file, the record (id or line) and the field.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from data_builders.records import RecordError, Stream, no_duplicate_keys
from infra.files import atomic_writer


def iter_jsonl(path: str | Path) -> Iterator[tuple[int, Any]]:
    """Yield (line number, parsed object) for each non-blank line; bad JSON, or a key given twice in
    one object (:func:`~data_builders.records.no_duplicate_keys`), names file and line."""
    path = Path(path)
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise RecordError(
                    f"not UTF-8 text ({exc.reason} at byte {exc.start})", file=path, record=f"line {lineno}"
                ) from None
            if not line.strip():
                continue
            try:
                yield lineno, json.loads(line, object_pairs_hook=no_duplicate_keys)
            except RecordError as err:
                raise err.located(file=path, record=f"line {lineno}") from None
            except json.JSONDecodeError as exc:
                raise RecordError(f"invalid JSON: {exc.msg}", file=path, record=f"line {lineno}") from None
            except RecursionError:
                raise RecordError(
                    "invalid JSON: nested too deeply to parse", file=path, record=f"line {lineno}"
                ) from None
            except ValueError as exc:  # e.g. an integer literal over the interpreter's digit limit
                raise RecordError(f"invalid JSON: {exc}", file=path, record=f"line {lineno}") from None


def load_items(path: str | Path, parse: Callable[[Any], Any], kind: str) -> list:
    """Every row of a ``.jsonl`` file, a ``.parquet`` file or a shard dir, parsed by ``parse`` (an
    object with an ``id``); a bad row or a repeated id names the file and the line."""
    path = Path(path)
    if not path.exists():
        raise RecordError(f"{kind} file does not exist", file=path)
    if path.suffix == ".parquet" or path.is_dir():
        rows = enumerate(_read_parquet_rows(path), start=1)
    else:
        rows = iter_jsonl(path)
    out, seen = [], {}
    for lineno, row in rows:
        try:
            item = parse(row)
        except RecordError as err:
            raise err.located(file=path, record=f"line {lineno}") from None
        if item.id in seen:
            raise RecordError(
                f"duplicate id (first seen on line {seen[item.id]})", file=path, record=item.id, field="id"
            )
        seen[item.id] = lineno
        out.append(item)
    return out


def load_streams(path: str | Path) -> list[Stream]:
    """Read and validate stream records from a ``.jsonl`` file, a ``.parquet`` file or a shard dir."""
    return load_items(path, Stream.from_dict, "records")


def write_jsonl(path: str | Path, items: Iterable[Any]) -> int:
    """Write each item (a dict, or a record with ``to_dict``) as one JSON object per line, keys in a
    fixed order so output is byte-reproducible, whole or not at all (``files.atomic_writer``: a crash
    or a full disk leaves the previous file)."""
    n = 0
    with atomic_writer(path) as fh:
        for item in items:
            row = item if isinstance(item, dict) else item.to_dict()
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
            n += 1
    return n


def stream_to_row(stream: Stream) -> dict[str, Any]:
    """A flat row for parquet: nested targets/history as lists of structs, meta as a JSON string."""
    row = stream.to_dict()
    row["meta"] = json.dumps(stream.meta, sort_keys=True)
    row["targets"] = [
        {**t, "window": t["window"] if t["window"] is not None else None} for t in row["targets"]
    ]
    return row


def _parquet_schema():
    import pyarrow as pa

    target = pa.struct(
        [
            ("time", pa.float64()),
            ("content", pa.string()),
            ("window", pa.list_(pa.float64())),
            ("label", pa.string()),
            ("category", pa.string()),
        ]
    )
    history = pa.struct([("time", pa.float64()), ("text", pa.string())])
    return pa.schema(
        [
            ("id", pa.string()),
            ("source", pa.string()),
            ("task", pa.string()),
            ("video", pa.string()),
            ("clip_start", pa.float64()),
            ("clip_end", pa.float64()),
            ("instruction", pa.string()),
            ("instruction_time", pa.float64()),
            ("targets", pa.list_(target)),
            ("history", pa.list_(history)),
            ("video_offset", pa.float64()),
            ("meta", pa.string()),
        ]
    )


def write_parquet(
    out_dir: str | Path, streams: list[Stream], shard_size: int = 10_000, prefix: str = "records"
) -> list[Path]:
    """Write ``prefix-00000-of-0000N.parquet`` shards; returns their paths."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    n_shards = max(1, math.ceil(len(streams) / shard_size))
    paths = []
    for k in range(n_shards):
        chunk = streams[k * shard_size : (k + 1) * shard_size]
        table = pa.Table.from_pylist([stream_to_row(s) for s in chunk], schema=_parquet_schema())
        path = out_dir / f"{prefix}-{k:05d}-of-{n_shards:05d}.parquet"
        pq.write_table(table, path)
        paths.append(path)
    return paths


def _read_parquet_rows(path: Path) -> Iterator[dict]:
    import pyarrow.parquet as pq

    files = sorted(path.glob("*.parquet")) if path.is_dir() else [path]
    if not files:
        raise RecordError("a folder of records holds no parquet shards (records-*.parquet)", file=path)
    for f in files:
        yield from pq.read_table(f).to_pylist()


def resolve_video(
    stream: Stream, records_path: str | Path | None = None, video_root: str | Path | None = None
) -> Path:
    """The video file of a stream: absolute paths as they are; relative ones under ``video_root``
    if given, else next to the records file."""
    p = Path(stream.video)
    if p.is_absolute():
        return p
    if video_root is not None:
        return Path(video_root) / p
    if records_path is not None:
        base = Path(records_path)
        return (base if base.is_dir() else base.parent) / p
    return p
