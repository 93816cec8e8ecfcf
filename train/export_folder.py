"""Where ``train.export`` may write and how it puts a new export in place.

- :func:`check_out`: ``out`` must be new or empty, or (``replace=true``) an earlier export of this
  tool (its :data:`MARKER` lists every file it wrote, and nothing else is there); never the
  checkpoint, its run dir or any run dir, nor a folder inside or around one.
- :func:`write_export`: the export is written into a staging folder beside ``out``
  (``.<name>.export-<random>``, locked while it is filled), then swapped in: an atomic exchange
  (``renameat2(RENAME_EXCHANGE)``) with the earlier export, which is removed after. Where the file
  system has no exchange, the earlier export is renamed aside (``.<name>.old-<random>``), the new
  one renamed in, the old one removed; a kill between those two renames leaves ``out`` missing and
  the earlier export whole aside, and the next export moves it back first. A kill at any other
  moment leaves the old or the new export whole at ``out``; the next export removes the staging
  and set-aside folders their dead writers left (their locks are free), and nothing else.
- A full disk or a read-only folder is one line (:class:`~infra.files.FolderWriteError` /
  :class:`ExportError`); the staging folder is removed and ``out`` is as it was.
- Only folders of the export's names that hold its marker (or nothing) are ever removed: the marker
  is the first file of a staging folder and the last one rewritten.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import json
import os
import re
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from engine.checkpoints import model_dir, run_dir_of
from infra.files import DISK_FULL_ERRNOS, FolderWriteError, WriterLock, remove_dead_writes

#: The file every export holds: which tool wrote it and the files it wrote (relative paths).
MARKER = ".train_export.json"
WRITTEN_BY = "train.export"
#: How the Rust libraries (safetensors, tokenizers) end the text of an I/O error.
_RUST_IO_ERROR = re.compile(r"\(os error (\d+)\)")
#: errno values of a folder the export may not write in.
_NO_WRITE_ERRNOS = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})


class ExportError(ValueError):
    """An export that cannot be made as asked: the message names the folder or option and why."""


def _is_run_dir(path: Path) -> bool:
    return (path / "config.yaml").is_file() and (path / "run_info.json").is_file()


def _protected(src: Path) -> list[Path]:
    """The checkpoint, the model folder it loads and their run dirs (resolved)."""
    found = [src]
    with contextlib.suppress(FileNotFoundError):
        found.append(model_dir(src))
    found += [run for run in map(run_dir_of, list(found)) if run is not None]
    return [p.resolve() for p in found]


def check_place(src: Path, out: Path) -> None:
    """Refuse an ``out`` that is, holds or lies in the checkpoint or a run dir."""
    real = out.resolve()
    for p in _protected(src):
        if real == p or p in real.parents or real in p.parents:
            what = "run dir" if _is_run_dir(p) else "checkpoint"
            raise ExportError(f"out={out} is, holds or lies in the {what} {p}; export to a folder outside it")
    for p in [real, *real.parents]:
        if _is_run_dir(p):
            raise ExportError(f"out={out} is or lies in the run dir {p}; export to a folder outside it")


def _marker_files(out: Path) -> set[str] | None:
    """The files the export at ``out`` wrote (its marker), or None if no valid marker is there."""
    try:
        marker = json.loads((out / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(marker, dict) or marker.get("written_by") != WRITTEN_BY:
        return None
    files = marker.get("files")
    return {str(f) for f in files} if isinstance(files, list) else None


def _entries(folder: Path) -> list[Path]:
    """Every file, link and folder under ``folder`` (links not followed)."""
    return sorted(folder.rglob("*"))


def _not_written(out: Path, written: set[str]) -> list[str]:
    """What ``out`` holds that its export did not write (links count as not written)."""
    extra = []
    for p in _entries(out):
        rel = p.relative_to(out).as_posix()
        if p.is_symlink() or (not p.is_dir() and rel not in written and rel != MARKER):
            extra.append(rel)
    return extra


def check_out(src: Path, out: Path, replace: bool) -> None:
    """Refuse an ``out`` the export may not take (see the module's docstring), after undoing what
    a killed export left beside it (:func:`clean_after_kill`)."""
    check_place(src, out)
    with _as_one_line(out):
        clean_after_kill(out)
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise ExportError(f"out={out} is not a folder; export to a new or empty folder")
    held = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
    if not held:
        return
    shown = ", ".join(held[:5]) + (", ..." if len(held) > 5 else "")
    if not replace:
        raise ExportError(
            f"out={out} is not empty ({shown}); export to a new or empty folder, or pass "
            "replace=true to replace an earlier export of train.export there"
        )
    written = _marker_files(out)
    if written is None:
        raise ExportError(
            f"out={out} is not an export of train.export (no valid {MARKER}; it holds {shown}); "
            "replace=true replaces only an earlier export: export to a new or empty folder"
        )
    extra = _not_written(out, written)
    if extra:
        raise ExportError(
            f"out={out} holds files its export did not write ({', '.join(extra[:5])}); move them "
            "out first or export to a new or empty folder"
        )


def write_marker(folder: Path, weights: str | None, files: list[str] | None = None) -> None:
    """The marker: the tool that wrote ``folder`` and the files under it (written first, with no
    files, into a staging folder, and again last)."""
    if files is None:
        files = sorted(p.relative_to(folder).as_posix() for p in _entries(folder) if not p.is_dir())
        files = [f for f in files if f != MARKER]
    marker = {"written_by": WRITTEN_BY, "weights_sha256": weights, "files": files}
    (folder / MARKER).write_text(json.dumps(marker, indent=1) + "\n", encoding="utf-8")


def _staging(out: Path) -> str:
    return f".{out.name}.export-"


def _aside(out: Path) -> str:
    return f".{out.name}.old-"


def _is_ours(path: Path) -> bool:
    """A folder an export wrote: its marker is there, or it is empty (made, then killed)."""
    if path.is_symlink() or not path.is_dir():
        return False
    return _marker_files(path) is not None or not any(path.iterdir())


def _restore_aside(out: Path) -> None:
    """``out`` missing and an earlier export set aside by a swap that was killed: move it back."""
    for aside in sorted(out.parent.glob(_aside(out) + "*"), key=lambda p: p.stat().st_mtime, reverse=True):
        if _marker_files(aside) is None:
            continue
        fd = os.open(aside, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # its writer is alive: its swap goes on
            continue
        finally:
            os.close(fd)
        os.rename(aside, out)
        print(
            f"train.export: moved {aside} back to {out}: an export stopped while swapping it", file=sys.stderr
        )
        return


def clean_after_kill(out: Path) -> None:
    """Undo what a killed export left beside ``out``: an earlier export set aside is moved back,
    staging and set-aside folders whose writer is gone are removed (named on stderr)."""
    if not out.parent.is_dir():
        return
    if not out.exists():
        _restore_aside(out)
    left = [*out.parent.glob(_staging(out) + "*"), *out.parent.glob(_aside(out) + "*")]
    ours = [p for p in left if _is_ours(p)]  # a folder of these names not marked as ours stays
    for path in remove_dead_writes(sorted(ours)):
        print(f"train.export: removed {path}, left by an export that was stopped", file=sys.stderr)


def _exchange(a: Path, b: Path) -> bool:
    """Swap the folders ``a`` and ``b`` in one step (``renameat2(RENAME_EXCHANGE)``); False where
    the system or the file system has no such call."""
    fn = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if fn is None:
        return False
    at_fdcwd, rename_exchange = -100, 2
    if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _swap(staging: Path, out: Path) -> Path | None:
    """Put the staging folder at ``out``; returns where the earlier export now is (to remove)."""
    if not out.exists() or not any(out.iterdir()):
        os.rename(staging, out)  # onto nothing or an empty folder: one step
        return None
    if _exchange(staging, out):
        return staging
    fd = os.open(out, os.O_RDONLY)  # the set-aside export stays locked until it is removed
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        aside = Path(f"{out.parent / _aside(out)}{os.urandom(4).hex()}")
        os.rename(out, aside)
        try:
            os.rename(staging, out)
        except BaseException:
            os.rename(aside, out)
            raise
        shutil.rmtree(aside, ignore_errors=True)
    finally:
        os.close(fd)
    return None


def _one_line(exc: BaseException, out: Path) -> BaseException:
    """A full disk or a folder that takes no write as one line naming the folder; else ``exc``."""
    rust_io = _RUST_IO_ERROR.search(str(exc)) if not isinstance(exc, OSError) else None
    if rust_io:  # safetensors and tokenizers (Rust) report an I/O error as text: "... (os error 28)"
        code = int(rust_io.group(1))
        exc = OSError(code, os.strerror(code))
    if not isinstance(exc, OSError) or isinstance(exc, FolderWriteError):
        return exc
    folder = out.parent
    if exc.errno in DISK_FULL_ERRNOS:
        cause = OSError(exc.errno, exc.strerror)  # the staging file's name would only confuse
        return FolderWriteError(folder, cause, f"the export to {out} was not written and {out} is as it was")
    if exc.errno in _NO_WRITE_ERRNOS:
        return ExportError(f"cannot write in {folder}: {exc.strerror}; {out} is as it was")
    return exc


@contextlib.contextmanager
def _as_one_line(out: Path) -> Iterator[None]:
    """Raise a full disk or a folder that takes no write as :func:`_one_line`'s error."""
    try:
        yield
    except BaseException as exc:
        err = _one_line(exc, out)
        if err is exc:
            raise
        raise err from exc


def write_export(out: Path, write: Callable[[Path], None]) -> None:
    """``write(staging)`` fills a staging folder beside ``out`` (its marker first, with no files),
    which then replaces ``out``. A full disk or a folder that takes no write raises one line;
    ``out`` is as it was and the staging folder is gone."""
    with _as_one_line(out):
        out.parent.mkdir(parents=True, exist_ok=True)
        lock = WriterLock.folder(out.parent, _staging(out))
    with _as_one_line(out):
        try:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(lock.path, 0o777 & ~umask)  # as a folder made with mkdir: not mkdtemp's 0700
            write_marker(lock.path, None, [])
            write(lock.path)
            old = _swap(lock.path, out)
        except BaseException:
            shutil.rmtree(lock.path, ignore_errors=True)
            raise
        finally:
            lock.release()
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
