"""Every code reference in the docs, the README, the docstrings and the comments points at something
that exists.

File paths with a suffix (``eval/streaming.py``, ``conf/render/hd.yaml``, ``docs/protocols.md``) and
folders written with a trailing slash must exist in the repository; dotted names of the project's
packages (``eval.streaming.StreamingEngine``, ``python -m train.grpo``) must be a module, or a
top-level name (or a class member) of one. A dotted name whose second part is no module is read as
a config key (``train.output_dir``) and must be a key of that block. Python files are read for their
docstrings and comments only; modules are parsed, not imported.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from dataclasses import fields
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("train", "eval", "data_builders", "rewards")
TOP = PACKAGES + ("conf", "slurm", "tests", "docs")
ALT_TOP, ALT_PACKAGES = "|".join(TOP), "|".join(PACKAGES)
PATH = re.compile(rf"(?<![\w./-])((?:{ALT_TOP})/[\w./*<>{{}}-]*[\w/*>}}])")
DOTTED = re.compile(rf"(?<![\w./-])((?:{ALT_PACKAGES})(?:\.[A-Za-z_]\w*)+)")
#: Path-like text that names a pattern or an example location, not one file of the repository.
NOT_REPO = re.compile(r"[*<>{}]")
SUFFIXES = (".py", ".yaml", ".md", ".sh", ".json", ".toml", ".txt", ".csv", ".jsonl")


def _text(path: Path) -> str:
    """What a file says to a reader: a Python file's docstrings and comments, a YAML or shell file's
    comments, a Markdown file whole."""
    source = path.read_text(encoding="utf-8")
    if path.suffix == ".md":
        return source
    if path.suffix != ".py":
        return "\n".join(line for line in source.splitlines() if line.lstrip().startswith("#"))
    parts = [
        tok.string
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(source)):  # docstrings of modules, classes, functions, attributes
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            parts.append(node.value.value)
    return "\n".join(parts)


@cache
def _config_keys() -> dict[str, frozenset[str]]:
    """The keys of the root blocks that share a package's name (``train.output_dir``)."""
    from train.sft_config import TrainSettings

    return {"train": frozenset(f.name for f in fields(TrainSettings))}


def _sources() -> list[Path]:
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for top in PACKAGES + ("conf", "slurm"):
        files += sorted(p for p in (ROOT / top).rglob("*") if p.suffix in (".py", ".yaml", ".sh"))
    return files


@cache
def _names(module: Path) -> frozenset[str]:
    """Top-level names of a module, and ``Class.attr`` for its classes' attributes."""
    tree = ast.parse(module.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in tree.body:
        targets = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            targets = [node.name]
        elif isinstance(node, ast.Assign):
            targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            targets = [node.target.id]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            targets = [(a.asname or a.name).split(".")[0] for a in node.names]
        names.update(targets)
        if isinstance(node, ast.ClassDef):
            for item in ast.walk(node):
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names.add(f"{node.name}.{item.name}")
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    names.add(f"{node.name}.{item.target.id}")
    return frozenset(names)


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for k in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:k])
        module = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
        if not module.exists():
            continue
        rest = parts[k:]
        if not rest:
            return True
        if k == 1 and rest[0] in _config_keys().get(parts[0], ()):
            return True  # a config key of the block named like the package
        names = _names(module)
        return rest[0] in names and (len(rest) == 1 or ".".join(rest[:2]) in names or rest[0][0].islower())
    return False


def dangling(files: list[Path] | None = None) -> list[str]:
    out = []
    for f in files or _sources():
        text = _text(f)
        rel = f.relative_to(ROOT)
        for m in PATH.finditer(text):
            path = m.group(1).rstrip(".")
            if NOT_REPO.search(path) or not (path.endswith(SUFFIXES) or path.endswith("/")):
                continue
            if not (ROOT / path).exists():
                out.append(f"{rel}: {path} does not exist")
        for m in DOTTED.finditer(text):
            name = m.group(1).rstrip(".")
            if name.endswith(SUFFIXES) or _resolves(name):
                continue
            out.append(f"{rel}: {name} is not a module or a name of one")
    return out


def test_every_reference_exists():
    assert dangling() == []


def test_the_check_finds_a_dangling_reference(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text(
        "See eval/streaming.py and eval/nowhere.py; eval.streaming.StreamingEngine.run, eval.streaming.Nope.\n"
    )
    found = [line.split(": ", 1)[1] for line in dangling_in(doc)]
    assert found == ["eval/nowhere.py does not exist", "eval.streaming.Nope is not a module or a name of one"]


def dangling_in(path: Path) -> list[str]:
    """:func:`dangling` of a file outside the repository (the test above)."""
    text = path.read_text()
    tmp = ROOT / "docs" / ".check.md"
    tmp.write_text(text)
    try:
        return dangling([tmp])
    finally:
        tmp.unlink()
