"""Speed and memory measurements of every layer, and the GPU check and probe: tools, not the
library (``python -m perf`` lists them; ``python -m perf <name> [options]`` runs one). The top
layer of ``tests/test_layering.py``: it may import every package, and no package imports it."""
