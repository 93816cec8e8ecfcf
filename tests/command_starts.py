"""Start many ``python -m`` commands cheaply: one process imports the heavy third-party libraries
once (:data:`PRELOAD`: torch, transformers' Qwen3-VL, hydra, datasets), then forks a child per
command, two at a time. Each child imports the project's own modules itself and runs the module as
``__main__`` with its arguments (``runpy``, as ``python -m`` does); its exit status is the
command's (``SystemExit`` included, an uncaught exception 1 with its traceback).

    python -m tests.command_starts MODULE ARG ... [-- MODULE ARG ...]   # one JSON line per command

Each line: ``{"argv": [...], "rc": N, "tail": "<last 800 characters of stdout + stderr>"}``.
Used by tests/test_docs.py (every advertised command starts)."""

from __future__ import annotations

import importlib
import json
import os
import runpy
import sys
import tempfile
import traceback

#: Third-party modules only: the project's modules are imported fresh by every child.
PRELOAD = (
    "torch",
    "torch._dynamo",
    "transformers",
    "transformers.models.qwen3_vl.modeling_qwen3_vl",
    "transformers.trainer_utils",
    "datasets",
    "hydra",
    "omegaconf",
)
PARALLEL = 2


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)  # what the interpreter does with a message
    return 1


def _child(argv: list[str], out_path: str) -> None:
    """Run ``argv`` (module, args) as ``python -m`` would, output to ``out_path``; never returns."""
    code = 1
    try:
        fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        sys.argv = list(argv)
        runpy.run_module(argv[0], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def start_all(commands: list[list[str]]) -> list[dict]:
    """Each command's ``{"argv", "rc", "tail"}``, in the order given."""
    for name in PRELOAD:
        importlib.import_module(name)
    sys.stdout.flush()
    sys.stderr.flush()
    results: dict[int, dict] = {}
    running: dict[int, tuple[int, str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, argv in enumerate(commands):
            while len(running) >= PARALLEL:
                _reap(running, results)
            out_path = os.path.join(tmp, f"{i}.out")
            pid = os.fork()
            if pid == 0:
                _child(argv, out_path)
            running[pid] = (i, out_path)
        while running:
            _reap(running, results)
        for i, argv in enumerate(commands):
            results[i]["argv"] = argv
    return [results[i] for i in range(len(commands))]


def _reap(running: dict[int, tuple[int, str]], results: dict[int, dict]) -> None:
    pid, status = os.waitpid(-1, 0)
    i, out_path = running.pop(pid)
    with open(out_path, encoding="utf-8", errors="replace") as f:
        tail = f.read()[-800:]
    results[i] = {"rc": os.waitstatus_to_exitcode(status), "tail": tail}


def main(args: list[str]) -> int:
    commands, current = [], []
    for a in args:
        if a == "--":
            commands.append(current)
            current = []
        else:
            current.append(a)
    if current:
        commands.append(current)
    for row in start_all(commands):
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
