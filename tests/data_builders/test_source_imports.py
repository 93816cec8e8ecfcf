"""A stage imports only the sources it builds (issue 59, item 4): importing a stage's entry or the
shared config blocks imports no ``data_builders.sources.<name>`` module; a source's module is imported
when a config names it (``source=<name>``), and only that one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _sources_imported(code: str) -> list[str]:
    """The source modules imported after ``code`` ran in a fresh interpreter."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(m for m in sys.modules if m.startswith('data_builders.sources.'))))"
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.splitlines()[-1])


STAGES = [
    "engine.config",
    "data_builders.config",
    "train.sft.run",
    "train.grpo.run",
    "eval.run",
    "pipeline.config",
]


@pytest.fixture(scope="module")
def sources_after() -> dict[str, list[str]]:
    """module -> the source modules imported once it and every module before it in ``STAGES`` were
    imported, in one fresh interpreter: the sources imported grow with each import, so an empty list
    means this module (alone too) and those before it imported none."""
    code = "import importlib, json, sys\nseen = {}\n"
    code += f"for m in {STAGES!r}:\n    importlib.import_module(m)\n"
    code += "    seen[m] = sorted(n for n in sys.modules if n.startswith('data_builders.sources.'))\n"
    code += "print(json.dumps(seen))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.parametrize("module", STAGES)
def test_importing_a_stage_imports_no_source(module, sources_after):
    assert sources_after[module] == []


def test_composing_a_build_imports_the_source_it_names_and_no_other():
    code = "from data_builders.config import compose_build\ncompose_build(['source=nexar', 'out=/tmp/x'])"
    assert _sources_imported(code) == ["data_builders.sources.nexar"]
