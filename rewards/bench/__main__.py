"""``python -m rewards.bench [prs] [options]``: prs by default; one JSON object of figures on the last line."""

import sys

from infra.registry import Registry

#: Each subcommand's ``main(argv)``.
SUBCOMMANDS = Registry(
    "bench",
    {"prs": "rewards.bench.prs:main"},
)

if __name__ == "__main__":
    argv = sys.argv[1:]
    name = argv.pop(0) if argv and argv[0] in SUBCOMMANDS else "prs"
    SUBCOMMANDS.get(name)(argv)
