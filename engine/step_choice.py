"""Which step a run takes with ``EngineConfig.step="auto"`` (the default of ``eval.run``, the demo
and GRPO's rollouts): the compiled static step (``engine.static_step``) where the run's features
support it and the device gains from it, else the eager one. The choice is logged once per process
and per outcome: ``engine step: static (compiled)``, ``engine step: eager (probes need branches)``.

What the static step does not support: branches (``engine.probes``: :class:`~engine.kv_static.StaticKV`
has no ``mark`` / ``rewind``). Everything else a run uses streams the eager engine's decisions and
logits with it: any batch, rows of unequal length, a frame window, sampled decisions (GRPO's
rollouts), memory evidence turns (tests/engine/test_static_step.py, test_memory_engine.py).

Per device type (:data:`AUTO_STATIC`): on CPU the eager step, measured faster on the tiny model
(the static step uncompiled runs at 0.4-0.75x its speed; compiled at its speed at batch 1 and
0.4-0.65x at batch 8, after 4-14 s of compiling per shape: docs/performance.md); on an accelerator the compiled static step, the shapes
fixed so that one graph per shape serves the whole run (not yet measured on a GPU).
"""

from __future__ import annotations

import dataclasses
import logging

log = logging.getLogger(__name__)

#: ``EngineConfig.step`` values.
STEPS = ("auto", "eager", "static")

#: ``step="auto"`` by device type: whether it takes the compiled static step where the run's
#: features allow (a device type not listed: yes). CPU: no (module docstring, docs/performance.md).
AUTO_STATIC = {"cpu": False}

_said: set[str] = set()


def resolve_step(cfg, device, *, branches: bool = False):
    """``cfg`` (an :class:`~engine.streaming.EngineConfig`) with ``step="auto"`` made ``eager`` or
    ``static`` (compiled) for a run on ``device`` (``branches``: the run branches its cache, as
    ``engine.probes`` does), and the choice in words; another ``step`` comes back as it is, or
    refused where the run needs what it lacks. ``device``: a ``torch.device``."""
    if cfg.step not in STEPS:
        raise ValueError(f"step must be 'eager', 'static' or 'auto', got {cfg.step!r}")
    if cfg.step == "static" and branches:
        raise ValueError(
            "step='static' has no branches, which probes need (engine.probes): use 'eager' or 'auto'"
        )
    if cfg.step != "auto":
        return cfg, f"{cfg.step}{' (compiled)' if cfg.compile else ''}"
    if branches:
        return dataclasses.replace(cfg, step="eager"), "eager (probes need branches)"
    if not AUTO_STATIC.get(device.type, True):
        why = f"eager (faster than the static step on {device.type}: docs/performance.md)"
        return dataclasses.replace(cfg, step="eager"), why
    return dataclasses.replace(cfg, step="static", compile=True), "static (compiled)"


def say_once(choice: str) -> None:
    """Log ``engine step: <choice>`` the first time this process makes that choice."""
    if choice not in _said:
        _said.add(choice)
        log.info("engine step: %s", choice)
