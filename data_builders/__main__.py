"""``python -m data_builders build source=toy out=/tmp/toy n=32 seed=0`` (also ``mix`` and ``frames``).

The first argument picks the stage; the rest are Hydra overrides for its root config
(``conf/build.yaml``, ``conf/mix.yaml``, ``conf/frames.yaml``).
"""

from __future__ import annotations

import re
import sys

#: ``data.sources.<name>.<key>=value``: a mixture's source, named on the command line whether or
#: not the data group lists it (Hydra would want ``+`` for a new one and refuse it for a listed one).
SOURCE_OVERRIDE = re.compile(r"data\.sources\.[A-Za-z0-9_.-]+=")

USAGE = """usage: python -m data_builders COMMAND [key=value ...]
  build   source=NAME annotations=PATH videos=DIR out=DIR [source keys]   one source -> stream records
  mix     data=mix_p3i data.root=DIR data.dir=DIR                          sample + split a mixture
          [data.sources.NAME.weight=W ...]                                 (add or change a source)
  frames  records=DIR [steps_per_second=1] | data=mix_p3i data.dir=DIR      fill the frame cache
"""


def source_overrides(args: list[str]) -> list[str]:
    """``args`` with each ``data.sources.<name>.<key>=v`` made ``++data.sources...``: set when the
    data group lists the source, added when it does not.

    >>> source_overrides(["data=own", "data.sources.mine.weight=1", "data.total=10"])
    ['data=own', '++data.sources.mine.weight=1', 'data.total=10']
    """
    return [f"++{a}" if SOURCE_OVERRIDE.match(a) else a for a in args]


def main(argv: list[str] | None = None) -> None:
    """Dispatch to the stage's Hydra main (imported lazily so ``--help`` stays fast)."""
    from data_builders import cli

    commands = {"build": cli.build_main, "mix": cli.mix_main, "frames": cli.frames_main}
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in commands:
        print(USAGE, file=sys.stderr)
        sys.exit(2)
    sys.argv = [f"data_builders {argv[0]}", *source_overrides(argv[1:])]
    from data_builders.config import BuildConfig, FramesConfig, MixConfig, with_source_schema
    from infra.entry import run_command

    prog, hydra_main = sys.argv[0], commands[argv[0]]
    if argv[0] == "build":  # typed by the build itself; only the named source's schema is stored
        run_command(
            prog,
            "build",
            BuildConfig,
            cli.build_command,
            hydra_main,
            transform=with_source_schema,
            validated=False,
        )
    elif argv[0] == "mix":  # composed and validated once: a mistyped key is one line, exit 2
        run_command(prog, "mix", MixConfig, cli.mix_command, hydra_main)
    else:
        run_command(prog, "frames", FramesConfig, cli.frames_command, hydra_main)


if __name__ == "__main__":
    main()
