"""Named components of one kind, each found where one table says it lives.

    PROTOCOLS = Registry("protocol", {"p3i": "benchmarks.protocols.p3i:PROTOCOL", ...})
    PROTOCOLS.get("p3i")      # imports benchmarks.protocols.p3i on first use, returns its PROTOCOL
    PROTOCOLS.names()         # ["egoserve", "estp", ...] in the table's order, importing nothing

Every registry of the project (benchmark protocols and their answer rules, data sources, content
scorers, experiment loggers, memory embedders, the stages' checks and planners, the root configs'
schemas, the SFT class-weight modes, the bench dispatchers' subcommands) is one :class:`Registry`
whose table, name -> ``"module:attr"``, is written in one place: where the registry is defined
(``tests/test_registries.py`` finds any other table of named functions or classes). A name exists as
soon as its line is in the table, whatever was imported before; its module is imported on the first
:meth:`Registry.get` of it, never earlier. A member that carries a ``name`` (a protocol, a source)
must carry the name it is listed under, so a table line and the definition it points to cannot
drift apart. ``tests/test_layering.py`` reads these tables as imports, so a table that points up a
layer, or closes a circle, fails like an import would.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Iterator, Mapping
from typing import Any


class Registry:
    """Components of one ``kind``, each listed as name -> ``"module:attr"``."""

    def __init__(self, kind: str, members: Mapping[str, str]) -> None:
        self.kind = kind
        self._where: dict[str, str] = {}
        self._loaded: dict[str, Any] = {}
        for name, where in members.items():
            self.add(name, where)

    def add(self, name: str, where: str) -> None:
        """List ``name`` as living at ``where`` (``"package.module:attr"``); a name already listed
        elsewhere is refused."""
        module, sep, attr = where.partition(":")
        if not (module and sep and attr):
            raise ValueError(f"{self.kind} {name!r}: {where!r} is not 'module:attr'")
        if self._where.get(name, where) != where:
            raise ValueError(f"{self.kind} {name!r} is registered twice ({self._where[name]}, {where})")
        self._where[name] = where

    def remove(self, name: str) -> None:
        """Unlist ``name`` (what :meth:`add` did, undone)."""
        self._where.pop(name, None)
        self._loaded.pop(name, None)

    def names(self) -> list[str]:
        """Every listed name, in the table's order; nothing is imported."""
        return list(self._where)

    def where(self, name: str) -> str:
        """The ``"module:attr"`` that ``name`` is listed at."""
        self._check(name)
        return self._where[name]

    def get(self, name: str) -> Any:
        """The member ``name``, its module imported on first use. An unknown name fails with the
        known ones and the closest match."""
        self._check(name)
        if name not in self._loaded:
            module, _, attr = self._where[name].partition(":")
            member = getattr(importlib.import_module(module), attr)
            own = getattr(member, "name", name)
            if isinstance(own, str) and own != name:
                raise ValueError(f"{self.kind} {name!r}: {self._where[name]} is named {own!r}")
            self._loaded[name] = member
        return self._loaded[name]

    def _check(self, name: str) -> None:
        if name in self._where:
            return
        close = difflib.get_close_matches(str(name), self._where, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise KeyError(f"unknown {self.kind} {name!r} (known: {', '.join(sorted(self._where))}){hint}")

    def __getitem__(self, name: str) -> Any:
        """``registry[name]``: :meth:`get`."""
        return self.get(name)

    def keys(self) -> list[str]:
        """:meth:`names` (so ``{**registry}`` and ``dict(registry)`` read every member)."""
        return self.names()

    def items(self) -> Iterator[tuple[str, Any]]:
        """(name, member) of every member, each imported."""
        return ((name, self.get(name)) for name in self.names())

    def __contains__(self, name: object) -> bool:
        return name in self._where

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._where)
