"""``python -m eval.bench [engine|memory|gpu|profile|kv|recall|compile|static|long_stream|ranks|frame_prep|vision] [options]``:
engine by default; one JSON object of figures on the last line."""

import sys

from infra.registry import Registry

#: Each subcommand's ``main(argv)``.
SUBCOMMANDS = Registry(
    "bench",
    {
        "engine": "eval.bench.engine:main",
        "memory": "eval.bench.memory:main",
        "gpu": "eval.bench.gpu:main",
        "profile": "eval.bench.profile:main",
        "kv": "eval.bench.kv:main",
        "recall": "eval.bench.recall:main",
        "compile": "eval.bench.compile:main",
        "static": "eval.bench.static:main",
        "long_stream": "eval.bench.long_stream:main",
        "ranks": "eval.bench.ranks:main",
        "frame_prep": "eval.bench.frame_prep:main",
        "vision": "eval.bench.vision:main",
    },
)

if __name__ == "__main__":
    argv = sys.argv[1:]
    name = argv.pop(0) if argv and argv[0] in SUBCOMMANDS else "engine"
    SUBCOMMANDS.get(name)(argv)
