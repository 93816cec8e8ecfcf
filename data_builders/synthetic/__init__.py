"""Synthetic data generators: toy videos with their streams (the demo, tests, benchmarks) and a
ProPerMem-style memory set. Kept apart from the builders of real datasets."""
