"""Benchmarks of the builders and the video layer (``python -m data_builders.bench``); entry points
only, imported by no library module."""
