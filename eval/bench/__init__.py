"""Benchmarks and analyses of the evaluation side (``python -m eval.bench [NAME]``, the names in ``__main__``);
entry points only, imported by no library module."""
