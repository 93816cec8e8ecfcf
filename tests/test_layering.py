"""Imports go one way: perf -> pipeline -> train | eval -> benchmarks -> engine -> data_builders ->
metrics -> infra (train and eval are peers: neither imports the other), and never in a circle.

Every module of the packages is parsed (no import is executed), and each import of a project
package, at module level or inside a function, must name the module's own layer or a lower one. A
private name (``_x``) is never imported from another package.

What counts as an import: ``import a.b`` and ``from a import b`` (``b`` a module) are edges to
``a.b``; ``from a.b import name`` is an edge to ``a.b``. ``importlib.import_module(...)`` is one too:
with a literal name, an edge to that module; with a name built at run time from a package prefix
(``f"benchmarks.protocols.{name}"``, ``f"{__name__}.{name}"``, ``"benchmarks.protocols." + name``,
``"benchmarks.protocols.%s" % name``), an edge to every module of that package. A ``"module:attr"``
string naming a project module (the tables of ``infra.registry.Registry``, which import their
members on first use) is an edge to that module. An import under ``if TYPE_CHECKING:`` does not
count (it never runs). A name held in a variable is not followed (``infra/registry.py``'s own
``import_module(module)``: its tables are followed instead).

No two modules import each other, directly or round a longer circle. A function-local import counts
as much as one at the top: deferring an import to call time hides a circle from the interpreter but
the two modules still need each other. Run as a script, it prints the violations and the circles of
a source tree:

    python tests/test_layering.py [ROOT]
"""

from __future__ import annotations

import ast
import re
import sys
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Lower index = lower layer; a module may import its own package and the layers below it. The
#: two stages, ``eval`` and ``train``, share a layer: neither imports the other.
LAYERS = (
    ("infra",),
    ("metrics",),
    ("data_builders",),
    ("engine",),
    ("benchmarks",),
    ("eval", "train"),
    ("pipeline",),
    ("perf",),  # the measurements and the GPU check: tools over the library, imported by none of it
)
LEVEL = {package: level for level, group in enumerate(LAYERS) for package in group}
#: A ``"module:attr"`` string of a registry table.
MODULE_ATTR = re.compile(r"^((?:" + "|".join(LEVEL) + r")(?:\.\w+)*):[A-Za-z_]\w*$")
#: The mark of "every module of this package" after a package prefix.
EVERY = ".*"


def _is_type_checking(node: ast.AST) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return isinstance(test, ast.Name | ast.Attribute) and ast.unparse(test).endswith("TYPE_CHECKING")


def _import_module_target(call: ast.Call, own: str) -> str | None:
    """The module an ``importlib.import_module(arg)`` call imports: the literal name, or
    ``package.*`` for a name built from a package prefix (``own`` is the calling module's name, for
    ``f"{__name__}.{x}"``); None for a name this check cannot read."""
    arg = call.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    prefix = None
    if isinstance(arg, ast.JoinedStr) and arg.values:
        head = arg.values[0]
        if isinstance(head, ast.Constant) and isinstance(head.value, str):
            prefix = head.value
        elif isinstance(head, ast.FormattedValue) and ast.unparse(head.value) == "__name__":
            rest = arg.values[1] if len(arg.values) > 1 else None
            tail = rest.value if isinstance(rest, ast.Constant) and isinstance(rest.value, str) else ""
            prefix = own + tail
    elif isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Add | ast.Mod):
        left = arg.left
        while isinstance(left, ast.BinOp) and isinstance(left.op, ast.Add):
            left = left.left
        if isinstance(left, ast.Constant) and isinstance(left.value, str):
            prefix = left.value.split("%")[0] if isinstance(arg.op, ast.Mod) else left.value
    if prefix is None or "." not in prefix:
        return None
    return prefix.rpartition(".")[0] + EVERY


def _imports(tree: ast.AST, *, runtime: bool = False, own: str = "") -> list[tuple[int, str, list[str]]]:
    """(line, imported module, imported names) of every import in a module (``own``: its dotted
    name), ``importlib.import_module`` calls and ``"module:attr"`` strings included (``package.*``:
    every module of the package); with ``runtime``, those under ``if TYPE_CHECKING:`` are left out."""
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
            and isinstance(node.func, ast.Attribute | ast.Name)
            and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id) == "import_module"
            and node.args
        ):
            target = _import_module_target(node, own)
            if target is not None:
                found.append((node.lineno, target, []))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            match = MODULE_ATTR.match(node.value)
            if match:
                found.append((node.lineno, match.group(1), []))
    return sorted(found)


def _modules(root: Path) -> dict[str, Path]:
    """Dotted name -> file of every module of the layers (a package is its ``__init__.py``)."""
    out = {}
    for package in LEVEL:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def violations(root: Path = ROOT) -> list[str]:
    """Every import against the layer order, or of another package's private name."""
    out = []
    for own, path in _modules(root).items():
        rel = path.relative_to(root)
        package = rel.parts[0]
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(rel))
        for line, module, names in _imports(tree, own=own):
            module = module.removesuffix(EVERY)
            top = module.split(".")[0]
            if top not in LEVEL:
                continue
            if top != package and LEVEL[top] >= LEVEL[package]:
                out.append(f"{rel}:{line}: {package} imports {module} (a higher layer or its peer)")
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
        for line, module, names in _imports(
            ast.parse(path.read_text(encoding="utf-8")), runtime=True, own=name
        ):
            if module.endswith(EVERY):
                package = module.removesuffix(EVERY)
                targets = [m for m in modules if m.startswith(package + ".")] or [known(package)]
            else:
                targets = [known(f"{module}.{n}") for n in names] or [known(module)]
            for target in targets:
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
    for package in LEVEL:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    return tmp_path


def test_the_check_fails_on_an_upward_import(tmp_path):
    root = _tree(tmp_path)
    (root / "eval" / "engine.py").write_text("import json\n\n\ndef f():\n    from train.stage import train\n")
    (root / "data_builders" / "x.py").write_text(
        "import importlib\n\nimportlib.import_module('eval.watch')\nfrom metrics.prs import _timeline\n"
    )
    (root / "metrics" / "y.py").write_text("from infra.files import atomic_writer\nimport data_builders.x\n")
    assert violations(root) == [
        "data_builders/x.py:3: data_builders imports eval.watch (a higher layer or its peer)",
        "data_builders/x.py:4: imports private _timeline from metrics.prs",
        "eval/engine.py:5: eval imports train.stage (a higher layer or its peer)",
        "metrics/y.py:2: metrics imports data_builders.x (a higher layer or its peer)",
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


def test_the_check_follows_import_module_and_registry_tables(tmp_path):
    """A circle closed only through ``importlib.import_module`` with a name built at run time, or
    through a registry table's ``"module:attr"`` string, fails like one of plain imports."""
    root = _tree(tmp_path)
    for package in ("plugins", "tools", "parts", "bits"):
        (root / "eval" / package).mkdir()
    (root / "eval" / "plugins" / "__init__.py").write_text(
        "import importlib\n\n\ndef get(name):\n    return importlib.import_module(f'{__name__}.{name}')\n"
    )
    (root / "eval" / "plugins" / "a.py").write_text("from eval.plugins import get\n")
    (root / "eval" / "tools" / "__init__.py").write_text("")
    (root / "eval" / "tools" / "hammer.py").write_text("import eval.loader\n")
    (root / "eval" / "loader.py").write_text(
        "from importlib import import_module\n\n\ndef load(x):\n    return import_module(f'eval.tools.{x}')\n"
    )
    (root / "eval" / "parts" / "__init__.py").write_text("")
    (root / "eval" / "parts" / "wheel.py").write_text("from eval.concat import load\n")
    (root / "eval" / "concat.py").write_text(
        "import importlib\n\n\ndef load(x):\n    return importlib.import_module('eval.parts.' + x)\n"
    )
    (root / "eval" / "bits" / "__init__.py").write_text("")
    (root / "eval" / "bits" / "one.py").write_text("from eval.percent import load\n")
    (root / "eval" / "percent.py").write_text(
        "import importlib\n\n\ndef load(x):\n    return importlib.import_module('eval.bits.%s' % x)\n"
    )
    (root / "eval" / "table.py").write_text(
        "from infra.registry import Registry\n\nTHINGS = Registry('thing', {'x': 'eval.thing:THING'})\n"
    )
    (root / "eval" / "thing.py").write_text("from eval.table import THINGS\n\nTHING = 1\n")
    (root / "eval" / "free.py").write_text(
        "import importlib\n\n\ndef f(m):\n    return importlib.import_module(m)\n"
    )
    assert [text for _, text in circles(root)] == [
        "eval.bits.one -> eval.percent (eval/bits/one.py:1) -> eval.bits.one (eval/percent.py:5)",
        "eval.concat -> eval.parts.wheel (eval/concat.py:5) -> eval.concat (eval/parts/wheel.py:1)",
        "eval.loader -> eval.tools.hammer (eval/loader.py:5) -> eval.loader (eval/tools/hammer.py:1)",
        "eval.plugins -> eval.plugins.a (eval/plugins/__init__.py:5) -> eval.plugins (eval/plugins/a.py:1)",
        "eval.table -> eval.thing (eval/table.py:3) -> eval.table (eval/thing.py:1)",
    ]
    (root / "metrics" / "up.py").write_text("WHERE = {'judge': 'eval.thing:THING'}\n")
    assert violations(root) == ["metrics/up.py:1: metrics imports eval.thing (a higher layer or its peer)"]


if __name__ == "__main__":
    source = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT
    found = violations(source) + [f"import circle: {text}" for _, text in circles(source)]
    print("\n".join(found) or "imports follow the layers, in no circle")
    sys.exit(1 if found else 0)
