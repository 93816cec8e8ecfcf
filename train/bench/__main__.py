"""``python -m train.bench [sft|grpo|memory|pipeline|gpu_check] [options]``: sft by default; one JSON object of
figures on the last line.

    python -m train.bench sft        # SFT step throughput, vision tower frozen vs trained (train/bench/sft.py)
    python -m train.bench grpo       # rollouts with / without frame sharing, --compile (train/bench/grpo.py)
    python -m train.bench memory     # step memory, full vs selected logits (train/bench/memory.py)
    python -m train.bench pipeline   # SFT's input pipeline on the cache formats (train/bench/pipeline.py)
    python -m train.bench gpu_check  # everything a GPU allocation needs to know, 8 min (train/bench/gpu_check.py)
"""

import importlib
import sys

SUBCOMMANDS = {
    "sft": "train.bench.sft",
    "grpo": "train.bench.grpo",
    "memory": "train.bench.memory",
    "pipeline": "train.bench.pipeline",
    "gpu_check": "train.bench.gpu_check",
}

if __name__ == "__main__":
    argv = sys.argv[1:]
    name = argv.pop(0) if argv and argv[0] in SUBCOMMANDS else "sft"
    importlib.import_module(SUBCOMMANDS[name]).main(argv)
