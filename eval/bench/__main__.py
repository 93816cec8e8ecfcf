"""``python -m eval.bench [engine|memory|gpu|profile|kv|recall|compile] [options]``: engine by default; JSON on the last line."""

import importlib
import sys

SUBCOMMANDS = {
    "engine": "eval.bench.engine",
    "memory": "eval.bench.memory",
    "gpu": "eval.bench.gpu",
    "profile": "eval.bench.profile",
    "kv": "eval.bench.kv",
    "recall": "eval.bench.recall",
    "compile": "eval.bench.compile",
}

if __name__ == "__main__":
    argv = sys.argv[1:]
    name = argv.pop(0) if argv and argv[0] in SUBCOMMANDS else "engine"
    importlib.import_module(SUBCOMMANDS[name]).main(argv)
