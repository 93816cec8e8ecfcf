"""The measurements: one dispatcher (``python -m perf <name> [options]``) naming every module of
``perf/`` that has a ``main``, none of them in a library package, and ``python -m eval.bench`` kept
as a forwarder that holds no measurement code."""

from __future__ import annotations

import ast
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_layering import LAYERS

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = [package for group in LAYERS for package in group if package != "perf"]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_the_dispatcher_names_every_measurement_module():
    subcommands = runpy.run_module("perf.__main__", run_name="listing")["SUBCOMMANDS"]
    with_main = {
        p.stem
        for p in (ROOT / "perf").glob("*.py")
        if any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in ast.parse(p.read_text()).body)
    }
    assert sorted(subcommands.where(n).removesuffix(":main") for n in subcommands) == sorted(
        f"perf.{m}" for m in with_main - {"__main__"}
    )
    assert [subcommands.where(n) for n in subcommands] == [f"perf.{n}:main" for n in subcommands]


@pytest.mark.parametrize("name", ["engine", "sft", "step_memory", "builders", "prs", "gpu_check"])
def test_each_name_answers_help_with_its_own_usage(name, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["perf", name, "--help"])
    with pytest.raises(SystemExit) as done:
        runpy.run_module("perf", run_name="__main__", alter_sys=True)  # python -m perf NAME --help
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: python -m perf {name}")


def test_no_name_lists_them_all_and_an_unknown_one_is_one_line_and_exit_2():
    listed = _run("-m", "perf")
    assert listed.returncode == 0, listed.stderr
    names = [line.split()[0] for line in listed.stdout.splitlines()[2:]]
    assert names[:3] == ["engine", "gpu", "profile"] and "gpu_check" in names and "prs" in names
    unknown = _run("-m", "perf", "engin")
    assert unknown.returncode == 2 and unknown.stdout == ""
    assert unknown.stderr.startswith("python -m perf: unknown name 'engin' (known: engine, gpu,")
    assert len(unknown.stderr.splitlines()) == 1


def test_no_library_package_holds_a_measurement_or_the_gpu_check():
    found = [
        str(p.relative_to(ROOT))
        for package in LIBRARY
        for p in (ROOT / package).rglob("*.py")
        if "bench" in p.parent.relative_to(ROOT).parts or p.stem in ("gpu_check", "gpu_probe", "probe_steps")
    ]
    assert found == []


def test_eval_bench_forwards_to_perf_and_holds_no_measurement_code():
    source = (ROOT / "eval" / "bench.py").read_text()
    tree = ast.parse(source)
    imported = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    imported += [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert sorted(imported) == ["runpy", "sys"]
    assert [n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)] == []
    # no name: the engine's full run (its options pass through); an old name: its new measurement
    engine = _run("-m", "eval.bench", "--help")
    assert engine.returncode == 0 and engine.stdout.startswith("usage: python -m perf engine")
    assert "--long-steps" in engine.stdout
    memory = _run("-m", "eval.bench", "memory", "--help")
    assert memory.returncode == 0 and memory.stdout.startswith("usage: python -m perf retrieval_memory")
    wrong = _run("-m", "eval.bench", "--no-such-option")
    assert wrong.returncode == 2 and "usage: python -m perf engine" in wrong.stderr
