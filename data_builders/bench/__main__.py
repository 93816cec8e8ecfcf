"""``python -m data_builders.bench``: one JSON object of figures on the last line."""

from data_builders.bench.builders import main

if __name__ == "__main__":
    main()
