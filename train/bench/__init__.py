"""Benchmarks of the training stages (``python -m train.bench sft|grpo``); entry points only, imported by no library module."""
