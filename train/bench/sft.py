"""Training throughput and peak memory of the SFT step, vision tower frozen vs trained.

    python -m train.bench sft                       # tiny model, toy windows, CPU; JSON on the last line
    python -m train.bench sft --steps 20 --batch 8 --threads 2
    python -m train.bench grpo                      # rollouts with / without frame sharing (train/bench/grpo.py)
    python -m train.bench grpo --compile            # ... and with the language model compiled
    python -m train.bench memory                    # step memory, full vs selected logits (train/bench/memory.py)

One step is what the SFT trainer does per batch: forward over a padded batch of rendered toy windows
(20 steps of 64x64 frames each), the decision loss, backward, gradient clipping and an AdamW step.
Each variant runs in a fresh subprocess so its peak resident memory (CPU, ``ru_maxrss``) or peak
allocated memory (CUDA) is its own. ``tokens_per_s`` counts non-padding tokens.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import yaml

ROOT = Path(__file__).resolve().parents[2]
VARIANTS = {"frozen_vision": True, "trained_vision": False}


def run_variant(freeze: bool, steps: int, batch: int, threads: int, warmup: int = 2) -> dict:
    """Measure one variant in this process."""
    from data_builders.config import RenderConfig
    from data_builders.records import write_jsonl
    from data_builders.synthetic.toy import generate_toy
    from eval.config import quiet_libraries
    from eval.model import load_model_and_processor
    from eval.render import TurnRenderer
    from train.data import StreamWindowDataset, WindowCollator
    from train.losses import class_weights, decision_loss

    quiet_libraries()
    torch.set_num_threads(threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    cfg = yaml.safe_load((ROOT / "conf" / "model" / "tiny.yaml").read_text()) | {"freeze_vision": freeze}
    with tempfile.TemporaryDirectory() as tmp:
        model, processor = load_model_and_processor(cfg, cache_dir=Path(tmp) / "cache")
        write_jsonl(Path(tmp) / "records.jsonl", generate_toy(tmp, n=batch, seed=0))
        renderer = TurnRenderer(processor, RenderConfig(max_pixels=4096))
        dataset = StreamWindowDataset.from_split(tmp, renderer)
        inputs = WindowCollator(processor.tokenizer.pad_token_id)([dataset[i] for i in range(len(dataset))])
    model.to(device).train()
    inputs = {k: v.to(device) for k, v in inputs.items()}
    labels, decision = inputs.pop("labels"), inputs.pop("decision_mask")
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-3)
    weights = class_weights([19 * batch, batch])
    ids = (renderer.silence_id, renderer.response_id)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    for i in range(warmup + steps):
        if i == warmup:
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
        logits = model(**inputs).logits
        loss = decision_loss(logits, labels, decision, decision_ids=ids, weights=weights).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    if device.type == "cuda":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - t0
    tokens = int(inputs["attention_mask"].sum()) * steps
    if device.type == "cuda":
        peak_mb = torch.cuda.max_memory_allocated() / 2**20
    else:
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    return {
        "tokens_per_s": round(tokens / elapsed, 1),
        "s_per_step": round(elapsed / steps, 4),
        "peak_memory_mb": round(peak_mb, 1),
        "trainable_parameters": sum(p.numel() for p in params),
        "tokens_per_batch": int(inputs["attention_mask"].sum()),
    }


def bench_sft(steps: int, batch: int, threads: int) -> dict:
    """Every variant in its own subprocess; returns one summary dict."""
    out: dict = {
        "bench": "sft",
        "model": "tiny",
        "device": "cuda" if torch.cuda.is_available() else "cpu",
        "batch": batch,
        "steps": steps,
        "threads": threads,
    }
    for name in VARIANTS:
        cmd = [sys.executable, "-m", "train.bench", "variant", name, f"--steps={steps}"]
        cmd += [f"--batch={batch}", f"--threads={threads}"]
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True)
        out[name] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m train.bench", description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=sorted(BENCHES))
    ap.add_argument(
        "name", nargs="?", help="variant: frozen_vision | trained_vision; memory-variant: sft_full ..."
    )
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--windows", type=int, default=8, help="grpo: rollout windows")
    ap.add_argument(
        "--group",
        type=int,
        default=None,
        help="grpo: rollouts per window (default 4); memory: GRPO rows (default 2)",
    )
    ap.add_argument(
        "--compile",
        action="store_true",
        help="grpo: also roll out with the language model compiled (grpo.compile_rollouts)",
    )
    ap.add_argument(
        "--params", choices=["all", "merger"], default="all", help="memory-variant: gradients computed"
    )
    ap.add_argument("--frames", type=int, default=8, help="memory: 448 x 448 frames in the window")
    ap.add_argument("--dtype", default="bfloat16", help="memory: bfloat16 (the recipe's; default) | float32")
    args = ap.parse_args(argv)
    print(json.dumps(BENCHES[args.what](args), sort_keys=True))


def _memory(args) -> dict:
    from train.bench.memory import bench_memory

    return bench_memory(args.frames, args.group or 2, args.dtype, args.threads)


def _memory_variant(args) -> dict:
    from train.bench.memory import MEMORY_VARIANTS, run_memory_variant

    if args.name not in MEMORY_VARIANTS:
        raise SystemExit(f"memory-variant: choose one of {', '.join(MEMORY_VARIANTS)}")
    return run_memory_variant(args.name, args.frames, args.group or 2, args.dtype, args.threads, args.params)


def _pipeline(args) -> dict:
    from train.bench.pipeline import bench_pipeline

    return bench_pipeline()


def _grpo(args) -> dict:
    from train.bench.grpo import bench_grpo

    return bench_grpo(args.windows, args.group or 4, args.threads, args.compile)


#: ``python -m train.bench WHAT``: the benchmark behind each name.
BENCHES = {
    "sft": lambda a: bench_sft(a.steps, a.batch, a.threads),
    "variant": lambda a: run_variant(VARIANTS[a.name], a.steps, a.batch, a.threads),
    "grpo": _grpo,
    "memory": _memory,
    "memory-variant": _memory_variant,
    "pipeline": _pipeline,
}


if __name__ == "__main__":
    main()
