"""``python -m train.bench sft|grpo|memory [options]``: one JSON object of figures on the last line."""

import sys

from train.bench.sft import main

if __name__ == "__main__":
    main(sys.argv[1:])
