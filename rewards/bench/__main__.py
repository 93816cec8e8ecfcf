"""``python -m rewards.bench``: one JSON object of figures on the last line."""

import sys

from rewards.bench.prs import main

if __name__ == "__main__":
    main(sys.argv[1:])
