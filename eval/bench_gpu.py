"""``python -m eval.bench_gpu``: the accelerator benchmark, the same as ``python -m eval.bench gpu``."""

from eval.bench.gpu import main

if __name__ == "__main__":
    main()
