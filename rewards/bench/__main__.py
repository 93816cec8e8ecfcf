"""``python -m rewards.bench [prs] [options]``: prs by default; one JSON object of figures on the last line."""

import importlib
import sys

SUBCOMMANDS = {"prs": "rewards.bench.prs"}

if __name__ == "__main__":
    argv = sys.argv[1:]
    name = argv.pop(0) if argv and argv[0] in SUBCOMMANDS else "prs"
    importlib.import_module(SUBCOMMANDS[name]).main(argv)
