"""Benchmarks of the reward and metric core (``python -m rewards.bench``); entry points only,
imported by no library module."""
