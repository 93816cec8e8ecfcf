"""Imports go one way: train -> eval -> data_builders -> rewards -> infra, and never in a circle.

Every module of the five packages is parsed (no import is executed), and each import of a project
package, at module level or inside a function, and each ``importlib.import_module("...")`` with a
literal name, must name the module's own layer or a lower one. A private name (``_x``) is never
imported from another package.

No two modules import each other, directly or round a longer circle. A function-local import counts
as much as one at the top: deferring an import to call time hides a circle from the interpreter but
the two modules still need each other. An import under ``if TYPE_CHECKING:`` does not count (it never
runs). ``import a.b`` and ``from a import b`` (``b`` a module) are edges to ``a.b``; ``from a.b
import name`` is an edge to ``a.b``. A name computed at run time is not followed: ``eval.protocols``
imports its modules as ``import_module(f"{__name__}.{name}")``, they import ``eval.scoring`` and
``eval.runners``, which import ``eval.protocols`` last (the registration order its docstring
states), a circle this check does not see. Run as a script, it prints the violations and the
circles of a source tree:

    python tests/test_layering.py [ROOT]
"""

from __future__ import annotations

import ast
import sys
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Lower index = lower layer; a module may import its own layer and the ones below it.
LAYERS = ("infra", "rewards", "data_builders", "eval", "train")


def _is_type_checking(node: ast.AST) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return isinstance(test, ast.Name | ast.Attribute) and ast.unparse(test).endswith("TYPE_CHECKING")


def _imports(tree: ast.AST, *, runtime: bool = False) -> list[tuple[int, str, list[str]]]:
    """(line, imported module, imported names) of every import in a module; with ``runtime``, those
    under ``if TYPE_CHECKING:`` are left out."""
    found = []
    stack = [tree]
    while stack:
        node = stack.pop()
        if runtime and _is_type_checking(node):
            stack += node.orelse
            continue
        stack += ast.iter_child_nodes(node)
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


def _modules(root: Path) -> dict[str, Path]:
    """Dotted name -> file of every module of the layers (a package is its ``__init__.py``)."""
    out = {}
    for package in LAYERS:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def violations(root: Path = ROOT) -> list[str]:
    """Every import against the layer order, or of another package's private name."""
    out = []
    for path in _modules(root).values():
        rel = path.relative_to(root)
        package = rel.parts[0]
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
    return sorted(out)


def import_graph(root: Path = ROOT) -> dict[str, dict[str, str]]:
    """module -> {module it imports: where (``file:line``)}, over the modules of the layers."""
    modules = _modules(root)

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, dict[str, str]] = {}
    for name, path in modules.items():
        rel = path.relative_to(root)
        edges = graph.setdefault(name, {})
        for line, module, names in _imports(ast.parse(path.read_text(encoding="utf-8")), runtime=True):
            for target in [known(f"{module}.{n}") for n in names] or [known(module)]:
                if target is not None and target != name:
                    edges.setdefault(target, f"{rel}:{line}")
    return graph


def _strongly_connected(graph: dict[str, dict[str, str]]) -> list[list[str]]:
    """The groups of two or more modules that reach each other (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))
    return sorted(groups)


def circles(root: Path = ROOT) -> list[tuple[frozenset[str], str]]:
    """Each group of modules that import each other: (its modules, its shortest circle through its
    first module, written ``a -> b (a.py:3) -> a (b.py:7)``)."""
    graph = import_graph(root)
    out = []
    for group in _strongly_connected(graph):
        start, members = group[0], set(group)
        came: dict[str, str] = {}
        queue = deque([start])
        while start not in came:
            node = queue.popleft()
            for child in sorted(graph[node]):
                if child in members and child not in came:
                    came[child] = node
                    queue.append(child)
        path = [start]
        while path[-1] != start or len(path) == 1:
            path.append(came[path[-1]])
        path.reverse()
        steps = " -> ".join(f"{b} ({graph[a][b]})" for a, b in zip(path, path[1:], strict=False))
        out.append((frozenset(group), f"{start} -> {steps}"))
    return out


def test_imports_follow_the_layers():
    assert violations() == []


def test_no_import_circles():
    assert [text for _, text in circles()] == []


def _tree(tmp_path: Path) -> Path:
    for package in LAYERS:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    return tmp_path


def test_the_check_fails_on_an_upward_import(tmp_path):
    root = _tree(tmp_path)
    (root / "eval" / "engine.py").write_text("import json\n\n\ndef f():\n    from train.stage import train\n")
    (root / "data_builders" / "x.py").write_text(
        "import importlib\n\nimportlib.import_module('eval.watch')\nfrom rewards.prs import _timeline\n"
    )
    (root / "rewards" / "y.py").write_text("from infra.files import atomic_writer\nimport data_builders.x\n")
    assert violations(root) == [
        "data_builders/x.py:3: data_builders imports eval.watch (a higher layer)",
        "data_builders/x.py:4: imports private _timeline from rewards.prs",
        "eval/engine.py:5: eval imports train.stage (a higher layer)",
        "rewards/y.py:2: rewards imports data_builders.x (a higher layer)",
    ]


def test_the_check_fails_on_an_import_circle(tmp_path):
    root = _tree(tmp_path)
    (root / "eval" / "plugins").mkdir()
    (root / "eval" / "registry.py").write_text(
        "import json\n\n\ndef get(name):\n    import eval.plugins\n\n    return eval.plugins.ALL[name]\n"
    )
    (root / "eval" / "plugins" / "__init__.py").write_text("from eval.plugins import a, b\n")
    (root / "eval" / "plugins" / "a.py").write_text("from eval.registry import get\n")
    (root / "eval" / "plugins" / "b.py").write_text("")
    (root / "eval" / "one.py").write_text("from eval import two\n")
    (root / "eval" / "two.py").write_text("import importlib\n\nimportlib.import_module('eval.one')\n")
    (root / "eval" / "typed.py").write_text(
        "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from eval.hint import Hint\n"
    )
    (root / "eval" / "hint.py").write_text("import eval.typed\n")
    assert [text for _, text in circles(root)] == [
        "eval.one -> eval.two (eval/one.py:1) -> eval.one (eval/two.py:3)",
        "eval.plugins -> eval.plugins.a (eval/plugins/__init__.py:1) -> eval.registry (eval/plugins/a.py:1)"
        " -> eval.plugins (eval/registry.py:5)",
    ]
    assert violations(root) == []


if __name__ == "__main__":
    source = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT
    found = violations(source) + [f"import circle: {text}" for _, text in circles(source)]
    print("\n".join(found) or "imports follow the layers, in no circle")
    sys.exit(1 if found else 0)
