"""Every validated config of the repository, as one JSON object: each root of ``conf/`` composed with
its defaults, with each option of each of its groups, and with each experiment that applies to it,
validated against its schema. Run it before and after a move and compare the two files:

    python docs/moves/configs_43.py train.config > /tmp/before.json      # the schemas' module before
    python docs/moves/configs_43.py pipeline.config > /tmp/after.json    # and after
    cmp /tmp/before.json /tmp/after.json

A config that fails to compose is recorded with its error, so a composition the move broke shows.
"""

from __future__ import annotations

import importlib
import json
import sys

from omegaconf import OmegaConf

from infra.schema import CONF_DIR, compose

#: Groups composed option by option for each root that selects them.
GROUPS = ("model", "benchmark", "data", "render", "reward", "memory", "logger", "debug", "experiment")


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def main(schemas_module: str) -> dict[str, object]:
    schemas = importlib.import_module(schemas_module).SCHEMAS
    out: dict[str, object] = {}
    for root, schema in sorted(schemas.items()):
        cases = [[]] + [[f"{g}={o}"] for g in GROUPS for o in _options(g)]
        for overrides in cases:
            key = " ".join([root, *overrides])
            try:
                cfg = compose(root, overrides, schema)
                out[key] = OmegaConf.to_container(cfg, resolve=False)
            except Exception as exc:  # recorded: a composition that fails before and after is no change
                out[key] = f"error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return out


if __name__ == "__main__":
    json.dump(main(sys.argv[1]), sys.stdout, indent=1, sort_keys=True)
    print()
