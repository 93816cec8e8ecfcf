"""Find a record's video under a root whatever its layout: one index of every video file by name.

Each source's default pattern names the file where the dataset's release puts it (HoloAssist
``<video_name>/Export_py/Video_pitchshift.mp4``, UCF-Crime ``<Class>/<name>``, ...). When no file is
there, the build driver indexes the video root once and looks the record up:

1. by the file stem of the pattern's path (``1_10_360p`` finds ``any/folder/1_10_360p.mp4``);
2. by each of the record's own names (e.g. its id), as a file stem (``1_10.mp4``) and as the name
   of a folder holding the file at any depth (``R007 July & Co/Export_py/Video_pitchshift.mp4``).

Several candidates are narrowed to the one whose path ends with the pattern's path, then to the one
with the pattern's file name; if still more than one remains, the lookup is an error that lists
them (:class:`AmbiguousVideo`): the build never guesses between two files.

The walk is recursive, follows symbolic links to folders (each folder once), skips hidden folders
(``.name``: the build's own staging folder, version-control folders) and keeps only files with a
video suffix (:data:`VIDEO_SUFFIXES`). Folder names are matched whole, spaces and ``&`` included,
and a ``%20``-quoted name also matches its unquoted form.

>>> import tempfile
>>> root = Path(tempfile.mkdtemp())
>>> for rel in ("Arson/Arson011_x264.mp4", "R1 & co/Export_py/Video_pitchshift.mp4", "R1 & co/notes.txt"):
...     (root / rel).parent.mkdir(parents=True, exist_ok=True); (root / rel).touch()
>>> index = VideoIndex(root)
>>> index.n_files, index.find("Arson011_x264.mp4"), index.find("x.mp4", ["R1%20&%20co"])
(2, 'Arson/Arson011_x264.mp4', 'R1 & co/Export_py/Video_pitchshift.mp4')
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import unquote

#: File suffixes (lower case) that the index keeps.
VIDEO_SUFFIXES = frozenset(
    {".mp4", ".mkv", ".webm", ".avi", ".mov", ".m4v", ".ts", ".mts", ".mpg", ".mpeg", ".flv", ".wmv", ".3gp"}
)


class AmbiguousVideo(LookupError):
    """A name that matches more than one video file; the message lists them all."""

    def __init__(self, name: str, root: Path, candidates: Sequence[str]):
        self.candidates = list(candidates)
        shown = ", ".join(self.candidates[:10]) + (" ..." if len(self.candidates) > 10 else "")
        super().__init__(
            f"{name!r} matches {len(self.candidates)} video files under {root}: {shown} "
            "(give the source's video pattern, or remove the extra files)"
        )


class VideoIndex:
    """Every video file under ``root``, by file stem and by each enclosing folder's name.

    Paths are root-relative strings with ``/`` separators. ``n_files`` is the number indexed.
    """

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.by_stem: dict[str, list[str]] = defaultdict(list)
        self.by_folder: dict[str, list[str]] = defaultdict(list)
        self.n_files = 0
        if self.root.is_dir():
            self._walk()

    def _walk(self) -> None:
        seen: set[tuple[int, int]] = set()
        top = os.stat(self.root)
        seen.add((top.st_dev, top.st_ino))
        stack: list[tuple[str, str, tuple[str, ...]]] = [(str(self.root), "", ())]
        by_stem, by_folder = self.by_stem, self.by_folder
        n = 0
        while stack:
            path, rel, folders = stack.pop()
            try:
                entries = list(os.scandir(path))
            except OSError:
                continue  # an unreadable folder: its videos are missing, as the errors will say
            for entry in entries:
                name = entry.name
                try:
                    is_dir = entry.is_dir()
                except OSError:
                    continue
                if is_dir:
                    if name.startswith("."):
                        continue
                    try:
                        st = entry.stat()
                    except OSError:
                        continue
                    key = (st.st_dev, st.st_ino)
                    if key in seen:
                        continue
                    seen.add(key)
                    stack.append((entry.path, f"{rel}{name}/", (*folders, name)))
                    continue
                dot = name.rfind(".")
                if dot <= 0 or name[dot:].lower() not in VIDEO_SUFFIXES:
                    continue
                relpath = rel + name
                by_stem[name[:dot]].append(relpath)
                for folder in folders:
                    by_folder[folder].append(relpath)
                n += 1
        self.n_files = n

    def find(self, wanted: str, names: Sequence[str] = ()) -> str | None:
        """The root-relative path of the one video meant by ``wanted`` (the pattern's path) or by
        ``names`` (file stems or folder names, tried in order), or ``None`` when nothing matches.
        Raises :class:`AmbiguousVideo` when the first name that matches matches several files."""
        wanted = wanted.replace("\\", "/").lstrip("/")
        file_name = wanted.rsplit("/", 1)[-1]
        stem = file_name[: file_name.rfind(".")] if file_name.rfind(".") > 0 else file_name
        tries: list[tuple[str, list[str]]] = [(stem, self.by_stem.get(stem, []))]
        for name in names:
            for variant in dict.fromkeys((name, unquote(name))):
                tries.append((variant, self.by_stem.get(variant, [])))
                tries.append((variant, self.by_folder.get(variant, [])))
        for name, candidates in tries:
            if candidates:
                return self._one(name, candidates, wanted, file_name)
        return None

    def _one(self, name: str, candidates: list[str], wanted: str, file_name: str) -> str:
        if len(candidates) == 1:
            return candidates[0]
        for keep in (
            lambda c: c == wanted or c.endswith("/" + wanted),
            lambda c: c.rsplit("/", 1)[-1] == file_name,
        ):
            narrowed = [c for c in candidates if keep(c)]
            if len(narrowed) == 1:
                return narrowed[0]
            if narrowed:
                candidates = narrowed
        raise AmbiguousVideo(name, self.root, sorted(candidates))
