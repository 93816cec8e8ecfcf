"""``python -m data_builders.bench [builders|cache|video] [options]``: builders (every figure) by
default; one JSON object of figures on the last line."""

import importlib
import sys

SUBCOMMANDS = {
    "builders": "data_builders.bench.builders",
    "cache": "data_builders.bench.cache",
    "video": "data_builders.bench.video",
}

if __name__ == "__main__":
    argv = sys.argv[1:]
    name = argv.pop(0) if argv and argv[0] in SUBCOMMANDS else "builders"
    importlib.import_module(SUBCOMMANDS[name]).main(argv)
