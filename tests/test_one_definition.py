"""A shared name has one definition: the names issue 59 found defined twice (two ``checkpoint_step``,
two ``CONTENT_SCORERS``, a registry and a tuple, two ``get_content_scorer``, two ``bench_sft``) are defined once in
the packages, so an import of one of them cannot pick the wrong one."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.test_layering import LEVEL, ROOT

ONE_EACH = ("checkpoint_step", "CONTENT_SCORERS", "get_content_scorer", "bench_sft")


def top_level_definitions(name: str, root: Path = ROOT) -> list[str]:
    """The modules of the packages under ``root`` that define ``name`` at module level."""
    found = []
    for package in LEVEL:
        for path in sorted((root / package).rglob("*.py")):
            for node in ast.parse(path.read_text()).body:
                if isinstance(node, ast.FunctionDef | ast.ClassDef):
                    names = [node.name]
                elif isinstance(node, ast.Assign):
                    names = [t.id for t in node.targets if isinstance(t, ast.Name)]
                elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                    names = [node.target.id]
                else:
                    names = []
                if name in names:
                    found.append(path.relative_to(root).as_posix())
    return found


@pytest.mark.parametrize("name", ONE_EACH)
def test_defined_once(name):
    assert len(top_level_definitions(name)) == 1, top_level_definitions(name)


def test_the_check_sees_a_second_definition(tmp_path):
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "a.py").write_text("def checkpoint_step(p):\n    return 1\n")
    (tmp_path / "engine").mkdir()
    (tmp_path / "engine" / "b.py").write_text("checkpoint_step: int = 3\nCONTENT_SCORERS = ()\n")
    assert top_level_definitions("checkpoint_step", tmp_path) == ["engine/b.py", "eval/a.py"]
