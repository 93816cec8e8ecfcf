"""Imports go one way: train -> eval -> data_builders -> rewards.

Every module of the four packages is parsed (no import is executed), and each import of a project
package, at module level or inside a function, and each ``importlib.import_module("...")`` with a
literal name, must name the module's own layer or a lower one. A private name (``_x``) is never
imported from another package. Run as a script, it prints the violations of a source tree:

    python tests/test_layering.py [ROOT]
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Lower index = lower layer; a module may import its own layer and the ones below it.
LAYERS = ("rewards", "data_builders", "eval", "train")


def _imports(tree: ast.AST) -> list[tuple[int, str, list[str]]]:
    """(line, imported module, imported names) of every import in a module."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module, [alias.name for alias in node.names]))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append((node.lineno, node.args[0].value, []))
    return sorted(found)


def violations(root: Path = ROOT) -> list[str]:
    """Every import against the layer order, or of another package's private name."""
    out = []
    for package in LAYERS:
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root)
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(rel))
            for line, module, names in _imports(tree):
                top = module.split(".")[0]
                if top not in LAYERS:
                    continue
                if LAYERS.index(top) > LAYERS.index(package):
                    out.append(f"{rel}:{line}: {package} imports {module} (a higher layer)")
                private = [n for n in names if n.startswith("_") and not n.startswith("__")]
                if top != package and private:
                    out.append(f"{rel}:{line}: imports private {', '.join(private)} from {module}")
    return out


def test_imports_follow_the_layers():
    assert violations() == []


def test_the_check_fails_on_an_upward_import(tmp_path):
    for package in LAYERS:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "eval" / "engine.py").write_text(
        "import json\n\n\ndef f():\n    from train.sft import train\n"
    )
    (tmp_path / "data_builders" / "x.py").write_text(
        "import importlib\n\nimportlib.import_module('eval.watch')\nfrom rewards.prs import _timeline\n"
    )
    assert violations(tmp_path) == [
        "data_builders/x.py:3: data_builders imports eval.watch (a higher layer)",
        "data_builders/x.py:4: imports private _timeline from rewards.prs",
        "eval/engine.py:5: eval imports train.sft (a higher layer)",
    ]


if __name__ == "__main__":
    found = violations(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT)
    print("\n".join(found) or "imports follow the layers")
    sys.exit(1 if found else 0)
