"""The checks each stage runs at start, before any model loads: what would fail hours in, refused in
one line (exit 2) before the job's work starts.

    check_stage("eval", cfg)        # eval.run, eval.watch: the split is one the data set has
    check_stage("sft", cfg)         # train.sft: the splits, data.dir built, the plan fits the GPU
    check_stage("grpo", cfg)        # train.grpo: the same, and init= exists

- Splits: a stage reads ``<data.dir>/<split>``; a split the data config does not declare
  (``data=mix_p3i`` has train and val, no test), or one its built folder lacks, is refused, naming the
  splits it has. Checkpoint selection (``eval.watch``, GRPO's held-out evaluation) reads ``val``; a
  benchmark score reads the benchmark's own records (``records=``).
- Paths: ``data.dir`` (training) and ``init`` (GRPO) must exist (``on_disk=False`` skips these and the
  folder checks: the documented-commands test, whose paths are produced by earlier documented steps).
- Memory: on a GPU (or whenever ``gpu_memory_gb`` is given), :func:`plan` is computed and a config
  whose peak per GPU would not fit is refused, naming the biggest term, unless ``plan.check=false``.

:func:`plan` is also ``python -m pipeline.plan``: the peak memory per GPU (weights, gradients, optimizer
states per ZeRO stage, activations of the longest window, the KV cache for evaluation), the rate and
the GPU-hours, each figure marked measured or estimated, with its source.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any

from infra.ranks import Ranks
from infra.registry import Registry
from infra.tracking import check_logger

GIB = 1024**3
#: The one measured real-model training step (docs/performance.md, "One H200"): Qwen3-VL-4B, one
#: 30-frame window of 6,701 tokens at 448 x 448, AdamW on a bf16 model in one process (no ZeRO), no
#: gradient checkpointing, logits at every position in fp32.
H200_SFT = {"tokens": 6701, "frames": 30, "peak_gib": 74.5, "tokens_per_s": 10100.0}
#: The same step with gradient checkpointing and the loss at the labelled positions (make gpu-check,
#: 2026-12-04): 8,401 tokens/s, 39.5 GiB peak (``torch.cuda.max_memory_allocated``), one process.
H200_SFT_CHECKPOINTED = {"tokens": 6701, "peak_gib": 39.5, "tokens_per_s": 8401.0}
H200_SFT_CHECKPOINTED_TOKENS_PER_S = H200_SFT_CHECKPOINTED["tokens_per_s"]
#: The architecture those steps ran (conf/model/qwen3_vl_4b.yaml as :func:`model_parameters` builds it,
#: vision frozen, merger trained): every model's activations and rate are calibrated on it.
H200_MODEL = {
    "total": 4437815808,
    "trainable": 4131573248,
    "layers": 36,
    "hidden": 2560,
    "intermediate": 9728,
    "kv_width": 1024,
    "vocab": 151936,
}
#: The H200 streaming step (make gpu-check, 2026-12-04): one silent stream, 138 ms per step over 60
#: steps; eight batched streams run 5.6x the throughput of one.
H200_STREAM = {"s_per_step": 0.138, "batch8_speedup": 5.6}
#: One rank's GRPO update on the H200 (make gpu-check, 2026-12-04): one window of 20 steps x 4
#: rollouts, replies up to 32 tokens, gradient checkpointing: rollout and loss-plus-step seconds.
H200_GRPO = {"window_steps": 20, "generations": 4, "rollout_s": 31.8, "update_s": 18.1}
PERF = "docs/performance.md, One H200"
#: Headroom kept free of the plan's terms (allocator fragmentation, CUDA context, communication buffers).
RESERVE_GB = 4.0


class PreflightError(ValueError):
    """A config that would fail after the queue: the message names the key and what to change."""


# ---------------------------------------------------------------- splits and paths


def check_split(data: Any, split: str, key: str, on_disk: bool = True) -> None:
    """``split`` is one the data config declares and, when ``data.dir`` was built, one it holds."""
    declared = list(data.splits or {})
    if split not in declared:
        raise PreflightError(
            f"{key}={split}: data={data.name} has no split {split!r} (it has {', '.join(declared) or 'none'})"
        )
    root = Path(data.dir) if data.dir else None
    if on_disk and root is not None and root.is_dir() and not (root / split).is_dir():
        present = sorted(p.name for p in root.iterdir() if p.is_dir())
        raise PreflightError(
            f"{key}={split}: {root} has no {split}/ (it has {', '.join(present) or 'no split'}): "
            "rebuild the mixture with that split or pick one of these"
        )
    records = root / split / "records.jsonl" if root is not None else None
    if on_disk and records is not None and records.is_file() and records.stat().st_size == 0:
        raise PreflightError(
            f"{key}={split}: {records} holds no record (the mixture had too few videos for its split "
            "shares): add videos and mix again"
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


#: Each stage's checks of splits and paths: ``fn(cfg, on_disk)``.
CHECKS = Registry(
    "stage check",
    {
        "eval": "engine.preflight:_check_eval",
        "sft": "engine.preflight:_check_sft",
        "grpo": "engine.preflight:_check_grpo",
    },
)


def check_stage(stage: str, cfg: Any, *, on_disk: bool = True, memory: bool = True) -> dict | None:
    """The stage's pre-flight: splits, paths, then (on a GPU, unless ``plan.check=false`` or not
    ``memory``) the memory plan; a W&B logger without a key (``infra.tracking.check_logger``).
    Raises :class:`PreflightError`; returns the plan when one was computed."""
    CHECKS[stage](cfg, on_disk)
    if on_disk:  # a config alone (the documented-commands test) says nothing of this machine's key
        try:
            check_logger(cfg.logger)
        except ValueError as exc:
            raise PreflightError(str(exc)) from None
    memory = _device_memory_gb() if memory else None
    if memory is None or not cfg.plan.check:
        return None
    world = Ranks.from_env().world
    return require_fit(plan(stage, cfg, gpu_memory_gb=memory, gpus=world))


def require_fit(result: dict) -> dict:
    """``result`` (a :func:`plan`) or a :class:`PreflightError` naming its biggest term."""
    if not result["fits"]:
        terms = result["memory_gb"]
        raise PreflightError(
            f"the {result['stage']} run would not fit: {terms['peak']['value']:.1f} GB peak per GPU "
            f"> {result['gpu_memory_gb']:g} GB ({result['biggest']}: {terms[result['biggest']]['value']:.1f} GB; "
            f"{terms['peak']['source']}); {_advice(result)}, or plan.check=false to run anyway"
        )
    return result


def _advice(result: dict) -> str:
    fitting = [f"{a['try']} ({a['peak_gb']:.1f} GB)" for a in result.get("advice", []) if a["fits"]]
    if fitting:
        return "try " + " or ".join(fitting)
    return {
        "activations": "lower the per-device batch or window_steps, or turn gradient_checkpointing on",
        "kv_cache": "lower batch_size or set frame_window",
        "optimizer": "use more GPUs or ZeRO-2/3 (ACCELERATE_CONFIG=conf/accelerate/zero3.yaml)",
    }.get(result["biggest"], "use more GPUs or ZeRO-3 (ACCELERATE_CONFIG=conf/accelerate/zero3.yaml)")


def _device_memory_gb() -> float | None:
    import torch

    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory / 1e9


# ---------------------------------------------------------------- the memory and time plan


def figure(value: float | None, kind: str, source: str, digits: int = 2) -> dict:
    """One figure of a plan: its value, ``measured`` or ``estimated``, and where it comes from; a
    value that cannot be known from the config (no record counts) is null, kind ``unknown``. A value
    too small for ``digits`` keeps three significant figures: a tiny model's minutes are not 0 hours.

    >>> figure(0.000123456, "estimated", "")["value"], figure(12.3456, "estimated", "")["value"]
    (0.000123, 12.35)
    """
    if value is None:
        return {"value": None, "kind": "unknown", "source": source}
    value = float(value)
    shown = round(value, digits) if round(value, digits) or not value else float(f"{value:.3g}")
    return {"value": shown, "kind": kind, "source": source}


def model_parameters(model_cfg: Any, lora: Any | None = None) -> dict[str, int]:
    """Total and trainable parameters of a model config, built on the meta device (no weights, no
    download): the vision tower frozen as the stages freeze it; under LoRA, the adapters' and the
    mergers' parameters trainable."""
    import torch
    from omegaconf import OmegaConf
    from transformers import Qwen3VLForConditionalGeneration

    from engine.model import freeze_vision_tower, qwen3_vl_config

    with torch.device("meta"):
        model = Qwen3VLForConditionalGeneration(
            qwen3_vl_config(OmegaConf.to_container(model_cfg.architecture))
        )
    if model_cfg.freeze_vision:
        freeze_vision_tower(model, train_merger=bool(model_cfg.train_merger))
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    if lora is not None and lora.enabled:
        pattern = re.compile(lora.target_modules)
        adapters = sum(
            lora.r * (m.in_features + m.out_features)
            for name, m in model.named_modules()
            if isinstance(m, torch.nn.Linear) and pattern.fullmatch(name)
        )
        mergers = sum(p.numel() for n, p in model.model.visual.named_parameters() if "merger" in n)
        trainable = adapters + (mergers if lora.train_merger else 0)
    text = model.config.text_config
    return {
        "total": total,
        "trainable": trainable,
        "layers": text.num_hidden_layers,
        "hidden": text.hidden_size,
        "intermediate": text.intermediate_size,
        "kv_width": text.num_key_value_heads * text.head_dim,
        "vocab": text.vocab_size,
    }


def activation_bytes_per_token(p: dict, checkpointing: bool, full_logits: bool = False) -> float:
    """Bytes a trained forward keeps per token for its backward, in bf16, from the widths: per layer the
    inputs of the norms, projections, attention and MLP (``7 h + 2 kv + 4 i`` values, SDPA keeps no
    score matrix); with gradient checkpointing each layer keeps only its input (``h``) and one layer's
    whole set is live during its recompute. ``full_logits``: fp32 logits and their gradient at every
    position (the measured H200 step; the trainers now take the labelled positions only)."""
    h, i, kv, layers = p["hidden"], p["intermediate"], p["kv_width"], p["layers"]
    layer = 2.0 * (7 * h + 2 * kv + 4 * i)
    kept = layers * 2.0 * h + layer if checkpointing else layers * layer
    return kept + (2 * 4.0 * p["vocab"] if full_logits else 0.0)


def state_bytes(p: dict, zero: int, gpus: int) -> dict[str, float]:
    """Weights, gradients and optimizer states per GPU. bf16 weights (2 bytes); DeepSpeed's bf16 mode
    keeps an fp32 master copy and fp32 Adam moments (12 bytes per trained parameter), ZeRO-1 shards
    them, ZeRO-2 the bf16 gradients too, ZeRO-3 the weights as well; without ZeRO (``zero=0``) AdamW
    keeps its two moments in the weights' dtype (4 bytes)."""
    n, t = p["total"], p["trainable"]
    return {
        "weights": 2.0 * n / (gpus if zero >= 3 else 1),
        "gradients": 2.0 * t / (gpus if zero >= 2 else 1),
        "optimizer": (12.0 * t / gpus) if zero >= 1 else 4.0 * t,
    }


def calibration(checkpointing: bool) -> float:
    """Factor on the width formula that makes the 4B's estimate its measured peak (one process, no
    ZeRO): with gradient checkpointing the 39.5 GiB step (loss at the labelled positions), without it
    the 74.5 GiB one (logits at every position). The same factor serves every model, so activations
    per token grow with width and depth; it takes in whatever of the measured peak is not weights,
    gradients or optimizer states (the optimizer step's temporaries too), as a cost per token."""
    states = sum(state_bytes(H200_MODEL, zero=0, gpus=1).values())
    if checkpointing:
        peak, tokens = H200_SFT_CHECKPOINTED["peak_gib"], H200_SFT_CHECKPOINTED["tokens"]
        formula = activation_bytes_per_token(H200_MODEL, checkpointing=True)
    else:
        peak, tokens = H200_SFT["peak_gib"], H200_SFT["tokens"]
        formula = activation_bytes_per_token(H200_MODEL, checkpointing=False, full_logits=True)
    return max((peak * GIB - states) / (formula * tokens), 0.1)


def is_measured_model(p: dict) -> bool:
    """Whether ``p`` is the architecture the H200 figures were measured on."""
    return all(p[k] == v for k, v in H200_MODEL.items())


def flops_scale(p: dict) -> tuple[float, str]:
    """(the 4B's FLOPs per token over ``p``'s, words saying so): a training token costs about 6 x the
    parameters it passes through (forward 2, backward 4), the same factor for every model."""
    ratio = H200_MODEL["total"] / p["total"]
    return (
        ratio,
        f"by FLOPs per token (6 x parameters: {H200_MODEL['total'] / 1e9:.2f}B / {p['total'] / 1e9:.2f}B)",
    )


def tokens_per_step(cfg: Any) -> float:
    """Tokens of one decision step: the frame's visual tokens (``render.max_pixels`` over the merged
    patch area) and the text around it (the H200 window's 6,701 tokens over 30 frames less 196 each)."""
    proc = cfg.model.image_processor
    patch = int(proc.get("patch_size", 16)) * int(proc.get("merge_size", 2))
    text = H200_SFT["tokens"] / H200_SFT["frames"] - 196
    return cfg.render.max_pixels / patch**2 + text


def longest_window(cfg: Any, window_steps: int | None, split: str) -> dict:
    """Steps of the longest window: ``plan.longest_window_steps``, the stage's window length, the
    longest clip of the split's ``stats.json``, else the measured H200 window."""
    if cfg.plan.longest_window_steps:
        return figure(cfg.plan.longest_window_steps, "measured", "plan.longest_window_steps", 0)
    if window_steps:
        return figure(window_steps, "measured", "the stage's window_steps", 0)
    stats = Path(cfg.data.dir or "") / split / "stats.json"
    if cfg.data.dir and stats.is_file():
        seconds = json.loads(stats.read_text())["clip_seconds"].get("max", 0.0)
        return figure(math.ceil(seconds * stats_rate(stats)), "measured", f"{stats}: longest clip", 0)
    return figure(
        H200_SFT["frames"],
        "estimated",
        f"no stats.json under data.dir: the H200 step's {H200_SFT['frames']}-step window ({PERF}); "
        "plan.longest_window_steps=N for longer clips",
        0,
    )


def stats_rate(stats: Path) -> float:
    return float(json.loads(stats.read_text()).get("steps_per_second") or 1.0)


def _records(cfg: Any, split: str) -> dict:
    """Records of the split: its ``stats.json``, else the data config's source counts times the
    split's share."""
    stats = Path(cfg.data.dir or "") / split / "stats.json"
    if cfg.data.dir and stats.is_file():
        return figure(json.loads(stats.read_text())["records"], "measured", str(stats), 0)
    counts = [s.get("count") or 0 for s in (cfg.data.sources or {}).values()]
    share = float((cfg.data.splits or {}).get(split, 1.0))
    n = (cfg.data.total or sum(counts)) * share
    if not n:  # an unbuilt data set that states no counts: the time cannot be known, it is not 0
        return figure(None, "unknown", f"no {stats} and data={cfg.data.name} states no source counts")
    return figure(n, "estimated", f"data={cfg.data.name}: source counts x the {split} share {share:g}", 0)


def _memory(terms: dict[str, tuple[float, str, str]], gpu_memory_gb: float) -> tuple[dict, str, bool]:
    """The memory block: each term in GB, their sum plus the reserve as the peak, the biggest term."""
    out = {name: figure(b / 1e9, kind, src) for name, (b, kind, src) in terms.items()}
    peak = sum(b for b, _, _ in terms.values()) / 1e9 + RESERVE_GB
    biggest = max(terms, key=lambda k: terms[k][0])
    out["peak"] = figure(peak, "estimated", f"the terms above + {RESERVE_GB:g} GB reserve")
    return out, biggest, peak <= gpu_memory_gb


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
        f"{measured} GiB step, {PERF})",
    )
    return terms


def _plan_sft(cfg: Any, p: dict, gpus: int, zero: int) -> dict:
    t = cfg.sft
    window = longest_window(cfg, t.window_steps, t.train_split)
    tokens = window["value"] * tokens_per_step(cfg) * t.per_device_batch_size
    terms = _training_terms(p, cfg, tokens, t.gradient_checkpointing, zero, gpus)
    per_pass = t.per_device_batch_size * gpus
    accumulation = t.global_batch_size // per_pass if t.global_batch_size else t.gradient_accumulation_steps
    records = _records(cfg, t.train_split)
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
    step = f"the 4B's H200 SFT step{' with gradient checkpointing' if checkpointing else ''} ({PERF})"
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
        _kv_bytes(p, tokens),
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
            f"update per window of {H200_GRPO['window_steps']} steps x {H200_GRPO['generations']} ({PERF})"
            + ("" if scale == 1 else f", x{scale:.3g} for this window and group")
            + ("" if is_measured_model(p) else f", scaled to this model {how}"),
            5,
        ),
        "seconds": g.max_steps * update_s,
    }


def _kv_bytes(p: dict, tokens: float) -> float:
    return 2.0 * p["layers"] * p["kv_width"] * 2.0 * tokens


def _plan_eval(cfg: Any, p: dict, gpus: int, zero: int) -> dict:
    split = cfg.split if cfg.records is None else ""
    window = longest_window(cfg, cfg.frame_window, split)
    tokens = window["value"] * tokens_per_step(cfg) * cfg.batch_size
    terms = {
        "weights": (2.0 * p["total"], "estimated", "parameters on the meta device, bf16"),
        "kv_cache": (
            _kv_bytes(p, tokens),
            "estimated",
            f"{cfg.batch_size} streams x {tokens / cfg.batch_size:.0f} tokens",
        ),
    }
    records = (
        _records(cfg, cfg.split) if cfg.records is None else figure(None, "unknown", "records= (not counted)")
    )
    speedup = 1 + (H200_STREAM["batch8_speedup"] - 1) * (min(cfg.batch_size, 8) - 1) / 7
    rate = speedup / H200_STREAM["s_per_step"]
    return {
        "terms": terms,
        "window_steps": window,
        "records": records,
        "steps_per_s": figure(
            rate, "estimated", f"stream steps per GPU: the H200 streaming step, batched ({PERF})", 2
        ),
        "seconds": None if records["value"] is None else records["value"] * window["value"] / rate / gpus,
    }


#: Each stage's memory plan: ``fn(cfg, plan parts, gpus, zero)``.
PLANNERS = Registry(
    "stage planner",
    {
        "sft": "engine.preflight:_plan_sft",
        "grpo": "engine.preflight:_plan_grpo",
        "eval": "engine.preflight:_plan_eval",
    },
)


#: Wall-clock time of a run on several GPUs: its GPU-hours / GPUs / this (communication, stragglers,
#: evaluation and checkpoint pauses). An assumption, not a measurement; one GPU loses nothing to it.
SCALING_EFFICIENCY = 0.9


def plan(stage: str, cfg: Any, *, gpu_memory_gb: float, gpus: int, zero: int | None = None) -> dict:
    """The memory and time plan of a stage's config on ``gpus`` GPUs of ``gpu_memory_gb`` GB each:
    one JSON-able dict (``python -m pipeline.plan`` prints it). One that does not fit carries
    ``advice``: the changes that would lower its peak, each with the peak it would give."""
    zero = _zero_stage() if zero is None else zero
    p = model_parameters(cfg.model, cfg.get("lora"))
    out = _assemble(stage, cfg, p, gpu_memory_gb, gpus, zero)
    if not out["fits"]:
        out["advice"] = advice(stage, cfg, p, gpu_memory_gb, gpus, zero)
    return out


def _assemble(stage: str, cfg: Any, p: dict, gpu_memory_gb: float, gpus: int, zero: int) -> dict:
    part = PLANNERS[stage](cfg, p, gpus, zero)
    memory, biggest, fits = _memory(part.pop("terms"), gpu_memory_gb)
    seconds = part.pop("seconds")
    return {
        "stage": stage,
        "model": cfg.model.name,
        "gpus": gpus,
        "gpu_memory_gb": gpu_memory_gb,
        "zero": zero,
        "parameters": figure(p["total"], "measured", "the model config built on the meta device", 0),
        "trainable": figure(
            p["trainable"], "measured", "the meta-device model, frozen as the stage freezes it", 0
        ),
        "memory_gb": memory,
        **part,
        **_hours(seconds, gpus),
        "fits": fits,
        "biggest": biggest,
    }


def _hours(seconds: float | None, gpus: int) -> dict:
    """GPU-hours (the steps at the rate) and wall-clock hours on ``gpus`` GPUs."""
    if seconds is None:
        unknown = "the records are not known"
        return {"gpu_hours": figure(None, "", unknown), "wall_hours": figure(None, "", unknown)}
    efficiency = 1.0 if gpus == 1 else SCALING_EFFICIENCY
    return {
        "gpu_hours": figure(seconds * gpus / 3600, "estimated", "the steps at the rate above"),
        "wall_hours": figure(
            seconds / 3600 / efficiency,
            "estimated",
            f"gpu_hours / {gpus} GPUs / a scaling efficiency of {efficiency:g} (assumed: communication, "
            "pauses; not measured)",
        ),
    }


def advice(stage: str, cfg: Any, p: dict, gpu_memory_gb: float, gpus: int, zero: int) -> list[dict]:
    """What to change so the plan fits: each change (``try``: the arguments of ``python -m
    pipeline.plan`` or overrides of the stage) that lowers the peak, with the peak it gives; those
    that fit first."""
    here = _assemble(stage, cfg, p, gpu_memory_gb, gpus, zero)["memory_gb"]["peak"]["value"]
    out = []
    for args, c, n, z in _changes(stage, cfg, p, gpu_memory_gb, gpus, zero):
        peak = _assemble(stage, c, p, gpu_memory_gb, n, z)["memory_gb"]["peak"]["value"]
        if peak < here:
            out.append({"try": " ".join(args), "peak_gb": peak, "fits": peak <= gpu_memory_gb})
    return sorted(out, key=lambda a: (not a["fits"], a["peak_gb"]))


def _changes(stage: str, cfg: Any, p: dict, gpu_memory_gb: float, gpus: int, zero: int) -> list:
    """(arguments, config, gpus, zero) of each change worth trying."""
    out = []
    if stage == "eval":
        if cfg.batch_size > 1:
            out.append((["batch_size=1"], _with(cfg, "batch_size", 1), gpus, zero))
        return out
    t = cfg[stage]
    if gpus == 1 and zero >= 1:  # DeepSpeed's fp32 master copy and moments, with nothing to share them
        out.append((["zero=0"], cfg, gpus, 0))
    if gpus > 1 and zero < 3:
        out.append((["zero=3"], cfg, gpus, 3))
    if not t.gradient_checkpointing:
        key = f"{stage}.gradient_checkpointing"
        out.append(([f"{key}=true"], _with(cfg, key, True), gpus, zero))
    if stage == "sft" and t.per_device_batch_size > 1:
        key = "sft.per_device_batch_size"
        out.append(([f"{key}=1"], _with(cfg, key, 1), gpus, zero))
    n = _fewest_gpus(stage, cfg, p, gpu_memory_gb, gpus)
    if n is not None:
        out.append(([f"gpus={n}", "zero=3"], cfg, n, 3))
    return out


def _fewest_gpus(stage: str, cfg: Any, p: dict, gpu_memory_gb: float, gpus: int) -> int | None:
    """The fewest GPUs on which ZeRO-3 fits (more than ``gpus``: counted one by one to 16, then by
    nodes of 8, to 4,096); None if none does."""
    n = gpus + 1
    while n <= 4096:
        if _assemble(stage, cfg, p, gpu_memory_gb, n, 3)["fits"]:
            return n
        n += 1 if n < 16 else 8
    return None


def _with(cfg: Any, key: str, value: Any) -> Any:
    from omegaconf import OmegaConf

    changed = cfg.copy()
    OmegaConf.update(changed, key, value, merge=False)
    return changed


def _zero_stage() -> int:
    """The ZeRO stage of the launch this process runs under (accelerate's environment), else 0."""
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() not in ("1", "true"):
        return 0
    return int(os.environ.get("ACCELERATE_DEEPSPEED_ZERO_STAGE", "2"))
