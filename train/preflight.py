"""The training stages' pre-flight (``engine.preflight``'s parts): SFT's and GRPO's checks, their
memory and time plan, and what to change when it does not fit.

    check_stage(SFT, cfg)           # train.sft: the splits, data.dir built, the plan fits the GPU
    check_stage(GRPO, cfg)          # train.grpo: the same, and init= exists
    plan(SFT, cfg, gpu_memory_gb=80, gpus=16)

- Paths: ``data.dir`` and ``init`` (GRPO) must exist (``on_disk=False`` skips these and the folder
  checks: the documented-commands test, whose paths are produced by earlier documented steps).
- The plan: the model states per ZeRO stage, the activations of the longest window (calibrated on
  the measured H200 steps), GRPO's rollout KV cache; SFT's rate from the measured step, GRPO's from
  one rank's measured update (``engine/measured.json``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from engine.preflight import (
    H200_GRPO,
    H200_SFT,
    H200_SFT_CHECKPOINTED,
    PreflightError,
    Stage,
    activation_bytes_per_token,
    calibration,
    check_split,
    fewest_gpus,
    figure,
    flops_scale,
    is_measured_model,
    kv_bytes,
    longest_window,
    measured_where,
    records_figure,
    state_bytes,
    tokens_per_step,
    with_value,
)


def _check_data_dir(cfg: Any, on_disk: bool) -> None:
    if not on_disk:
        return
    if not cfg.data.dir:
        raise PreflightError("data.dir is not set: give data.dir=<the built mixture>")
    if not Path(cfg.data.dir).is_dir():
        raise PreflightError(
            f"data.dir={cfg.data.dir} does not exist: build it first "
            f"(python -m data_builders mix data={cfg.data.name} data.dir={cfg.data.dir})"
        )


def _check_sft(cfg: Any, on_disk: bool) -> None:
    _check_data_dir(cfg, on_disk)
    check_split(cfg.data, cfg.sft.train_split, "sft.train_split", on_disk)
    if cfg.sft.eval_split:
        check_split(cfg.data, cfg.sft.eval_split, "sft.eval_split", on_disk)


def _check_grpo(cfg: Any, on_disk: bool) -> None:
    g = cfg.grpo
    if cfg.get("entry") is not None and cfg.entry.target:
        return
    _check_data_dir(cfg, on_disk)
    check_split(cfg.data, g.train_split, "grpo.train_split", on_disk)
    if g.eval_every and g.eval_split and not g.eval_records:
        check_split(cfg.data, g.eval_split, "grpo.eval_split", on_disk)
    if on_disk and cfg.init and cfg.init != "random" and not Path(cfg.init).exists():
        raise PreflightError(
            f"init={cfg.init} does not exist: give the SFT run's final/ (or a checkpoint-N/)"
        )


def _training_terms(p: dict, cfg: Any, tokens: float, checkpointing: bool, zero: int, gpus: int) -> dict:
    states = state_bytes(p, zero, gpus)
    src = f"parameters on the meta device, ZeRO-{zero} over {gpus} GPUs"
    terms = {name: (b, "estimated", src) for name, b in states.items()}
    per_token = activation_bytes_per_token(p, checkpointing) * calibration(checkpointing)
    measured = H200_SFT_CHECKPOINTED["peak_gib"] if checkpointing else H200_SFT["peak_gib"]
    terms["activations"] = (
        per_token * tokens,
        "estimated",
        f"{per_token / 1e6:.3f} MB/token x {tokens:.0f} tokens (layers x widths x bf16, gradient "
        f"checkpointing {'on' if checkpointing else 'off'}, x a factor calibrated to the 4B's measured "
        f"{measured} GiB step, {measured_where('sft_step_checkpointed' if checkpointing else 'sft_step')})",
    )
    return terms


def _plan_sft(cfg: Any, p: dict, gpus: int, zero: int) -> dict:
    t = cfg.sft
    window = longest_window(cfg, t.window_steps, t.train_split)
    tokens = window["value"] * tokens_per_step(cfg) * t.per_device_batch_size
    terms = _training_terms(p, cfg, tokens, t.gradient_checkpointing, zero, gpus)
    per_pass = t.per_device_batch_size * gpus
    accumulation = t.global_batch_size // per_pass if t.global_batch_size else t.gradient_accumulation_steps
    records = records_figure(cfg, t.train_split)
    if t.max_steps > 0:
        steps = t.max_steps
    elif records["value"] is None:  # epochs of an unknown number of records
        steps = None
    else:
        steps = math.ceil(
            math.ceil(math.ceil(records["value"] / per_pass) / max(accumulation, 1)) * t.num_epochs
        )
    rate = _sft_rate(p, t.gradient_checkpointing)
    seconds = (
        None
        if steps is None
        else steps
        * max(accumulation, 1)
        * per_pass
        * window["value"]
        * tokens_per_step(cfg)
        / rate["value"]
        / gpus
    )
    return {
        "terms": terms,
        "window_steps": window,
        "records": records,
        "steps": figure(steps, "estimated", "records, batch and accumulation as the Trainer steps", 0),
        "tokens_per_s_per_gpu": rate,
        "seconds": seconds,
    }


def _sft_rate(p: dict, checkpointing: bool) -> dict:
    """Tokens per second per GPU: the 4B's measured H200 step; another model's scaled from it."""
    rate = H200_SFT_CHECKPOINTED["tokens_per_s"] if checkpointing else H200_SFT["tokens_per_s"]
    step = f"the 4B's H200 SFT step{' with gradient checkpointing' if checkpointing else ''} ("
    step += f"{measured_where('sft_step_checkpointed' if checkpointing else 'sft_step')})"
    if is_measured_model(p):
        return figure(rate, "measured", step, 0)
    ratio, how = flops_scale(p)
    return figure(
        rate * ratio,
        "estimated",
        f"scaled from the 4B's measured {rate:,.0f} tokens/s on one H200 {how}; {step}",
        0,
    )


def _plan_grpo(cfg: Any, p: dict, gpus: int, zero: int) -> dict:
    g = cfg.grpo
    window = longest_window(cfg, g.window_steps, g.train_split)
    tokens = window["value"] * tokens_per_step(cfg) * g.num_generations
    terms = _training_terms(p, cfg, tokens, g.gradient_checkpointing, zero, gpus)
    terms["kv_cache"] = (
        kv_bytes(p, tokens),
        "estimated",
        "rollouts' KV cache: 2 x layers x kv width x bf16",
    )
    # the measured window, scaled by its rollout steps (window x generations); measured when equal
    scale = window["value"] * g.num_generations / (H200_GRPO["window_steps"] * H200_GRPO["generations"])
    ratio, how = flops_scale(p)
    scale /= ratio
    window_s = scale * (H200_GRPO["rollout_s"] + H200_GRPO["update_s"])
    update_s = math.ceil(g.windows_per_step / gpus) * window_s
    return {
        "terms": terms,
        "window_steps": window,
        "steps": figure(g.max_steps, "measured", "grpo.max_steps", 0),
        "steps_per_s": figure(
            1 / update_s,
            "measured" if scale == 1 else "estimated",
            f"one rank's H200 GRPO update, {H200_GRPO['rollout_s']} s rollout + {H200_GRPO['update_s']} s "
            f"update per window of {H200_GRPO['window_steps']} steps x {H200_GRPO['generations']} ({measured_where('grpo_update')})"
            + ("" if scale == 1 else f", x{scale:.3g} for this window and group")
            + ("" if is_measured_model(p) else f", scaled to this model {how}"),
            5,
        ),
        "seconds": g.max_steps * update_s,
    }


def _changes(stage: Stage, cfg: Any, p: dict, gpu_memory_gb: float, gpus: int, zero: int) -> list:
    """(arguments, config, gpus, zero) of each change worth trying on a training stage: ZeRO, gradient
    checkpointing, SFT's per-device batch, more GPUs."""
    out = []
    t = cfg[stage.name]
    if gpus == 1 and zero >= 1:  # DeepSpeed's fp32 master copy and moments, with nothing to share them
        out.append((["zero=0"], cfg, gpus, 0))
    if gpus > 1 and zero < 3:
        out.append((["zero=3"], cfg, gpus, 3))
    if not t.gradient_checkpointing:
        key = f"{stage.name}.gradient_checkpointing"
        out.append(([f"{key}=true"], with_value(cfg, key, True), gpus, zero))
    if stage.name == "sft" and t.per_device_batch_size > 1:
        key = "sft.per_device_batch_size"
        out.append(([f"{key}=1"], with_value(cfg, key, 1), gpus, zero))
    n = fewest_gpus(stage, cfg, p, gpu_memory_gb, gpus)
    if n is not None:
        out.append(([f"gpus={n}", "zero=3"], cfg, n, 3))
    return out


#: SFT's pre-flight (``python -m train.sft``).
SFT = Stage("sft", _check_sft, _plan_sft, _changes)
#: GRPO's pre-flight (``python -m train.grpo``).
GRPO = Stage("grpo", _check_grpo, _plan_grpo, _changes, checkpoint_key="init")
