"""Peak memory of one SFT step and one GRPO loss step, logits over the whole sequence vs at the
positions the loss reads, on Qwen3-VL-4B's widths.

    python -m perf step_memory                     # JSON on the last line (CPU: a few minutes)
    python -m perf step_memory --frames 8 --group 2 --dtype float32   (default: bfloat16, the recipe's dtype)

The model is ``conf/model/qwen3_vl_4b.yaml`` with random weights and its real widths (hidden size
2560, vocabulary 151,936, the real vision block), cut to 2 language layers and 1 vision block; one
window is 8 steps of 448 x 448 frames (``render=hd``: 196 visual tokens each) with their turns.

- SFT step: forward over the window, the decision loss, backward (the vision tower frozen, merger and
  language model trained, as the recipe). ``full``: ``model(...).logits`` at every position upcast
  to fp32 (``logits.float()``), then the loss at the labelled ones (``train.sft.losses.decision_loss``:
  the loss as it was before the trainer selected positions);
  ``selected``: the logits of the labelled positions alone (``train.sft.losses.selected_logits``, what
  ``train.sft.trainer.DecisionTrainer`` runs).
- GRPO loss step: the window as a rollout of ``group`` rows (its assistant tokens as the generated
  ones), ``train.grpo.policy.token_logprobs`` with ``select=False`` (logits at every position) or
  ``select=True`` (at the generated positions, what ``train.grpo.loop`` runs), the clipped-ratio
  loss, backward.

Both run as the recipe does (``experiment=p3i_4b_sft`` / ``p3i_4b_grpo``): gradient checkpointing
on, vision tower frozen. Each variant runs twice, each time in a fresh subprocess:

- ``params=all``: the step as training runs it, every trained parameter's gradient computed.
  ``peak_mb``: the peak during the step (CPU: the resident set's high-water mark, ``VmHWM``, reset
  before the step; CUDA: ``max_memory_allocated``); ``base_mb``, the memory held before it (weights,
  inputs); ``step_mb = peak_mb - base_mb``.
- ``params=merger``: the same forward and loss with every parameter but the merger's frozen
  (``requires_grad=False``), so the backward computes the merger's gradients alone: it runs back
  through every layer, as the merger sits below them all, so it holds the activations, the logits
  and the gradients that flow through them, but no weight-sized gradient of the language model.
  ``activation_mb`` is its ``step_mb``. (Freezing, not ``backward(inputs=merger)``: a custom
  autograd function such as :class:`ChunkedLinear` is told at forward time which gradients to
  compute, so with ``inputs=`` it still built the 151,936 x 2,560 gradient of the LM head, ~750 MB
  the native kernel skips.)

The ratios: ``<stage>_selected_vs_full_ratio`` is ``activation_mb`` of the selected variant over the
full one, the memory where the logits are computed decides; ``<stage>_selected_vs_full_step_ratio``
and ``..._peak_ratio`` give the same for the whole step and the whole process. With 2 of 36 layers,
the language model's parameter gradients (the tied 151,936 x 2,560 embedding alone: 1.6 GB in fp32,
held twice while its two uses are summed) are most of a whole step and equal in both variants; in
the real model ZeRO partitions them, while the logits stay per rank. The optimizer step is left out:
its memory does not depend on where the logits are computed.

On CPU, torch's bf16 matrix product runs ~8x slower than fp32 where the CPU has no bf16 instructions
(AVX2: ~3 GFLOP/s, an hour for the four variants). :class:`ChunkedLinear` stands in for it there: it
takes and returns bf16 tensors as the bf16 kernel does (output, saved inputs and weight gradients in
bf16, so the memory the step holds is the bf16 step's) and multiplies in fp32 over 8,192 output
features at a time, which adds a workspace of ~0.3 GB at most to every variant alike.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

from data_builders.config import CONF_DIR, model_render
from engine.config import model_preset

ROOT = CONF_DIR.parent
MODEL = CONF_DIR / "model" / "qwen3_vl_4b.yaml"
#: The 4B's frames (``render=hd``, the option its model config picks): 448 x 448.
RENDER = model_render(MODEL)
SIDE = math.isqrt(RENDER.max_pixels)
MEMORY_VARIANTS = ("sft_full", "sft_selected", "grpo_full", "grpo_selected")
#: Each variant's environment: glibc returns every block of 64 KiB or more to the system when it is
#: freed (a fixed mmap threshold), so the resident set follows the live tensors instead of what the
#: allocator keeps for reuse (its default threshold grows to 32 MiB and hid ~300 MB per step).
MEASURING_ENV = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}


class ChunkedLinear(torch.autograd.Function):
    """``F.linear`` for bf16 CPU tensors: bf16 in and out, fp32 products over output chunks."""

    CHUNK = 8192

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        flat = x.reshape(-1, x.shape[-1]).float()
        out = torch.empty(flat.shape[0], weight.shape[0], dtype=x.dtype)
        for i in range(0, weight.shape[0], ChunkedLinear.CHUNK):
            out[:, i : i + ChunkedLinear.CHUNK] = (flat @ weight[i : i + ChunkedLinear.CHUNK].float().T).to(
                x.dtype
            )
        if bias is not None:
            out += bias
        return out.reshape(*x.shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        g = grad.reshape(-1, grad.shape[-1])
        grad_x = grad_w = grad_b = None
        step = ChunkedLinear.CHUNK
        if ctx.needs_input_grad[0]:
            acc = torch.zeros(g.shape[0], weight.shape[1])
            for i in range(0, weight.shape[0], step):
                acc += g[:, i : i + step].float() @ weight[i : i + step].float()
            grad_x = acc.to(x.dtype).reshape(x.shape)
        if ctx.needs_input_grad[1]:
            flat = x.reshape(-1, x.shape[-1]).float()
            grad_w = torch.empty_like(weight)
            for i in range(0, weight.shape[0], step):
                grad_w[i : i + step] = (g[:, i : i + step].float().T @ flat).to(weight.dtype)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = g.float().sum(0).to(weight.dtype)
        return grad_x, grad_w, grad_b


@contextlib.contextmanager
def cpu_bf16_matmuls():
    """``F.linear`` on bf16 CPU tensors through :class:`ChunkedLinear` (everything else unchanged)."""
    import torch.nn.functional as F

    native = F.linear

    def linear(x, weight, bias=None):
        if x.device.type == "cpu" and x.dtype == torch.bfloat16 and weight.dtype == torch.bfloat16:
            return ChunkedLinear.apply(x, weight, bias)
        return native(x, weight, bias)

    F.linear = linear
    try:
        yield
    finally:
        F.linear = native


def _status_kb(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def _reset_peak() -> None:
    """Reset the resident set's high-water mark (Linux: ``5`` to ``/proc/self/clear_refs``)."""
    Path("/proc/self/clear_refs").write_text("5")


def bench_model(dtype: str):
    """The 4B widths with 2 language layers and 1 vision block, random weights."""
    from engine.model import load_model_and_processor

    cfg = model_preset(MODEL)
    arch = cfg["architecture"]
    arch["text_config"]["num_hidden_layers"] = 2
    arch["vision_config"]["depth"] = 1
    arch["vision_config"]["deepstack_visual_indexes"] = [0]
    cfg |= {"random_init": True, "dtype": dtype}
    return load_model_and_processor(cfg)


def bench_window(renderer, frames: int, seed: int = 0):
    """One stream of ``frames`` steps at the 4B's frame size (random pixels) with a reply at step 5, rendered."""
    from data_builders.records import Stream, Target

    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, size=(frames, SIDE, SIDE, 3), dtype=np.uint8)
    stream = Stream(
        id="bench",
        source="bench",
        task="event_monitoring",
        video="bench.mp4",
        clip_start=0.0,
        clip_end=float(frames),
        instruction="Tell me when the red square appears.",
        targets=[Target(time=min(5.0, frames - 1.0), content="The red square appeared.")],
    )
    return stream, pixels, renderer.render(stream, pixels)


def as_rollout(stream, pixels, rendered):
    """The rendered window as a GRPO rollout: its assistant tokens are the generated ones."""
    from engine.streaming import StepDecision, StreamResult
    from train.grpo.rollout import Rollout, Window

    generated = (rendered.labels != -100).tolist()
    steps = [StepDecision(k, t, 0.5, False, "</Silence>") for k, t in enumerate(rendered.step_times)]
    result = StreamResult(stream.id, steps, rendered.input_ids.tolist(), generated, [0.0] * sum(generated))
    return Rollout(Window(stream, 0, len(pixels), pixels, stream.targets), result)


def trained_model(dtype: str, params: str, device: torch.device):
    """The bench model in training mode, checkpointing on as the recipe; ``params="merger"``: every
    parameter but the merger's frozen."""
    torch.manual_seed(0)  # the same random weights in every variant's process
    model, processor = bench_model(dtype)
    model.to(device).train()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    merger = [p for n, p in model.named_parameters() if p.requires_grad and ".merger." in n]
    if not merger:
        raise RuntimeError("the bench model has no trained merger parameter")
    if params == "merger":  # the merger alone trained: no other weight gradient is computed
        keep = {id(p) for p in merger}
        for p in model.parameters():
            p.requires_grad_(id(p) in keep)
    return model, processor


def variant_step(name: str, model, processor, renderer, device, frames: int, group: int):
    """``(step, tokens)``: the variant's forward, loss and backward as a function returning the loss,
    and the tokens of its batch."""
    from train.grpo.algorithm import grpo_loss
    from train.grpo.policy import policy_batch, token_logprobs
    from train.sft.losses import decision_loss, loss_at_labels, selected_logits

    stream, pixels, rendered = bench_window(renderer, frames)
    ids = (renderer.silence_id, renderer.response_id)
    stage, how = name.split("_")
    if stage == "sft":
        from train.sft.data import WindowCollator

        keys = ("input_ids", "attention_mask", "labels", "decision_mask", "mm_token_type_ids")
        item = {k: getattr(rendered, k) for k in (*keys, "pixel_values", "image_grid_thw")}
        inputs = {
            k: v.to(device) for k, v in WindowCollator(processor.tokenizer.pad_token_id)([item]).items()
        }
        labels, decision = inputs.pop("labels"), inputs.pop("decision_mask")

        def step() -> float:
            if how == "full":  # the loss as it was: the whole sequence's logits upcast to fp32
                loss = decision_loss(model(**inputs).logits.float(), labels, decision, decision_ids=ids).loss
            else:
                loss = loss_at_labels(
                    *selected_logits(model, inputs, labels, decision), decision_ids=ids
                ).loss
            loss.backward()
            return float(loss.detach())

        return step, int(labels.numel())
    rollouts = [as_rollout(stream, pixels, rendered)] * group
    batch = policy_batch(rollouts, renderer)

    def step() -> float:
        new = token_logprobs(model, renderer, rollouts, batch, 1.0, select=how == "selected")
        loss, _ = grpo_loss(new, batch, torch.ones_like(new), 0.2)
        loss.backward()
        return float(loss.detach())

    return step, int(batch.input_ids.numel())


def run_memory_variant(
    name: str, frames: int, group: int, dtype: str, threads: int, params: str = "all"
) -> dict:
    """Measure one variant in this process; ``params``: ``all`` or ``merger`` (the gradients computed)."""
    from engine.render import TurnRenderer
    from infra.entry import quiet_libraries

    quiet_libraries()
    torch.set_num_threads(threads)
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    model, processor = trained_model(dtype, params, device)
    step, tokens = variant_step(
        name, model, processor, TurnRenderer(processor, RENDER), device, frames, group
    )
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated() / 2**20
    else:
        _reset_peak()
        base = _status_kb("VmRSS") / 1024
    t0 = time.perf_counter()
    with cpu_bf16_matmuls() if not cuda else contextlib.nullcontext():
        loss = step()
    if cuda:
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() / 2**20
    else:
        peak = _status_kb("VmHWM") / 1024
    return {
        "base_mb": round(base, 1),
        "peak_mb": round(peak, 1),
        "step_mb": round(peak - base, 1),
        "seconds": round(time.perf_counter() - t0, 2),
        "tokens": tokens,
        "loss": loss,
        "params": params,
    }


def bench_memory(frames: int, group: int, dtype: str, threads: int) -> dict:
    """Every variant in its own subprocess; one summary dict with the selected / full ratios."""
    cuda = torch.cuda.is_available()
    out: dict = {
        "bench": "memory",
        "model": "qwen3_vl_4b widths: hidden 2560, vocab 151936, 2 language layers, 1 vision block",
        "device": "cuda" if cuda else "cpu",
        "dtype": dtype,
        "frames": frames,
        "frame_pixels": f"{SIDE}x{SIDE}",
        "grpo_rows": group,
        "threads": threads,
    }
    for name in MEMORY_VARIANTS:
        runs = {}
        for params in ("all", "merger"):
            cmd = [sys.executable, "-m", "perf", "step_memory", f"--variant={name}", f"--frames={frames}"]
            cmd += [f"--group={group}", f"--dtype={dtype}", f"--threads={threads}", f"--params={params}"]
            done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=MEASURING_ENV)
            if done.returncode:
                raise RuntimeError(f"memory variant {name} ({params}) failed:\n{done.stderr[-3000:]}")
            runs[params] = json.loads(done.stdout.strip().splitlines()[-1])
        out[name] = runs["all"] | {
            "activation_mb": runs["merger"]["step_mb"],
            "loss_merger": runs["merger"]["loss"],
        }
    for stage in ("sft", "grpo"):
        full, selected = out[f"{stage}_full"], out[f"{stage}_selected"]
        for key in ("loss", "loss_merger"):
            if abs(full[key] - selected[key]) > 1e-3 * max(1.0, abs(full[key])):
                raise RuntimeError(
                    f"{stage}: the two variants disagree on the loss ({full[key]} vs {selected[key]})"
                )
        out[f"{stage}_selected_vs_full_ratio"] = round(selected["activation_mb"] / full["activation_mb"], 3)
        out[f"{stage}_selected_vs_full_step_ratio"] = round(selected["step_mb"] / full["step_mb"], 3)
        out[f"{stage}_selected_vs_full_peak_ratio"] = round(selected["peak_mb"] / full["peak_mb"], 3)
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m perf step_memory", description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=8, help="frames in the window, at the 4B's size")
    ap.add_argument("--group", type=int, default=2, help="GRPO rows")
    ap.add_argument("--dtype", default="bfloat16", help="bfloat16 (the recipe's; default) | float32")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--variant", choices=MEMORY_VARIANTS, help="measure this variant alone, in this process")
    ap.add_argument(
        "--params", choices=["all", "merger"], default="all", help="--variant: gradients computed"
    )
    args = ap.parse_args(argv)
    if args.variant:
        out = run_memory_variant(args.variant, args.frames, args.group, args.dtype, args.threads, args.params)
    else:
        out = bench_memory(args.frames, args.group, args.dtype, args.threads)
    print(json.dumps(out, sort_keys=True))
    return out
