"""Benchmarks of the training stages (``python -m train.bench sft|grpo|memory|pipeline``); entry points only, imported by no library module."""
