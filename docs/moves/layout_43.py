"""The move of issue 43, as a script: the model library out of eval/, the benchmark protocols below both
stages, the cross-stage tools above them. Run once, from the repository root, on a clean tree:

    python docs/moves/layout_43.py           # moves, rewrites every reference, formats
    python docs/moves/layout_43.py --dry-run # prints what it would move

It is kept so that the move can be read (and re-run on a branch made before it). What moves:

- ``eval/engine/`` -> ``engine/``: the model, its inputs (render) and the streaming engine, with the
  model blocks every stage shares (``engine/config.py``), the pre-flight (``engine/preflight.py``)
  and what the engine says, ``Reply`` and ``Prediction`` (``engine/replies.py``, from
  ``data_builders/records.py``).
- ``eval/runners.py``, ``eval/scoring/``, ``eval/protocols/`` -> ``benchmarks/``, with
  ``BenchmarkConfig``/``ScoringConfig`` (``benchmarks/config.py``): what a benchmark is, used by
  ``eval.run`` and by GRPO's held-out evaluation alike.
- ``eval/tracking.py`` -> ``infra/tracking.py`` (loggers), its timeline plots -> ``eval/timelines.py``.
- ``eval/app*.py`` and ``eval/view.py`` -> ``eval/app/``: the demo server and the viewer together.
- ``train/demo.py``, ``train/plan.py``, ``train/sweeps.py``, ``train/config.py`` (every root's schema),
  ``train/bench/gpu_check.py`` -> ``pipeline/``: what spans training and evaluation.

Symbols move first (in the old paths), then modules; every ``import``/``from`` of a moved name, every
dotted module name and every repository path in the tracked text files follows, then ruff sorts the
imports, drops the ones a move left unused and formats.
"""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
import textwrap
from pathlib import Path

#: (module file, top-level names, destination file), in the old layout; applied in order.
SYMBOL_MOVES = [
    ("eval/scoring/judge.py", ["HttpBackend"], "eval/scoring/chat_client.py"),
    (
        "eval/scoring/embedding.py",
        ["DEFAULT_MODEL_PACKAGE", "default_model_path"],
        "eval/engine/memory/embedders.py",
    ),
    ("train/sweeps.py", ["SweepResult"], "pipeline/sweeps.py"),
    ("data_builders/records.py", ["Reply", "Prediction"], "eval/engine/replies.py"),
    ("data_builders/record_io.py", ["load_predictions"], "eval/engine/replies.py"),
    ("eval/tracking.py", ["plot_timeline", "plot_timelines"], "eval/timelines.py"),
    ("eval/config.py", ["LoggerConfig"], "eval/tracking.py"),
    ("eval/config.py", ["quiet_libraries"], "infra/entry.py"),
    (
        "eval/config.py",
        ["ModelConfig", "model_preset", "PlanSettings", "ModelBlocks", "DataBlocks"],
        "eval/engine/config.py",
    ),
    ("eval/config.py", ["_knob", "ScoringConfig", "BenchmarkConfig"], "eval/benchmark_config.py"),
]

#: The docstrings of the modules the symbol moves create.
NEW_MODULES = {
    "eval/timelines.py": "Per-record timelines as PNGs (matplotlib, Agg): P(</Response>) per step against the "
    "threshold, the fires and the target windows; ``eval.run`` draws its first ``timelines`` records.",
    "eval/engine/config.py": "The blocks of every root that runs the model: the model block "
    "(``ModelConfig``; ``model_preset`` reads a ``conf/model/`` file whole), the memory plan's "
    "settings, and the paths, model, logger, render and plan blocks every stage shares "
    "(``ModelBlocks``; ``DataBlocks`` adds the data mixture).",
    "eval/benchmark_config.py": "The benchmark block of ``eval.run`` and of GRPO's held-out evaluation "
    "(``BenchmarkConfig``) and the scoring settings it extends (``ScoringConfig``: each field is also "
    "a flag of ``python -m eval.score``).",
    "eval/engine/replies.py": "What the model says: a ``Reply`` (when, what, an optional category) and "
    "a stream's ``Prediction`` (its replies in time order), with their reader: what runners write and "
    "scorers read.",
    "pipeline/sweeps.py": "The end of a GRPO sweep: one JSON line of its table, the swept keys and each "
    "point's final and best scores (``eval.sweep_table``).",
}

#: (old path, new path): files and folders, applied in order with ``git mv``.
MODULE_MOVES = [
    ("eval/engine", "engine"),
    ("eval/preflight.py", "engine/preflight.py"),
    ("eval/benchmark_config.py", "benchmarks/config.py"),
    ("eval/runners.py", "benchmarks/runners.py"),
    ("eval/scoring/chat_client.py", "infra/chat_client.py"),
    ("eval/scoring", "benchmarks/scoring"),
    ("eval/protocols", "benchmarks/protocols"),
    ("eval/tracking.py", "infra/tracking.py"),
    ("eval/app_guard.py", "eval/app/guard.py"),
    ("eval/app_page.py", "eval/app/page.py"),
    ("eval/app_streams.py", "eval/app/streams.py"),
    ("eval/app.py", "eval/app/server.py"),
    ("eval/view.py", "eval/app/view.py"),
    ("train/demo.py", "pipeline/demo.py"),
    ("train/plan.py", "pipeline/plan.py"),
    ("train/config.py", "pipeline/config.py"),
    ("train/bench/gpu_check.py", "pipeline/gpu_check.py"),
]

#: New packages' docstrings.
PACKAGES = {
    "engine": "The model library both stages use: the model, its inputs (turn rendering, frames to "
    "pixels) and the causal streaming engine with its KV cache, probes and memory.",
    "benchmarks": "What a benchmark is: one protocol per benchmark (runner, scorer, official format), "
    "the scoring core and the benchmark config; used by eval.run and GRPO's held-out evaluation.",
    "pipeline": "What spans training and evaluation: the demo, the memory plan, sweeps, the GPU check "
    "and the schema of every root config.",
    "eval/app": "The demo server (python -m eval.app.server) and the run viewer (python -m eval.app.view).",
}

#: Literal edits after the moves: (file, old text, new text); each old text must be there.
PATCHES = [
    ("engine/memory/embedders.py", "        from engine.memory.embedders import default_model_path\n\n", ""),
    (
        "tests/test_layering.py",
        """#: Lower index = lower layer; a module may import its own layer and the ones below it.
LAYERS = ("infra", "rewards", "data_builders", "eval", "train")
""",
        """#: Lower index = lower layer; a module may import its own package and the layers below it. The
#: two stages, ``eval`` and ``train``, share a layer: neither imports the other.
LAYERS = (
    ("infra",),
    ("rewards",),
    ("data_builders",),
    ("engine",),
    ("benchmarks",),
    ("eval", "train"),
    ("pipeline",),
)
LEVEL = {package: level for level, group in enumerate(LAYERS) for package in group}
""",
    ),
    ("tests/test_layering.py", "    for package in LAYERS:\n", "    for package in LEVEL:\n"),
    (
        "tests/test_docs.py",
        'PACKAGES = ("train", "eval", "data_builders", "rewards", "infra")',
        'PACKAGES = ("pipeline", "train", "eval", "benchmarks", "engine", "data_builders", "rewards", "infra")',
    ),
    (
        "tests/test_own_data_and_model.py",
        'PROJECT = ("data_builders", "eval", "train", "rewards", "infra")',
        'PROJECT = ("data_builders", "engine", "benchmarks", "eval", "train", "pipeline", "rewards", "infra")',
    ),
    # ``engine`` is now a package: prose that calls an engine object ``engine`` reads as a reference
    ("engine/streaming.py", "    engine = StreamingEngine(", "    streamer = StreamingEngine("),
    ("engine/streaming.py", "engine.run([stream]", "streamer.run([stream]"),
    ("train/safe_load.py", "``engine.load_checkpoint``", "DeepSpeed's ``load_checkpoint``"),
    ("tests/eval/test_protocols.py", '(ROOT / "eval" / "protocols")', '(ROOT / "benchmarks" / "protocols")'),
    # a module one folder higher than before finds the repository one parent nearer
    ("pipeline/gpu_check.py", "Path(__file__).resolve().parents[2]", "Path(__file__).resolve().parents[1]"),
    ("engine/model.py", 'CONF = str(Path(__file__).resolve().parents[2] / "conf")\n', ""),
    ("pipeline/gpu_check.py", "", '\n\nif __name__ == "__main__":\n    main(sys.argv[1:])\n'),
    (
        "tests/test_layering.py",
        """            if top not in LAYERS:
                continue
            if LAYERS.index(top) > LAYERS.index(package):
                out.append(f"{rel}:{line}: {package} imports {module} (a higher layer)")""",
        """            if top not in LEVEL:
                continue
            if top != package and LEVEL[top] >= LEVEL[package]:
                out.append(f"{rel}:{line}: {package} imports {module} (a higher layer or its peer)")""",
    ),
    (
        "pyproject.toml",
        '"eval*", "infra*"]',
        '"eval*", "infra*", "engine*", "benchmarks*", "pipeline*"]',
    ),
    ("train/bench/__main__.py", '        "gpu_check": "pipeline.gpu_check:main",\n', ""),
    ("tests/test_layering.py", '"|".join(LAYERS)', '"|".join(LEVEL)'),
    ("tests/test_layering.py", '(a higher layer)"', '(a higher layer or its peer)"'),
    ("train/bench/__main__.py", "|pipeline|gpu_check]", "|pipeline]"),
    (
        "train/bench/__main__.py",
        "    python -m pipeline.gpu_check  # everything a GPU allocation needs to know, 8 min "
        "(pipeline/gpu_check.py)\n",
        "",
    ),
]
#: Text replaced everywhere after the module renames (commands whose shape changes).
COMMANDS = [
    ("train.bench gpu_check", "pipeline.gpu_check"),
    ('"-m", "train.bench", "gpu_check"', '"-m", "pipeline.gpu_check"'),
]

TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".sh", ".toml", ".in", ".cfg"}
TEXT_NAMES = {"Makefile", "run"}


def dotted(path: str) -> str:
    """``eval/engine`` -> ``eval.engine``; ``eval/score.py`` -> ``eval.score``; a package's
    ``__init__.py`` is the package."""
    p = Path(path)
    parts = p.with_suffix("").parts if p.suffix == ".py" else p.parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def tracked_text_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], capture_output=True, text=True, check=True).stdout.split()
    return [
        Path(f)
        for f in out
        if Path(f).exists()
        and (Path(f).suffix in TEXT_SUFFIXES or Path(f).name in TEXT_NAMES)
        and not f.startswith("docs/moves/")
    ]


# -- symbols ------------------------------------------------------------------------------------


def _node_names(node: ast.stmt) -> list[str]:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []


def _spans(text: str, tree: ast.Module, names: list[str]) -> list[tuple[int, int]]:
    """Line spans (0-based, end exclusive) of the top-level definitions ``names``, with their
    decorators and the comment lines right above them."""
    lines = text.splitlines()
    spans, found = [], set()
    for node in tree.body:
        hit = set(_node_names(node)) & set(names)
        if not hit:
            continue
        found |= hit
        start = min([d.lineno for d in getattr(node, "decorator_list", [])] + [node.lineno]) - 1
        while start > 0 and lines[start - 1].lstrip().startswith("#"):
            start -= 1
        spans.append((start, node.end_lineno))
    if set(names) - found:
        sys.exit(f"move: {sorted(set(names) - found)} not found at the top level")
    return sorted(spans)


def _bound(alias: ast.alias, node: ast.Import | ast.ImportFrom) -> str:
    if alias.asname:
        return alias.asname
    return alias.name.split(".")[0] if isinstance(node, ast.Import) else alias.name


def _needed_imports(tree: ast.Module, used: set[str], skip_module: str) -> list[str]:
    """The imports of a module (top level and under ``if TYPE_CHECKING:``) that bind a name of
    ``used``, each cut to those names; none from ``skip_module`` (the destination itself)."""
    out = []
    for node in tree.body:
        typing_only = isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING")
        for imp in node.body if typing_only else [node]:
            if not isinstance(imp, ast.Import | ast.ImportFrom):
                continue
            if isinstance(imp, ast.ImportFrom) and imp.module in (skip_module, "__future__"):
                continue
            keep = [a for a in imp.names if _bound(a, imp) in used]
            if not keep:
                continue
            names = ", ".join(_alias(a) for a in keep)
            line = f"import {names}" if isinstance(imp, ast.Import) else f"from {imp.module} import {names}"
            out.append(f"if TYPE_CHECKING:\n    {line}" if typing_only else line)
    if any(line.startswith("if TYPE_CHECKING") for line in out):
        out.insert(0, "from typing import TYPE_CHECKING")
    return out


def _names_in(code: str) -> set[str]:
    return {n.id for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Name)} | {
        ast.unparse(n).split(".")[0] for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Attribute)
    }


def move_symbols(src: str, names: list[str], dst: str) -> None:
    text = Path(src).read_text()
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    spans = _spans(text, tree, names)
    code = "\n\n".join("".join(lines[a:b]).rstrip("\n") for a, b in spans) + "\n"
    for a, b in reversed(spans):
        del lines[a:b]
    rest = "".join(lines)
    used = {n.id for n in ast.walk(ast.parse(rest)) if isinstance(n, ast.Name)} & set(names)
    used_by_moved = _names_in(code)
    imports = _needed_imports(tree, used_by_moved, dotted(dst))
    left = {n for node in tree.body for n in _node_names(node)} - set(names)
    if left & used_by_moved:  # what the moved code still needs from its old module
        imports.append(f"from {dotted(src)} import {', '.join(sorted(left & used_by_moved))}")
        print(f"move: {dst} imports {sorted(left & used_by_moved)} from {src}")
    dst_path = Path(dst)
    if dst_path.exists():
        old = dst_path.read_text()
        head, body = _split_head(old)
        new = head + "\n".join(imports) + "\n" + body.rstrip("\n") + "\n\n\n" + code
    else:
        dst_path.parent.mkdir(parents=True, exist_ok=True)
        doc = '"""' + textwrap.fill(NEW_MODULES[dst], width=100) + '"""\n\n'
        new = doc + "from __future__ import annotations\n\n" + "\n".join(imports) + "\n\n\n" + code
    dst_path.write_text(new)
    if used:
        head, body = _split_head(rest)
        rest = head + f"from {dotted(dst)} import {', '.join(sorted(used))}\n" + body
    Path(src).write_text(rest)
    subprocess.run(["git", "add", src, dst], check=True)


def _split_head(text: str) -> tuple[str, str]:
    """(the docstring and ``from __future__`` lines, the rest) of a module's text."""
    tree = ast.parse(text)
    end = 0
    for node in tree.body:
        is_doc = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and end == 0
        if is_doc or (isinstance(node, ast.ImportFrom) and node.module == "__future__"):
            end = node.end_lineno
        else:
            break
    lines = text.splitlines(keepends=True)
    return "".join(lines[:end]) + "\n", "".join(lines[end:])


def rewrite_symbol_imports(files: list[Path], src_mod: str, names: list[str], dst_mod: str) -> None:
    """``from src_mod import a, moved`` -> ``from src_mod import a`` + ``from dst_mod import moved``;
    the dotted ``src_mod.moved`` in any text -> ``dst_mod.moved``."""
    dotted_re = re.compile(rf"(?<![\w.]){re.escape(src_mod)}\.({'|'.join(map(re.escape, names))})\b")
    # the same import written as text (a ``python -c`` line, a docs snippet)
    text_re = re.compile(
        rf"from {re.escape(src_mod)} import ({'|'.join(map(re.escape, names))})(?=[;\s\"')]|$)"
    )
    table_re = re.compile(rf"(?<![\w.]){re.escape(src_mod)}:({'|'.join(map(re.escape, names))})\b")
    for path in files:
        text = path.read_text()
        new = dotted_re.sub(lambda m: f"{dst_mod}.{m.group(1)}", text)
        new = table_re.sub(lambda m: f"{dst_mod}:{m.group(1)}", new)  # a registry's "module:attr"
        new = text_re.sub(lambda m: f"from {dst_mod} import {m.group(1)}", new)
        if path.suffix == ".py":
            new = _split_from_imports(new, src_mod, names, dst_mod)
        if new != text:
            path.write_text(new)


def _split_from_imports(text: str, src_mod: str, names: list[str], dst_mod: str) -> str:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text
    hits = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and n.module == src_mod and {a.name for a in n.names} & set(names)
    ]
    lines = text.splitlines(keepends=True)
    for node in sorted(hits, key=lambda n: -n.lineno):
        indent = lines[node.lineno - 1][: node.col_offset]
        keep = [a for a in node.names if a.name not in names]
        move = [a for a in node.names if a.name in names]
        out = []
        if keep:
            out.append(f"{indent}from {src_mod} import {', '.join(_alias(a) for a in keep)}\n")
        out.append(f"{indent}from {dst_mod} import {', '.join(_alias(a) for a in move)}\n")
        tail = lines[node.end_lineno - 1][node.end_col_offset :]
        if tail.strip():  # a trailing comment stays on the last line
            out[-1] = out[-1].rstrip("\n") + "  " + tail.strip() + "\n"
        lines[node.lineno - 1 : node.end_lineno] = out
    return "".join(lines)


def _alias(a: ast.alias) -> str:
    return a.name if a.asname is None else f"{a.name} as {a.asname}"


# -- modules ------------------------------------------------------------------------------------


def move_module(old: str, new: str) -> None:
    Path(new).parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "mv", old, new], check=True)


def rewrite_module_names(files: list[Path], moves: list[tuple[str, str]]) -> None:
    """Every dotted module name, every ``from parent import leaf`` of a moved module and every
    repository path of the moves, longest first."""
    pairs = sorted(((dotted(o), dotted(n)) for o, n in moves), key=lambda p: -len(p[0]))
    paths = sorted(moves, key=lambda p: -len(p[0]))
    # one pass each, longest name first: a rewritten name is never matched again
    dotted_map, path_map = dict(pairs), dict(paths)
    dotted_re = re.compile(rf"(?<![\w.])({'|'.join(re.escape(o) for o, _ in pairs)})(?![\w])")
    # a path is not followed by a word, a hyphen or a suffix: eval/engine.py is not the folder eval/engine
    path_re = re.compile(rf"(?<![\w./])({'|'.join(re.escape(o) for o, _ in paths)})(?![\w-]|\.\w)")
    for path in files:
        text = path.read_text()
        new = text
        new = dotted_re.sub(lambda m: dotted_map[m.group(1)], new)
        new = path_re.sub(lambda m: path_map[m.group(1)], new)
        if path.suffix == ".py":  # after: "from eval.app import streams" is not rewritten again
            new = _from_parent_imports(new, pairs)
        new = _from_parent_text(new, pairs)
        if new != text:
            path.write_text(new)


def _from_parent_imports(text: str, pairs: list[tuple[str, str]]) -> str:
    """``from train.bench import gpu_check, sft`` -> ``from train.bench import sft`` and ``from
    pipeline import gpu_check``: a moved module imported from its parent package follows it."""
    moved = dict(pairs)
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text
    hits = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom)
        and n.level == 0
        and any(f"{n.module}.{a.name}" in moved for a in n.names)
    ]
    lines = text.splitlines(keepends=True)
    for node in sorted(hits, key=lambda n: -n.lineno):
        indent = lines[node.lineno - 1][: node.col_offset]
        keep = [a for a in node.names if f"{node.module}.{a.name}" not in moved]
        out = [f"{indent}from {node.module} import {', '.join(_alias(a) for a in keep)}\n"] if keep else []
        for a in node.names:
            new = moved.get(f"{node.module}.{a.name}")
            if new is None:
                continue
            bound = a.asname or a.name
            parent, _, leaf = new.rpartition(".")
            if not parent:
                out.append(f"{indent}import {new}" + (f" as {bound}" if bound != new else "") + "\n")
            else:
                out.append(
                    f"{indent}from {parent} import {leaf}" + (f" as {bound}" if bound != leaf else "") + "\n"
                )
        lines[node.lineno - 1 : node.end_lineno] = out
    return "".join(lines)


def _from_parent_text(text: str, pairs: list[tuple[str, str]]) -> str:
    """The same import written as text (a ``python -c`` line), where the module keeps its name."""
    for o, n in pairs:
        parent, _, leaf = o.rpartition(".")
        new_parent, _, new_leaf = n.rpartition(".")
        if parent and new_parent and leaf == new_leaf:
            text = re.sub(
                rf"from {re.escape(parent)} import {leaf}(?=[\s;\"')]|$)",
                f"from {new_parent} import {leaf}",
                text,
            )
    return text


def apply_patches() -> None:
    for file, old, new in PATCHES:
        path = Path(file)
        text = path.read_text()
        if old == "":
            path.write_text(text.rstrip("\n") + "\n" + new)
            continue
        if old not in text:
            sys.exit(f"move: patch for {file} does not apply: {old!r}")
        path.write_text(text.replace(old, new))


def new_packages() -> None:
    for pkg, doc in PACKAGES.items():
        init = Path(pkg) / "__init__.py"
        if not init.exists():
            init.parent.mkdir(parents=True, exist_ok=True)
            init.write_text(f'"""{doc}"""\n')
            subprocess.run(["git", "add", str(init)], check=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args()
    if args.dry_run:
        for src, names, dst in SYMBOL_MOVES:
            print(f"{src}: {', '.join(names)} -> {dst}")
        for old, new in MODULE_MOVES:
            print(f"{old} -> {new}")
        return
    for src, names, dst in SYMBOL_MOVES:
        move_symbols(src, names, dst)
        rewrite_symbol_imports(tracked_text_files(), dotted(src), names, dotted(dst))
    for old, new in MODULE_MOVES:
        move_module(old, new)
    files = tracked_text_files()
    rewrite_module_names(files, MODULE_MOVES)
    new_packages()  # after: their docstrings name the new modules already
    for old, new in COMMANDS:
        for path in files:
            text = path.read_text()
            if old in text:
                path.write_text(text.replace(old, new))
    apply_patches()
    ruff = [sys.executable, "-m", "ruff"]
    subprocess.run([*ruff, "check", "--fix", "--unsafe-fixes", "--select", "F401,I", "--quiet", "."])
    subprocess.run([*ruff, "format", "--quiet", "."], check=True)
    subprocess.run(["git", "add", "-A", "."], check=True)


if __name__ == "__main__":
    main()
