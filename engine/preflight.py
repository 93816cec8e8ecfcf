"""What the checks every stage runs at start share, before any model loads: what would fail hours
in, refused in one line (exit 2) before the job's work starts. Each stage's own checks and plan
live with the stage (``train.preflight``: ``SFT``, ``GRPO``; ``eval.preflight``: ``EVAL``), each a
:class:`Stage` that :func:`check_stage` and :func:`plan` run.

    check_stage(EVAL, cfg)          # eval.run, eval.watch: the split is one the data set has
    check_stage(SFT, cfg)           # train.sft: the splits, data.dir built, the plan fits the GPU
    check_stage(GRPO, cfg)          # train.grpo: the same, and init= exists

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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from data_builders.splits import RECORDS_JSONL
from infra.ranks import Ranks
from infra.tracking import check_logger

GIB = 1024**3
#: The measured figures the plan calibrates on (each with its unit, date, device and source command;
#: ``docs/performance.md`` quotes them, ``tests/test_measured.py`` holds the two together).
MEASURED_FILE = Path(__file__).with_name("measured.json")


def measured(name: str, path: Path = MEASURED_FILE) -> dict[str, float]:
    """The figures of measurement ``name`` in ``path`` (``engine/measured.json``): figure -> value."""
    entry = json.loads(path.read_text(encoding="utf-8"))[name]
    return {key: figure["value"] for key, figure in entry["figures"].items()}


def measured_where(name: str, path: Path = MEASURED_FILE) -> str:
    """Where measurement ``name`` comes from, for a figure's source: device, date and command."""
    entry = json.loads(path.read_text(encoding="utf-8"))[name]
    return f"{entry['device']}, {entry['date']}, {entry['source']}; engine/measured.json"


#: The one measured real-model training step: Qwen3-VL-4B, one 30-frame window of 6,701 tokens at
#: 448 x 448, AdamW on a bf16 model in one process (no ZeRO), no gradient checkpointing, logits at
#: every position in fp32.
H200_SFT = measured("sft_step")
#: The same step with gradient checkpointing and the loss at the labelled positions.
H200_SFT_CHECKPOINTED = measured("sft_step_checkpointed")
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
#: The streaming step: one silent stream's milliseconds a step, and eight batched streams'
#: throughput over one's.
H200_STREAM = measured("stream_step")
#: One rank's GRPO update: one window of 20 steps x 4 rollouts, replies up to 32 tokens, gradient
#: checkpointing: rollout and loss-plus-step seconds.
H200_GRPO = measured("grpo_update")
#: Headroom kept free of the plan's terms (allocator fragmentation, CUDA context, communication buffers).
RESERVE_GB = 4.0


class PreflightError(ValueError):
    """A config that would fail after the queue: the message names the key and what to change."""


@dataclass(frozen=True)
class Stage:
    """A stage's own pre-flight, defined with the stage (``train.preflight.SFT`` / ``GRPO``,
    ``eval.preflight.EVAL``) over this module's parts: ``check(cfg, on_disk)`` raises
    :class:`PreflightError`; ``planner(cfg, p, gpus, zero)`` is the plan's stage part (its memory
    ``terms``, ``seconds`` and the stage's own figures; ``p``: :func:`model_parameters`);
    ``changes(stage, cfg, p, gpu_memory_gb, gpus, zero)`` the (arguments, config, gpus, zero) worth
    trying when the plan does not fit; ``checkpoint_key`` the key whose checkpoint's render block the
    stage composes at (``init``, ``checkpoint``; None: none)."""

    name: str
    check: Callable[[Any, bool], None]
    planner: Callable[[Any, dict, int, int], dict]
    changes: Callable[..., list]
    checkpoint_key: str | None = None


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
    records = root / split / RECORDS_JSONL if root is not None else None
    if on_disk and records is not None and records.is_file() and records.stat().st_size == 0:
        raise PreflightError(
            f"{key}={split}: {records} holds no record (the mixture had too few videos for its split "
            "shares): add videos and mix again"
        )


def check_stage(stage: Stage, cfg: Any, *, on_disk: bool = True, memory: bool = True) -> dict | None:
    """The stage's pre-flight: splits, paths, then (on a GPU, unless ``plan.check=false`` or not
    ``memory``) the memory plan; a W&B logger without a key (``infra.tracking.check_logger``).
    Raises :class:`PreflightError`; returns the plan when one was computed."""
    stage.check(cfg, on_disk)
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
        f"no stats.json under data.dir: the H200 step's {H200_SFT['frames']}-step window ({measured_where('sft_step')}); "
        "plan.longest_window_steps=N for longer clips",
        0,
    )


def stats_rate(stats: Path) -> float:
    return float(json.loads(stats.read_text()).get("steps_per_second") or 1.0)


def records_figure(cfg: Any, split: str) -> dict:
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


def memory_block(terms: dict[str, tuple[float, str, str]], gpu_memory_gb: float) -> tuple[dict, str, bool]:
    """The memory block: each term in GB, their sum plus the reserve as the peak, the biggest term."""
    out = {name: figure(b / 1e9, kind, src) for name, (b, kind, src) in terms.items()}
    peak = sum(b for b, _, _ in terms.values()) / 1e9 + RESERVE_GB
    biggest = max(terms, key=lambda k: terms[k][0])
    out["peak"] = figure(peak, "estimated", f"the terms above + {RESERVE_GB:g} GB reserve")
    return out, biggest, peak <= gpu_memory_gb


def kv_bytes(p: dict, tokens: float) -> float:
    return 2.0 * p["layers"] * p["kv_width"] * 2.0 * tokens


#: Wall-clock time of a run on several GPUs: its GPU-hours / GPUs / this (communication, stragglers,
#: evaluation and checkpoint pauses). An assumption, not a measurement; one GPU loses nothing to it.
SCALING_EFFICIENCY = 0.9


def plan(stage: Stage, cfg: Any, *, gpu_memory_gb: float, gpus: int, zero: int | None = None) -> dict:
    """The memory and time plan of a stage's config on ``gpus`` GPUs of ``gpu_memory_gb`` GB each:
    one JSON-able dict (``python -m pipeline.plan`` prints it). One that does not fit carries
    ``advice``: the changes that would lower its peak, each with the peak it would give."""
    zero = _zero_stage() if zero is None else zero
    p = model_parameters(cfg.model, cfg.get("lora"))
    out = _assemble(stage, cfg, p, gpu_memory_gb, gpus, zero)
    if not out["fits"]:
        out["advice"] = advice(stage, cfg, p, gpu_memory_gb, gpus, zero)
    return out


def _assemble(stage: Stage, cfg: Any, p: dict, gpu_memory_gb: float, gpus: int, zero: int) -> dict:
    part = stage.planner(cfg, p, gpus, zero)
    memory, biggest, fits = memory_block(part.pop("terms"), gpu_memory_gb)
    seconds = part.pop("seconds")
    return {
        "stage": stage.name,
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


def advice(stage: Stage, cfg: Any, p: dict, gpu_memory_gb: float, gpus: int, zero: int) -> list[dict]:
    """What to change so the plan fits: each change (``try``: the arguments of ``python -m
    pipeline.plan`` or overrides of the stage) that lowers the peak, with the peak it gives; those
    that fit first."""
    here = _assemble(stage, cfg, p, gpu_memory_gb, gpus, zero)["memory_gb"]["peak"]["value"]
    out = []
    for args, c, n, z in stage.changes(stage, cfg, p, gpu_memory_gb, gpus, zero):
        peak = _assemble(stage, c, p, gpu_memory_gb, n, z)["memory_gb"]["peak"]["value"]
        if peak < here:
            out.append({"try": " ".join(args), "peak_gb": peak, "fits": peak <= gpu_memory_gb})
    return sorted(out, key=lambda a: (not a["fits"], a["peak_gb"]))


def fewest_gpus(stage: Stage, cfg: Any, p: dict, gpu_memory_gb: float, gpus: int) -> int | None:
    """The fewest GPUs on which ZeRO-3 fits (more than ``gpus``: counted one by one to 16, then by
    nodes of 8, to 4,096); None if none does."""
    n = gpus + 1
    while n <= 4096:
        if _assemble(stage, cfg, p, gpu_memory_gb, n, 3)["fits"]:
            return n
        n += 1 if n < 16 else 8
    return None


def with_value(cfg: Any, key: str, value: Any) -> Any:
    from omegaconf import OmegaConf

    changed = cfg.copy()
    OmegaConf.update(changed, key, value, merge=False)
    return changed


def _zero_stage() -> int:
    """The ZeRO stage of the launch this process runs under (accelerate's environment), else 0."""
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() not in ("1", "true"):
        return 0
    return int(os.environ.get("ACCELERATE_DEEPSPEED_ZERO_STAGE", "2"))
