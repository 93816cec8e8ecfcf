"""Append-only predictions file that a killed evaluation resumes from, with no duplicate and no loss.

    log = PredictionLog(out_dir / "predictions.jsonl")
    done = log.done_ids()              # ids already written (a torn last line is cut off first)
    log.append({"id": ..., "replies": [...]})     # one line, flushed and fsynced before returning

A record's line is written whole and synced to disk as soon as its stream finishes, so after a
SIGKILL the file holds every finished record and at most one partial last line (no newline yet).
:meth:`PredictionLog.done_ids` truncates that partial line, so the rerun redoes exactly the records
without a complete line.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


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
        if not self.path.exists():
            return []
        with self.path.open(encoding="utf-8") as fh:
            return [json.loads(line) for line in fh if line.strip()]

    def done_ids(self) -> set[str]:
        """Ids with a complete line (after :meth:`repair`)."""
        self.repair()
        return {row["id"] for row in self.rows()}

    def append(self, row: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps(row, ensure_ascii=False) + "\n"
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())
