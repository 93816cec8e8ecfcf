"""The end of a GRPO sweep: one JSON line of its table, the swept keys and each point's final and best
scores (``eval.sweep_table``)."""

from __future__ import annotations

import json
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig


class SweepResult(Callback):
    """``conf/grpo.yaml``'s sweep callback: when every point has returned, one JSON line of the sweep's
    table (``eval.sweep_table.sweep_rows``: the swept keys, each point's final/best scores), so a
    sweep whose points ran elsewhere (``hydra/launcher=local`` or ``slurm``, their output in
    ``.submitit/``) still ends with its result on this terminal."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from eval.sweep_table import sweep_rows

        sweep = str(config.hydra.sweep.dir)
        try:
            swept, rows = sweep_rows(sweep)
        except FileNotFoundError as exc:
            print(json.dumps({"sweep_dir": sweep, "error": str(exc)}))
            return
        print(json.dumps({"sweep_dir": sweep, "swept": swept, "rows": rows}))
