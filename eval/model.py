"""``python -m eval.model``: the model a config builds, as one JSON line (name, checkpoint, parameter
counts, dtype, the language model's and the vision tower's sizes).

    python -m eval.model model=tiny
    python -m eval.model model=qwen3_vl_4b model.init_device=meta   # the 4B's sizes without its weights
"""

from __future__ import annotations

import json
import sys

from engine.model import describe, load_model_and_processor, plain_model_config
from eval.config import EvalConfig  # stores eval_schema, the first entry of conf/eval.yaml
from infra.schema import compose

USAGE = "usage: python -m eval.model [model=tiny|qwen3_vl_2b|qwen3_vl_4b|qwen3_vl_8b] [model.KEY=VALUE ...]"


def main(argv: list[str] | None = None) -> int:
    """Load the model a ``model`` config names and print :func:`describe` as one JSON line."""
    argv = sys.argv[1:] if argv is None else argv
    if "--help" in argv or "-h" in argv:
        print(USAGE)
        return 0
    cfg = compose("eval", argv, EvalConfig)
    model_cfg = plain_model_config(cfg.model, cfg.paths.cache_dir)
    try:
        model, processor = load_model_and_processor(model_cfg, cache_dir=cfg.paths.cache_dir)
    except (ValueError, FileNotFoundError) as exc:  # a hub id without a hub, a damaged checkpoint
        print(f"eval.model: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(describe(model, processor, model_cfg)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
