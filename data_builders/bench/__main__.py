"""``python -m data_builders.bench [builders|cache|video] [options]``: builders (every figure) by
default; one JSON object of figures on the last line."""

import sys

from infra.registry import Registry

#: Each subcommand's ``main(argv)``.
SUBCOMMANDS = Registry(
    "bench",
    {
        "builders": "data_builders.bench.builders:main",
        "cache": "data_builders.bench.cache:main",
        "video": "data_builders.bench.video:main",
    },
)

if __name__ == "__main__":
    argv = sys.argv[1:]
    name = argv.pop(0) if argv and argv[0] in SUBCOMMANDS else "builders"
    SUBCOMMANDS.get(name)(argv)
