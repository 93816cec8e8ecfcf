"""No function outside the tests is longer than :data:`MAX_LINES` lines, ``def`` to its last line.

Every ``.py`` file of the tree is parsed (nothing is imported), except the tests and what a run or
an install leaves (:data:`SKIPPED`, hidden folders, ``__pycache__``). A function nested in another,
or a method, counts on its own, and its lines count in the one around it too. Run as a script, it
prints the functions over the limit of a source tree:

    python tests/test_function_length.py [ROOT]
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 60
#: Top-level folders not scanned: the tests, and what runs, sweeps and an install write.
SKIPPED = frozenset({"tests", "runs", "outputs", "multirun", "wandb", "data"})


def scanned(root: Path) -> list[Path]:
    """The ``.py`` files of the tree that the limit holds for."""
    out = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).parts
        if parts[0] in SKIPPED or any(p.startswith(".") or p == "__pycache__" for p in parts):
            continue
        out.append(path)
    return out


def _functions(tree: ast.AST, prefix: str = "") -> list[tuple[str, int, int]]:
    """(qualified name, first line, lines def to end) of every function in ``tree``."""
    found = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            name = prefix + node.name
            found.append((name, node.lineno, node.end_lineno - node.lineno + 1))
            found += _functions(node, name + ".")
        elif isinstance(node, ast.ClassDef):
            found += _functions(node, prefix + node.name + ".")
        else:
            found += _functions(node, prefix)
    return found


def long_functions(root: Path = ROOT, limit: int = MAX_LINES) -> list[str]:
    """``path:line: name is N lines`` for every function of the tree over ``limit`` lines."""
    out = []
    for path in scanned(root):
        rel = path.relative_to(root)
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(rel))
        for name, line, n in _functions(tree):
            if n > limit:
                out.append(f"{rel}:{line}: {name} is {n} lines (limit {limit})")
    return out


def test_no_function_over_the_limit():
    found = long_functions()
    assert not found, f"{len(found)} functions over {MAX_LINES} lines:\n" + "\n".join(found)


def _plant(body_lines: int, name: str, indent: str = "") -> str:
    """A function of ``body_lines`` + 1 lines (def included)."""
    body = "".join(f"{indent}    x{i} = {i}\n" for i in range(body_lines))
    return f"{indent}def {name}():\n{body}"


def test_a_planted_long_function_is_named(tmp_path: Path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "mod.py").write_text(
        _plant(59, "just_fits")  # 60 lines: at the limit
        + "\n\nclass Engine:\n"
        + _plant(60, "run", indent="    ")  # 61 lines
        + "\n\ndef outer():\n"
        + _plant(61, "inner", indent="    ")  # 62 lines, and outer 63
    )
    for skipped in ("tests", ".venv", "runs", "outputs"):
        (tmp_path / skipped).mkdir()
        (tmp_path / skipped / "long.py").write_text(_plant(100, "ignored"))
    assert long_functions(tmp_path) == [
        "pkg/mod.py:64: Engine.run is 61 lines (limit 60)",
        "pkg/mod.py:127: outer is 63 lines (limit 60)",
        "pkg/mod.py:128: outer.inner is 62 lines (limit 60)",
    ]


if __name__ == "__main__":
    found = long_functions(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT)
    print("\n".join(found) or f"no function over {MAX_LINES} lines")
    sys.exit(1 if found else 0)
