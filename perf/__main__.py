"""``python -m perf <name> [options]``: one measurement (one JSON object of figures on its last
line); ``python -m perf`` lists the names, each with the first sentence of its module's docstring.

    python -m perf                        # the list
    python -m perf engine                 # the streaming engine's figures on the tiny model (CPU)
    python -m perf gpu_check --device cuda
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from infra.registry import Registry

#: Each measurement's ``main(argv)``, by name.
SUBCOMMANDS = Registry(
    "perf",
    {
        # the streaming engine and evaluation
        "engine": "perf.engine:main",
        "gpu": "perf.gpu:main",
        "profile": "perf.profile:main",
        "kv": "perf.kv:main",
        "compile": "perf.compile:main",
        "static": "perf.static:main",
        "long_stream": "perf.long_stream:main",
        "ranks": "perf.ranks:main",
        "frame_prep": "perf.frame_prep:main",
        "vision": "perf.vision:main",
        "retrieval_memory": "perf.retrieval_memory:main",
        "recall": "perf.recall:main",
        # training
        "sft": "perf.sft:main",
        "grpo": "perf.grpo:main",
        "step_memory": "perf.step_memory:main",
        "sft_input": "perf.sft_input:main",
        # data and rewards
        "builders": "perf.builders:main",
        "frame_cache": "perf.frame_cache:main",
        "video": "perf.video:main",
        "prs": "perf.prs:main",
        # a GPU machine's checks
        "gpu_check": "perf.gpu_check:main",
        "gpu_probe": "perf.gpu_probe:main",
    },
)


def summary(name: str) -> str:
    """The first sentence of ``name``'s module docstring, read without importing the module."""
    module = SUBCOMMANDS.where(name).split(":")[0]
    path = Path(__file__).resolve().parent / f"{module.split('.')[-1]}.py"
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    return doc.split("\n\n")[0].replace("\n", " ").split(". ")[0].removesuffix(".")


def listing() -> str:
    """Every name and what it measures, one a line."""
    width = max(map(len, SUBCOMMANDS))
    lines = [f"  {name:<{width}}  {summary(name)}" for name in SUBCOMMANDS]
    return "usage: python -m perf <name> [options]  (python -m perf <name> --help)\n\n" + "\n".join(lines)


def main(argv: list[str]) -> int:
    """Run ``argv[0]``'s ``main`` on the rest; 0 and the list for no name or ``--help``, 2 and one
    line naming the known ones for an unknown name."""
    if not argv or argv[0] in ("-h", "--help"):
        print(listing())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in SUBCOMMANDS:
        known = ", ".join(SUBCOMMANDS)
        print(f"python -m perf: unknown name {name!r} (known: {known})", file=sys.stderr)
        return 2
    SUBCOMMANDS.get(name)(rest)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
