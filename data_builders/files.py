"""Writing files safely: whole or not at all, never outside their folder, one writer per folder.

- :func:`atomic_writer` / :func:`write_text_atomic`: write to a temporary file beside the target and
  rename it over the target at the end, so a crash or a full disk leaves the old file (or none),
  never a cut one.
- :func:`id_file_name`: a record id as a file name that cannot climb out of its folder.
- :class:`OutputLock`: an exclusive lock on an output folder; a second run on the same folder stops
  at once, naming the process that holds it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import platform
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")
LOCK_FILE = ".lock"


@contextlib.contextmanager
def atomic_writer(path: str | Path, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Open a temporary file beside ``path``; on a clean exit it is flushed, synced and renamed
    over ``path``, on an error it is removed and ``path`` is left as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, mode, encoding=None if "b" in mode else encoding) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text_atomic(path: str | Path, text: str) -> Path:
    with atomic_writer(path) as fh:
        fh.write(text)
    return Path(path)


def id_file_name(record_id: str, max_len: int = 80) -> str:
    """A file name (no suffix) for a record id: the id itself when it is a plain name, else its safe
    characters plus a short hash of the whole id, so an id like ``../../x`` or ``/abs/y`` never names
    a path outside the folder it is written in, and two ids never share a name.

    >>> id_file_name("toy-0-00006"), id_file_name("../../x/y"), id_file_name("/abs/x")
    ('toy-0-00006', 'x_y-3fe865b29a', 'abs_x-f454995a32')
    """
    safe = _SAFE_NAME.sub("_", record_id).strip("._")[:max_len]
    if safe == record_id and safe:
        return safe
    digest = hashlib.sha1(record_id.encode("utf-8")).hexdigest()[:10]
    return f"{safe}-{digest}" if safe else digest


class OutputLocked(RuntimeError):
    """Another run holds the output folder."""


class OutputLock:
    """An exclusive, non-blocking lock on ``<folder>/.lock`` (``fcntl.flock``), held until
    :meth:`release` or process exit (the OS drops it when the holder dies, so a crash never leaves a
    stale lock). The file names the holder (pid, host, command, start), which the error quotes.

        with OutputLock(out_dir, "eval.run"):
            ...
    """

    def __init__(self, folder: str | Path, what: str):
        self.folder = Path(folder)
        self.what = what
        self._fh: IO | None = None

    def acquire(self) -> OutputLock:
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / LOCK_FILE
        fh = open(path, "a+", encoding="utf-8")  # noqa: SIM115 - held open while the lock is held
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "another process"
            fh.close()
            raise OutputLocked(
                f"{self.folder} is in use by another run ({holder}); wait for it to finish or pick "
                "another output folder"
            ) from None
        fh.seek(0)
        fh.truncate()
        holder = {
            "pid": os.getpid(),
            "host": platform.node(),
            "what": self.what,
            "since": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }
        fh.write(json.dumps(holder) + "\n")
        fh.flush()
        self._fh = fh
        return self

    def release(self) -> None:
        if self._fh is not None:
            fcntl.flock(self._fh.fileno(), fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None

    def __enter__(self) -> OutputLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
