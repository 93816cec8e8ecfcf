"""Writing files safely: whole or not at all, never outside their folder, one writer per folder.

- :func:`atomic_writer` / :func:`write_text_atomic`: write to a temporary file beside the target and
  rename it over the target at the end, so a crash or a full disk leaves the old file (or none),
  never a cut one.
- :func:`id_file_name`: a record id as a file name that cannot climb out of its folder.
- :class:`OutputLock`: an exclusive lock on an output folder; a second run on the same folder stops
  at once, naming the process that holds it.
- :func:`waiting_lock`: an exclusive lock a process waits for, for work that runs once however many
  processes ask for it at the same time (building a shared cache entry).
- :class:`FolderWriteError`: a write the folder's disk refused (no space, read-only, not writable),
  as one line naming the folder and the reason, the free space when it is full (what the commands
  print, exit 2).
- :class:`WriterLock` / :func:`remove_dead_writes`: a writer holds a lock on the temporary file or
  folder it fills, so what a killed writer left behind (its lock is free) can be told from, and
  removed without touching, what a live one is still writing (its lock is held).
- :func:`json_lines`: the lines of a JSON Lines text, split at ``\n`` only.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import os
import platform
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO

log = logging.getLogger("data_builders")
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")
LOCK_FILE = ".lock"
#: The errors of a write that found no room: a full disk, a quota reached.
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
#: The errors of a write the folder refuses: no room, a read-only file system, a folder not writable,
#: a file over the file system's size limit.
WRITE_REFUSED_ERRNOS = DISK_FULL_ERRNOS | {errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG}


def free_space(folder: str | Path) -> str:
    """``"1.2 GiB free in <folder>"`` (GiB, MiB or KiB), or that it is unknown."""
    try:
        n = shutil.disk_usage(folder).free
    except OSError:
        return f"free space in {folder} unknown"
    for unit, power in (("GiB", 30), ("MiB", 20)):
        if n >= 2**power:
            return f"{n / 2**power:.1f} {unit} free in {folder}"
    return f"{n / 2**10:.1f} KiB free in {folder}"


class FolderWriteError(OSError):
    """A write into ``folder`` its disk refused (:data:`WRITE_REFUSED_ERRNOS`). The message names the
    folder, the file when known, and the reason: the space left when there is none (ENOSPC, EDQUOT),
    else the system's words ("read-only file system"); what the command wrote before stays whole."""

    def __init__(self, folder: str | Path, cause: OSError, what: str):
        name = f" ({cause.filename})" if cause.filename else ""
        if cause.errno in DISK_FULL_ERRNOS:
            head, fix = f"no space left writing in {folder}{name}; {free_space(folder)}", "free some space"
        else:
            reason = (cause.strerror or os.strerror(cause.errno)).lower()
            head, fix = (
                f"cannot write in {folder}{name}: {reason}",
                "make it writable (or give another folder)",
            )
        super().__init__(f"{head}: {what}; {fix} and rerun the same command to go on")
        self.errno, self.folder = cause.errno, Path(folder)  # no filename: str() stays the message

    @staticmethod
    def refused(exc: BaseException, folder: str | Path) -> bool:
        """Whether ``exc`` is a write refused in ``folder``, not named yet: any full disk, or a
        read-only / not writable / too large error on a file in ``folder`` (or of no file named)."""
        if isinstance(exc, FolderWriteError) or not isinstance(exc, OSError):
            return False
        if exc.errno in DISK_FULL_ERRNOS:
            return True
        if exc.errno not in WRITE_REFUSED_ERRNOS:
            return False
        if exc.filename is None:
            return True
        path, root = os.path.abspath(os.fsdecode(exc.filename)), os.path.abspath(folder)
        return path == root or path.startswith(root + os.sep)


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


def json_lines(text: str) -> list[str]:
    """The lines of a JSON Lines text: split at ``\\n`` alone (a trailing ``\\r`` dropped), never at
    the other breaks ``str.splitlines`` knows (U+2028, U+2029, U+0085, ``\\x1c``-``\\x1e``, ...),
    which JSON allows raw inside a string; a final ``\\n`` ends the last line, it opens none.

    >>> json_lines('{"a": "x\\u2028y"}\\r\\n{"b": 2}\\n')
    ['{"a": "x\\u2028y"}', '{"b": 2}']
    """
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


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
            holder = fh.read().strip()
            fh.close()
            raise OutputLocked(_in_use(self.folder, holder)) from None
        holder = {
            "pid": os.getpid(),
            "host": platform.node(),
            "what": self.what,
            "since": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }
        try:
            fh.seek(0)
            fh.truncate()
            fh.write(json.dumps(holder) + "\n")
            fh.flush()
        except OSError:  # a full disk: the lock is not taken, the next run finds it free
            with contextlib.suppress(OSError):
                fh.truncate(0)
            fh.close()
            raise
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


def _in_use(folder: Path, holder: str) -> str:
    return (
        f"{folder} is in use by another run ({holder or 'another process'}); wait for it to finish or "
        "pick another output folder"
    )


def refuse_if_held(folder: str | Path) -> None:
    """Raise :class:`OutputLocked`, as :meth:`OutputLock.acquire` would, when another process holds
    ``folder``'s lock now; creates and changes nothing. A command's front door calls it before
    anything (Hydra's ``.hydra/``, a log) is written into a folder that another run owns."""
    folder = Path(folder)
    try:
        fh = open(folder / LOCK_FILE, encoding="utf-8")  # noqa: SIM115 - closed below
    except OSError:  # no lock file: no run holds it
        return
    with fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OutputLocked(_in_use(folder, fh.read().strip())) from None
        fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


@contextlib.contextmanager
def waiting_lock(path: str | Path) -> Iterator[None]:
    """Hold an exclusive lock on the file ``path`` (created if missing), waiting while another
    process holds it. The OS drops it when the holder dies, so a crash never leaves it taken."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


class WriterLock:
    """An exclusive lock (``fcntl.flock``) a writer holds on the temporary file or folder it is
    filling, from its creation until it was moved into place or removed: :meth:`release` after
    that. The OS drops it when the writer dies, so :func:`remove_dead_writes` removes a path only
    once its writer is gone, never while it is still writing.

    ``create`` makes the path and returns it; it is called again in the rare case that a cleanup
    removed the path between its creation and the lock (until it is locked, a new path cannot be
    told from a dead writer's).
    """

    def __init__(self, create: Callable[[], Path], tries: int = 100):
        for _ in range(tries):
            path = create()
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            except FileNotFoundError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError:  # a file system without locks: no cleanup can take it either
                pass
            if _names(path, fd):
                self.path, self._fd = path, fd
                return
            os.close(fd)
        raise OSError(f"{path}: removed by another process {tries} times before it could be locked")

    @classmethod
    def file(cls, path: str | Path) -> WriterLock:
        """A lock on a temporary file ``path`` (created empty, or kept as it is if it exists)."""
        path = Path(path)

        def create() -> Path:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o644))
            return path

        return cls(create)

    @classmethod
    def folder(cls, parent: str | Path, prefix: str) -> WriterLock:
        """A lock on a new folder ``<parent>/<prefix><random>``."""
        return cls(lambda: Path(tempfile.mkdtemp(prefix=prefix, dir=parent)))

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _names(path: Path, fd: int) -> bool:
    """Whether ``path`` still names the file or folder open as ``fd``."""
    try:
        return os.path.samestat(os.fstat(fd), os.lstat(path))
    except FileNotFoundError:
        return False


def remove_dead_writes(paths: Iterable[Path]) -> list[Path]:
    """Remove each temporary file or folder of ``paths`` whose :class:`WriterLock` is free: its
    writer died (killed, out of memory) before it could move it into place or clean
    up. A path whose lock is held belongs to a live writer and is left alone, as is a symlink.
    Each removal is logged; returns the removed paths."""
    removed = []
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:  # gone meanwhile, a symlink, unreadable
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # held: its writer is alive (or the file system has no locks)
                continue
            if not _names(path, fd):  # moved into place (or replaced) since it was listed
                continue
            try:
                if stat.S_ISDIR(os.fstat(fd).st_mode):
                    shutil.rmtree(path)
                else:
                    path.unlink()
            except OSError as exc:
                log.warning("cannot remove %s, left by a writer that died: %s", path, exc)
                continue
        finally:
            os.close(fd)
        log.info("removed %s, left by a writer that died", path)
        removed.append(path)
    return removed
