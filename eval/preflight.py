"""Evaluation's pre-flight (``engine.preflight``'s parts): the split or records it reads, the KV
cache of its batch of streams and its rate from the measured H200 streaming step.

    check_stage(EVAL, cfg)          # eval.run, eval.watch: the split is one the data set has
    plan(EVAL, cfg, gpu_memory_gb=80, gpus=1)

Checkpoint selection (``eval.watch``, GRPO's held-out evaluation) reads ``val``; a benchmark score
reads the benchmark's own records (``records=``), which must exist.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.preflight import (
    H200_STREAM,
    PreflightError,
    Stage,
    check_split,
    figure,
    kv_bytes,
    longest_window,
    measured_where,
    records_figure,
    tokens_per_step,
    with_value,
)


def _check_eval(cfg: Any, on_disk: bool) -> None:
    if cfg.records is not None:
        if on_disk and not Path(cfg.records).exists():
            raise PreflightError(f"records={cfg.records} does not exist")
        return
    try:
        check_split(cfg.data, cfg.split, "split", on_disk)
    except PreflightError as exc:
        raise PreflightError(
            f"{exc}; checkpoint selection reads split=val, a benchmark score its own records=<build dir>"
        ) from None


def _plan_eval(cfg: Any, p: dict, gpus: int, zero: int) -> dict:
    split = cfg.split if cfg.records is None else ""
    window = longest_window(cfg, cfg.frame_window, split)
    tokens = window["value"] * tokens_per_step(cfg) * cfg.batch_size
    terms = {
        "weights": (2.0 * p["total"], "estimated", "parameters on the meta device, bf16"),
        "kv_cache": (
            kv_bytes(p, tokens),
            "estimated",
            f"{cfg.batch_size} streams x {tokens / cfg.batch_size:.0f} tokens",
        ),
    }
    records = (
        records_figure(cfg, cfg.split)
        if cfg.records is None
        else figure(None, "unknown", "records= (not counted)")
    )
    speedup = 1 + (H200_STREAM["batch8_speedup"] - 1) * (min(cfg.batch_size, 8) - 1) / 7
    rate = speedup / (H200_STREAM["ms_per_step"] / 1000)
    return {
        "terms": terms,
        "window_steps": window,
        "records": records,
        "steps_per_s": figure(
            rate,
            "estimated",
            f"stream steps per GPU: the H200 streaming step, batched ({measured_where('stream_step')})",
            2,
        ),
        "seconds": None if records["value"] is None else records["value"] * window["value"] / rate / gpus,
    }


def _changes(stage: Stage, cfg: Any, p: dict, gpu_memory_gb: float, gpus: int, zero: int) -> list:
    """(arguments, config, gpus, zero) of each change worth trying: one stream at a time."""
    if cfg.batch_size > 1:
        return [(["batch_size=1"], with_value(cfg, "batch_size", 1), gpus, zero)]
    return []


#: Evaluation's pre-flight (``python -m eval.run``, ``python -m eval.watch``).
EVAL = Stage("eval", _check_eval, _plan_eval, _changes, checkpoint_key="checkpoint")
