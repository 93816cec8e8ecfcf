"""``python -m eval.bench [engine|memory|gpu|profile|kv|recall|compile|long_stream] [options]``: engine by
default; one JSON object of figures on the last line."""

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
    "long_stream": "eval.bench.long_stream",
    "ranks": "eval.bench.ranks",
}

if __name__ == "__main__":
    argv = sys.argv[1:]
    name = argv.pop(0) if argv and argv[0] in SUBCOMMANDS else "engine"
    importlib.import_module(SUBCOMMANDS[name]).main(argv)
