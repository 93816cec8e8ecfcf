"""``python -m train.bench [sft|grpo|memory|pipeline] [options]``: sft by default; one JSON object of
figures on the last line.

    python -m train.bench sft        # SFT step throughput, vision tower frozen vs trained (train/bench/sft.py)
    python -m train.bench grpo       # rollouts with / without frame sharing, --compile (train/bench/grpo.py)
    python -m train.bench memory     # step memory, full vs selected logits (train/bench/memory.py)
    python -m train.bench pipeline   # SFT's input pipeline on the cache formats (train/bench/pipeline.py)
"""

import sys

from infra.registry import Registry

#: Each subcommand's ``main(argv)``.
SUBCOMMANDS = Registry(
    "bench",
    {
        "sft": "train.bench.sft:main",
        "grpo": "train.bench.grpo:main",
        "memory": "train.bench.memory:main",
        "pipeline": "train.bench.pipeline:main",
    },
)

if __name__ == "__main__":
    argv = sys.argv[1:]
    name = argv.pop(0) if argv and argv[0] in SUBCOMMANDS else "sft"
    SUBCOMMANDS.get(name)(argv)
