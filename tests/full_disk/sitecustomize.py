"""A disk that fills up, for the full-disk tests of the commands (``tests/full_disk.py`` puts this
folder first on ``PYTHONPATH`` of a subprocess): under ``FULL_DISK_DIR``, writes succeed until
``FULL_DISK_BYTES`` bytes were written by this process, then every write there raises
``OSError(ENOSPC)`` (the bytes that fit are kept, as a real disk keeps them). Files opened with
``open`` / ``io.open`` / ``Path.open`` and written with ``os.write`` are covered.

``FULL_DISK_ERRNO=EROFS`` (or another errno name: ``EACCES``) makes ``FULL_DISK_DIR`` a folder that
refuses every change instead, as a read-only file system does: opening a file there for writing
(``open``, ``os.open``), making or removing a folder, renaming, replacing or removing a file raises
that errno, naming the path; reading is untouched."""

from __future__ import annotations

import builtins
import errno
import io
import os

_DIR = os.environ.get("FULL_DISK_DIR")
_LEFT = [int(os.environ.get("FULL_DISK_BYTES", "0"))]
_ERRNO = getattr(errno, os.environ.get("FULL_DISK_ERRNO", "ENOSPC"))
_WRITES = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _under(path) -> bool:
    try:
        return os.path.realpath(os.fspath(path)).startswith(os.path.realpath(_DIR) + os.sep)
    except TypeError:  # an fd or an unusual path object
        return False


def _take(n: int) -> int:
    """How many of ``n`` bytes still fit; raises ENOSPC when none does."""
    if _LEFT[0] <= 0 and n:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    fit = min(n, _LEFT[0])
    _LEFT[0] -= fit
    return fit


class _Full:
    """A file object whose writes draw on the budget."""

    def __init__(self, fh, binary: bool):
        self._fh, self._binary = fh, binary

    def write(self, data):
        fit = _take(len(data.encode() if not self._binary and isinstance(data, str) else data))
        if not self._binary:
            fit = len(data) if fit >= len(data.encode()) else len(data.encode()[:fit].decode(errors="ignore"))
        if fit < len(data):
            self._fh.write(data[:fit])
            self._fh.flush()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return self._fh.write(data)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._fh.close()

    def __iter__(self):
        return iter(self._fh)

    def __getattr__(self, name):
        return getattr(self._fh, name)


def _refuse(*paths) -> None:
    """Raise ``_ERRNO`` naming the first of ``paths`` in the folder (none: nothing)."""
    for path in paths:
        if _under(path) or os.path.realpath(os.fspath(path)) == os.path.realpath(_DIR):
            raise OSError(_ERRNO, os.strerror(_ERRNO), os.fspath(path))


def _read_only() -> None:
    """Every change under the folder raises ``_ERRNO`` (see the module's docstring)."""
    _open, _os_open = io.open, os.open

    def open_(file, mode="r", *args, **kwargs):
        if any(c in mode for c in "wax+") and not isinstance(file, int):
            _refuse(file)
        return _open(file, mode, *args, **kwargs)

    def os_open(path, flags, *args, **kwargs):
        if flags & _WRITES:
            _refuse(path)
        return _os_open(path, flags, *args, **kwargs)

    def guard(call, n_paths):
        def guarded(*args, **kwargs):
            _refuse(*args[:n_paths])
            return call(*args, **kwargs)

        return guarded

    builtins.open = io.open = open_
    os.open = os_open
    for name, n in (("mkdir", 1), ("rmdir", 1), ("unlink", 1), ("remove", 1), ("rename", 2), ("replace", 2)):
        setattr(os, name, guard(getattr(os, name), n))


if _DIR and _ERRNO != errno.ENOSPC:
    _read_only()
elif _DIR:
    _open = io.open

    def _full_open(file, mode="r", *args, **kwargs):
        fh = _open(file, mode, *args, **kwargs)
        if any(c in mode for c in "wax+") and _under(file):
            return _Full(fh, "b" in mode)
        return fh

    _write = os.write

    def _full_write(fd, data):
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            path = ""
        if path and _under(path):
            fit = _take(len(data))
            if fit < len(data):
                _write(fd, bytes(data[:fit]))
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return _write(fd, data)

    builtins.open = io.open = _full_open
    os.write = _full_write
