"""The benches: one dispatcher per package (``python -m <package>.bench <name> [options]``) naming
every bench module of the package, and no alias module beside it."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("eval", "train", "rewards", "data_builders")


@pytest.mark.parametrize("package", PACKAGES)
def test_the_package_dispatcher_names_every_bench_module(package, monkeypatch, capsys):
    dispatcher = f"{package}.bench.__main__"
    subcommands = runpy.run_module(dispatcher, run_name="listing")["SUBCOMMANDS"]
    modules = {p.stem for p in (ROOT / package / "bench").glob("*.py")} - {"__init__", "__main__"}
    assert [subcommands.where(n) for n in subcommands] == [f"{package}.bench.{n}:main" for n in subcommands]
    assert sorted(subcommands) == sorted(modules)
    assert not list((ROOT / package).glob("bench_*.py")), "an alias module beside the dispatcher"
    for name in subcommands:
        monkeypatch.setattr(sys, "argv", [f"{package}.bench", name, "--help"])
        with pytest.raises(SystemExit) as done:
            runpy.run_module(dispatcher, run_name="__main__", alter_sys=True)  # python -m <package>.bench
        assert done.value.code == 0
        assert capsys.readouterr().out.startswith(f"usage: python -m {package}.bench {name}"), name
