"""``python -m eval.bench [NAME] [options]``: the command the evaluation side's measurements had
before they moved out of the library; it runs ``python -m perf`` and holds none of their code.

    python -m eval.bench                  # = python -m perf engine: every engine figure, one JSON object last
    python -m eval.bench memory --queries 20      # = python -m perf retrieval_memory --queries 20

``NAME`` is one of :data:`NAMES` (``engine`` when the first argument is not one); the rest goes to
that measurement as it is.
"""

import runpy
import sys

#: The names ``python -m eval.bench`` took, and the ``python -m perf`` measurement each now is.
NAMES = {
    "engine": "engine",
    "memory": "retrieval_memory",
    "gpu": "gpu",
    "profile": "profile",
    "kv": "kv",
    "recall": "recall",
    "compile": "compile",
    "static": "static",
    "long_stream": "long_stream",
    "ranks": "ranks",
    "frame_prep": "frame_prep",
    "vision": "vision",
}

if __name__ == "__main__":
    argv = sys.argv[1:]
    name = NAMES[argv.pop(0)] if argv and argv[0] in NAMES else "engine"
    sys.argv = ["perf", name, *argv]
    runpy.run_module("perf", run_name="__main__", alter_sys=True)
