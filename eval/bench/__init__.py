"""Benchmarks and analyses of the evaluation side (``python -m eval.bench [memory|gpu|recall]``);
entry points only, imported by no library module."""
