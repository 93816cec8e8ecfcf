"""Append-only predictions file that a killed evaluation resumes from, with no duplicate and no loss.

    log = PredictionLog(out_dir / "predictions.jsonl")
    done = log.done_ids()              # ids already written (a torn last line is cut off first)
    log.append({"id": ..., "replies": [...]})     # one line, flushed and fsynced before returning

A record's line is written whole and synced to disk as soon as its stream finishes, so after a
SIGKILL the file holds every finished record and at most one partial last line (no newline yet).
:meth:`PredictionLog.done_ids` truncates that partial line, so the rerun redoes exactly the records
without a complete line. A write that fails (a full disk) is cut back off at once and raises
:class:`PredictionWriteError`, naming the file and the free space: the file stays whole lines, and
the same command resumes once there is room.

The file is read as ``eval.score`` reads predictions: a line that is not JSON anywhere but at the end
(where a kill leaves it), or a second line for an id, is a :class:`~data_builders.records.RecordError`
naming the file and the line or id, never scored.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

from data_builders.record_io import iter_jsonl
from data_builders.records import RecordError
from infra.files import free_space, write_text_atomic


class PredictionWriteError(OSError):
    """A prediction line could not be written (a full disk, mostly); the file was left as it was."""

    def __init__(self, path: Path, record: str, kept: int, cause: OSError):
        free = free_space(path.parent)
        super().__init__(
            f"cannot append record {record} to {path} ({free}; is the disk full?): {cause}. "
            f"The {kept} record(s) before it are kept; free some space and rerun the same command to resume"
        )
        self.errno, self.path = cause.errno, path


class PredictionLog:
    """One JSON object per line, appended and fsynced per record."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def repair(self) -> int:
        """Cut a torn last line (no trailing newline, or not valid JSON); returns bytes removed."""
        if not self.path.exists():
            return 0
        data = self.path.read_bytes()
        keep = data.rfind(b"\n") + 1  # end of the last newline-terminated line
        if keep == len(data) and data:  # ends with a newline: the last line must also parse
            start = data.rfind(b"\n", 0, len(data) - 1) + 1
            try:
                json.loads(data[start:])
            except json.JSONDecodeError:
                keep = start
        if keep < len(data):
            with self.path.open("r+b") as fh:
                fh.truncate(keep)
                fh.flush()
                os.fsync(fh.fileno())
        return len(data) - keep

    def rows(self) -> list[dict[str, Any]]:
        """Every line, in file order; bad JSON names the file and line, a repeated id the first line."""
        if not self.path.exists():
            return []
        out, seen = [], {}
        for lineno, row in iter_jsonl(self.path):
            rid = row.get("id") if isinstance(row, dict) else None
            if not isinstance(rid, str) or not rid:
                raise RecordError(
                    f"expected an object with a string id, got {row!r:.80}",
                    file=self.path,
                    record=f"line {lineno}",
                )
            if rid in seen:
                raise RecordError(
                    f"duplicate id (first seen on line {seen[rid]}, again on line {lineno})",
                    file=self.path,
                    record=rid,
                    field="id",
                )
            seen[rid] = lineno
            out.append(row)
        return out

    def done_ids(self) -> set[str]:
        """Ids with a complete line (after :meth:`repair`)."""
        self.repair()
        return {row["id"] for row in self.rows()}

    def set_aside(self, ids: set[str], dest: Path) -> int:
        """Move the lines of ``ids`` to ``dest`` (written and synced first), then rewrite this file
        without them (atomically); returns the lines moved. A crash between the two leaves the lines
        in both places, never in neither."""
        rows = self.rows()
        moved = [row for row in rows if row["id"] in ids]
        if not moved:
            return 0
        write_text_atomic(dest, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in moved))
        kept = [row for row in rows if row["id"] not in ids]
        write_text_atomic(self.path, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in kept))
        return len(moved)

    def append(self, row: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = (json.dumps(row, ensure_ascii=False) + "\n").encode("utf-8")
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            start = os.lseek(fd, 0, os.SEEK_END)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            except OSError as exc:
                with contextlib.suppress(OSError):  # else the next done_ids() cuts it
                    os.ftruncate(fd, start)
                    os.fsync(fd)
                kept = self.path.read_bytes()[:start].count(b"\n")
                raise PredictionWriteError(self.path, row.get("id"), kept, exc) from exc
        finally:
            os.close(fd)
