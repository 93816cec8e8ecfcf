"""Training throughput and peak memory of the SFT step, vision tower frozen vs trained.

    python -m perf sft                       # tiny model, toy windows, CPU; JSON on the last line
    python -m perf sft --steps 20 --batch 8 --threads 2

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

from data_builders.config import CONF_DIR, model_render
from engine.config import model_preset

ROOT = CONF_DIR.parent
TINY = CONF_DIR / "model" / "tiny.yaml"
VARIANTS = {"frozen_vision": True, "trained_vision": False}


def run_variant(freeze: bool, steps: int, batch: int, threads: int, warmup: int = 2) -> dict:
    """Measure one variant in this process."""
    from data_builders.record_io import write_jsonl
    from data_builders.synthetic.toy import generate_toy
    from engine.model import load_model_and_processor
    from engine.render import TurnRenderer
    from infra.entry import quiet_libraries
    from train.sft.data import StreamWindowDataset, WindowCollator
    from train.sft.losses import class_weights, decision_loss

    quiet_libraries()
    torch.set_num_threads(threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    cfg = model_preset(TINY) | {"freeze_vision": freeze}
    with tempfile.TemporaryDirectory() as tmp:
        model, processor = load_model_and_processor(cfg, cache_dir=Path(tmp) / "cache")
        write_jsonl(Path(tmp) / "records.jsonl", generate_toy(tmp, n=batch, seed=0))
        renderer = TurnRenderer(processor, model_render(TINY))
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


def sft_variants(steps: int, batch: int, threads: int) -> dict:
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
        cmd = [sys.executable, "-m", "perf", "sft", f"--variant={name}", f"--steps={steps}"]
        cmd += [f"--batch={batch}", f"--threads={threads}"]
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True)
        out[name] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m perf sft", description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--variant", choices=sorted(VARIANTS), help="measure this variant alone, in this process")
    args = ap.parse_args(argv)
    if args.variant:
        out = run_variant(VARIANTS[args.variant], args.steps, args.batch, args.threads)
    else:
        out = sft_variants(args.steps, args.batch, args.threads)
    print(json.dumps(out, sort_keys=True))
    return out
