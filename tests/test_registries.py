"""One registration mechanism (issue 59, item 5): every set of named, pluggable implementations is an
``infra.registry.Registry`` (name -> ``"module:attr"``, docs/design.md "Adding a named component").

Every ``.py`` file of the tree is parsed (nothing is imported), as ``tests/test_function_length.py``
does; a module-level table that maps string names to functions or classes is a second registration
mechanism and fails here, naming the file, the line and the table: a dict literal or ``dict(...)``
call, or a tuple, list or set of ``(name, function)`` pairs. A value names a function or class when
it is a ``lambda``, a ``def`` or ``class`` of the module, a name imported with ``from ... import``
that is not a CONSTANT, or an attribute that is not a CONSTANT (``module.function``). Tables of data
(names to numbers, strings, sets of names) are not registries and pass. Run as a script, it prints
the tables of a source tree:

    python -m tests.test_registries [ROOT]
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from tests.test_function_length import scanned  # the same files the length limit holds for

ROOT = Path(__file__).resolve().parents[1]

#: Tables that stay, as ``<file stem>.<NAME>`` (a move to another folder keeps its entry), each with
#: the reason it is not (yet) a Registry.
ALLOWED: dict[str, str] = {}


def _bindings(tree: ast.Module) -> tuple[set[str], set[str]]:
    """(names the module defines with ``def``/``class``, names it imports with ``from ... import``)."""
    defined, imported = set(), set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, ast.ImportFrom):
            imported |= {a.asname or a.name for a in node.names}
    return defined, imported


def _names_code(value: ast.AST, defined: set[str], imported: set[str]) -> bool:
    """Whether ``value`` names a function or a class (or is a tuple holding one)."""
    if isinstance(value, ast.Lambda):
        return True
    if isinstance(value, ast.Name):
        return value.id in defined or (value.id in imported and not value.id.isupper())
    if isinstance(value, ast.Attribute):
        return not value.attr.isupper()
    if isinstance(value, ast.Tuple):
        return any(_names_code(v, defined, imported) for v in value.elts)
    return False


def _entries(value: ast.AST) -> list[tuple[ast.AST, ast.AST]]:
    """(key, value) of a table written as a literal: a dict, ``dict(k=v)``, or pairs ``(name, v)``."""
    if isinstance(value, ast.Dict):
        return [(k, v) for k, v in zip(value.keys, value.values, strict=True) if k is not None]
    if isinstance(value, ast.Call) and getattr(value.func, "id", None) in ("dict", "frozenset", "tuple"):
        pairs = [(ast.Constant(k.arg), k.value) for k in value.keywords if k.arg is not None]
        return pairs + [p for arg in value.args for p in _entries(arg)]
    if isinstance(value, (ast.Tuple, ast.List, ast.Set)):
        return [(e.elts[0], e.elts[1]) for e in value.elts if isinstance(e, ast.Tuple) and len(e.elts) >= 2]
    return []


def tables(path: Path) -> list[tuple[int, str]]:
    """(line, name) of every module-level table of ``path`` that maps string names to code."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    defined, imported = _bindings(tree)
    found = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        named = [
            v
            for k, v in _entries(value)
            if isinstance(k, ast.Constant) and isinstance(k.value, str) and _names_code(v, defined, imported)
        ]
        if named and isinstance(target, ast.Name):
            found.append((node.lineno, target.id))
    return found


def registries_elsewhere(root: Path) -> list[str]:
    """``path:line NAME`` of every table of named code that is not a Registry and not allowed."""
    return [
        f"{path.relative_to(root)}:{line} {name}"
        for path in scanned(root)
        for line, name in tables(path)
        if f"{path.stem}.{name}" not in ALLOWED
    ]


def test_every_table_of_named_code_is_a_registry():
    assert registries_elsewhere(ROOT) == []


def test_the_allowed_tables_still_exist():
    """An entry of :data:`ALLOWED` whose table became a Registry (or went away) is taken out."""
    present = {f"{p.stem}.{name}" for p in scanned(ROOT) for _, name in tables(p)}
    assert sorted(set(ALLOWED) - present) == []


def test_a_new_table_of_functions_is_found(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text(
        "from json import dumps\n"
        "from infra.registry import Registry\n"
        "DEFAULT = 3\n\n"
        "def some_function():\n    return 1\n\n"
        "class Thing:\n    pass\n\n"
        'FOO = {"a": some_function}\n'
        'BAR: dict = {"b": Thing, "c": 1}\n'
        "BAZ = dict(d=lambda: 2)\n"
        'PAIRS = (("e", dumps), ("f", 2))\n'
        'DATA = {"a": 1, "b": "text", "c": DEFAULT, **{"d": 4}}\n'
        'NAMES = frozenset({"a", "b"})\n'
        'REG = Registry("thing", {"a": "pkg.mod:some_function"})\n'
    )
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_mod.py").write_text('T = {"a": print}\n')  # tests are not scanned
    assert registries_elsewhere(tmp_path) == [
        "pkg/mod.py:11 FOO",
        "pkg/mod.py:12 BAR",
        "pkg/mod.py:13 BAZ",
        "pkg/mod.py:14 PAIRS",
    ]


if __name__ == "__main__":
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT
    print("\n".join(registries_elsewhere(root)))
