"""One command that says where the engine's time goes on one GPU, in 4 minutes: one JSON line.

    make gpu-probe                      # python -m perf gpu_probe --device cuda (the 4B, random weights)
    make gpu-probe DEVICE=cpu           # the same code on the tiny model of the test suite

Four parts, each in its own process under its own time cap inside one overall deadline, as
``make gpu-check`` runs its parts (:func:`perf.gpu_check.spawn_part`; a part that fails or
runs out of time gives ``"failed: ..."`` or ``"timeout: ..."`` in its keys, the others still run):

- ``engine_steps`` (:mod:`perf.probe_steps`): ``frame_step`` and ``reply_step``, eager against
  static (on CUDA replayed as CUDA graphs; ``static_step`` says how it ran), at batch 1 and 8:
  ``ms``, ``syncs``, on CUDA ``busy_ms`` and ``launches``, and ``max_diff`` of their outputs.
- ``host_vs_device``: ``frame_prep_ms_per_frame`` (``host``: the image processor and the upload of
  its float32 pixels; ``device``: the upload of the uint8 frames and ``engine.frame_prep``, the
  model's frames, ``perf.frame_prep``) and ``frame_prep_max_diff`` between them;
  ``sampling_ms``: one reply token for each of 8 rows from the vocabulary's logits on the device,
  ``host`` the logits read back and ``torch.multinomial`` there, ``device``
  :func:`engine.decisions.draw_tokens` and its one read of the ids and log-probs.
- ``grpo_rollout``: ``grpo_rollout_s``, one rollout group of ``experiment=p3i_4b_grpo`` (4 x 20
  steps, replies up to its 32 tokens, sampled), after a 2-step warm-up group.
- ``sft_split``: one SFT step of ``experiment=p3i_4b_sft`` on a 30-frame window (the tiny model: 8)
  split into ``sft_forward_s`` (the forward and the loss at the labelled positions),
  ``sft_backward_s`` and ``sft_optimizer_s`` (AdamW's step), the step after a warm-up step.

Also ``device``, ``torch``, ``model``, ``peak_gib`` per part, ``parts`` (status and seconds) and
``wall_s``. ``--compile`` runs the static step through ``torch.compile`` too (graphs built inside the
part: give it a larger ``--cap engine_steps=``). Milliseconds are the device synchronised; on CPU,
``frame_prep_ms_per_frame`` and ``sampling_ms`` are the process's CPU time.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import time
from pathlib import Path

from infra.registry import Registry
from perf.gpu_check import (
    _caps_of,
    _model,
    _peak_gib,
    _recipe,
    missing_modules,
    note,
    spawn_part,
    start_part,
)

#: What each part measures, in the order they run: part -> its keys in the line.
KEYS = {
    "engine_steps": ("frame_step", "reply_step", "static_step", "engine_steps_setup"),
    "host_vs_device": ("frame_prep_ms_per_frame", "frame_prep_max_diff", "sampling_ms", "sampling_setup"),
    "grpo_rollout": ("grpo_rollout_s", "grpo_rollout_setup"),
    "sft_split": ("sft_forward_s", "sft_backward_s", "sft_optimizer_s", "sft_step_s", "sft_tokens"),
}
#: Per device: the model and sizes, each part's cap (seconds) and the overall deadline.
SETTINGS = {
    "cuda": {
        "model": "conf/model/qwen3_vl_4b.yaml",
        "engine": {"steps": 10, "warm": 4, "max_new_tokens": 4, "batch": 8},
        "frames": 16,
        "repeats": 3,
        "vocab": 151_936,
        "sft_frames": 30,
        # sized, not measured (no GPU lent since 2026-12-04): a part's process starts in about 10 s
        # and builds the 4B in about 10 s more; the rollout alone took 31.8 s on the H200
        "caps": {"engine_steps": 70, "host_vs_device": 25, "grpo_rollout": 65, "sft_split": 45},
        "deadline": 205,
    },
    "cpu": {
        "model": "conf/model/tiny.yaml",
        "engine": {"steps": 8, "warm": 3, "max_new_tokens": 3, "batch": 8},
        "frames": 4,
        "repeats": 3,
        "vocab": 512,
        "sft_frames": 8,
        # importing torch and transformers alone takes 17 s of wall on a loaded 2-core machine
        "caps": {"engine_steps": 60, "host_vs_device": 40, "grpo_rollout": 50, "sft_split": 40},
        "deadline": 190,
    },
}


def part_engine_steps(device: str, s: dict, compile_: bool) -> dict:
    from perf.probe_steps import engine_steps

    model, renderer, about, size = _model(device, s)
    figures = engine_steps(model, renderer, device, s["engine"] | {"size": size, "compile": compile_}, note)
    return figures | {"model": about}


def sampling_figures(device: str, vocab: int, rows: int, repeats: int) -> dict:
    """Milliseconds of one reply token for each of ``rows`` rows from ``vocab`` logits on ``device``:
    read back and drawn on the host, or drawn on the device (the module docstring)."""
    import torch

    from engine.decisions import draw_tokens
    from perf.frame_prep import clock

    dev = torch.device(device)
    logits = torch.randn(rows, vocab, generator=torch.Generator().manual_seed(0)).to(dev)
    on_host, on_device = torch.Generator().manual_seed(0), torch.Generator(dev).manual_seed(0)

    def host():
        probs = torch.log_softmax(logits.cpu(), dim=-1).exp()
        return torch.multinomial(probs, 1, generator=on_host)[:, 0].tolist()

    def device_draw():
        tokens, logp = draw_tokens(logits, 1.0, on_device)
        return torch.stack([tokens.double(), logp.double()]).tolist()

    host(), device_draw()  # warm-up
    return {
        name: round(statistics.median(clock(dev, fn) for _ in range(repeats)), 3)
        for name, fn in (("host", host), ("device", device_draw))
    }


def part_host_vs_device(device: str, s: dict, _compile: bool) -> dict:
    import torch

    from perf.frame_prep import model_figures

    preset = Path(s["model"]).stem
    frames = model_figures(preset, torch.device(device), s["frames"], s["repeats"])
    note(frame_prep_ms_per_frame=frames["ms"], frame_prep_max_diff=frames["diff"])
    return {
        "frame_prep_ms_per_frame": frames["ms"],
        "frame_prep_max_diff": frames["diff"],
        "frame_prep_grids_equal": frames["grids_equal"],
        "sampling_ms": sampling_figures(device, s["vocab"], 8, s["repeats"]),
        "sampling_setup": {"rows": 8, "vocab": s["vocab"], "frames_per_call": s["frames"]},
    }


def part_grpo_rollout(device: str, s: dict, _compile: bool) -> dict:
    import torch

    from perf.gpu import timed_on, toy_stream
    from train.grpo.rollout import make_windows, rollout_group

    g = _recipe("grpo", "p3i_4b_grpo").grpo
    model, renderer, about, size = _model(device, s)

    def window(steps: int, index: int):
        stream, frames = toy_stream(index, steps, size)
        return make_windows([stream], {stream.id: frames}, steps, negative_share=1.0, seed=0)[0]

    def roll(w):
        args = (g.num_generations, g.temperature, g.max_new_tokens, 0)
        return rollout_group(model, renderer, w, *args)[0]

    with torch.no_grad():
        roll(window(2, 1))
        rollouts, seconds = timed_on(device, lambda: roll(window(g.window_steps, 0)))
    steps = [st for r in rollouts for st in r.result.steps]
    return {
        "grpo_rollout_s": round(seconds, 3),
        "grpo_rollout_setup": {
            "rollouts": len(rollouts),
            "steps": len(steps) // len(rollouts),
            "max_new_tokens": g.max_new_tokens,
            "fired_steps": sum(st.fired for st in steps),
            "generated_tokens": sum(sum(r.result.generated) for r in rollouts),
        },
        "model": about,
    }


def _split_step(model, opt, inputs: dict, labels, decision, loss_fn, sync) -> dict:
    """One SFT step's seconds: forward with the loss, backward, optimizer step."""
    clock = {}
    t0 = time.perf_counter()
    loss = loss_fn(model, inputs, labels, decision)
    sync()
    clock["forward"] = time.perf_counter() - t0
    loss.backward()
    sync()
    clock["backward"] = time.perf_counter() - t0 - clock["forward"]
    opt.step()
    opt.zero_grad(set_to_none=True)
    sync()
    clock["optimizer"] = time.perf_counter() - t0 - clock["forward"] - clock["backward"]
    return clock


def part_sft_split(device: str, s: dict, _compile: bool) -> dict:
    import torch

    from perf.gpu import sft_loss, toy_stream
    from perf.probe_steps import sync

    cfg = _recipe("sft", "p3i_4b_sft")
    model, renderer, about, size = _model(device, s)
    if cfg.sft.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    loss_fn = functools.partial(sft_loss, renderer=renderer, gamma=cfg.loss.gamma)
    batch = renderer.render(*toy_stream(0, s["sft_frames"], size))
    inputs = {k: v.to(device) for k, v in batch.as_model_inputs().items()}
    labels, decision = batch.labels[None].to(device), batch.decision_mask[None].to(device)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.sft.learning_rate)
    model.train()
    args = (model, opt, inputs, labels, decision, loss_fn, lambda: sync(device))
    _split_step(*args)  # warm-up: kernels, and the optimizer's state allocated
    clock = _split_step(*args)
    return {
        **{f"sft_{k}_s": round(v, 4) for k, v in clock.items()},
        "sft_step_s": round(sum(clock.values()), 4),
        "sft_tokens": int(batch.input_ids.numel()),
        "sft_frames": s["sft_frames"],
        "sft_gradient_checkpointing": bool(cfg.sft.gradient_checkpointing),
        "model": about,
    }


PARTS = Registry(
    "gpu-probe part",
    {
        name: f"perf.gpu_probe:part_{name}"
        for name in ("engine_steps", "host_vs_device", "grpo_rollout", "sft_split")
    },
)


def run_part(name: str, device: str, compile_: bool) -> dict:
    """One part in this process: its figures and this process's peak memory."""
    start_part(device)
    return PARTS[name](device, SETTINGS[device], compile_) | {"peak_gib": _peak_gib(device)}


def summarize(device: str, parts: dict) -> dict:
    """The line: every part's keys (its figures, or its failure), ``peak_gib`` per part, ``parts``."""
    import torch

    out: dict = {
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "model": SETTINGS[device]["model"],
        "peak_gib": {},
    }
    for name, result in parts.items():
        figures = result.get("figures", result.get("partial", {}))
        failure = f"{result['status']}: {result.get('error', '')}"
        for key in KEYS[name]:
            out[key] = figures.get(key, failure)
        out["peak_gib"][name] = figures["peak_gib"] if result["status"] == "ok" else failure
    out["parts"] = {n: {k: r[k] for k in ("status", "seconds", "error") if k in r} for n, r in parts.items()}
    return out


def run_all(device: str, parts: list[str], compile_: bool, caps: dict) -> dict:
    """Every part in turn, each under its cap and what is left of the deadline; the line's dict."""
    s = SETTINGS[device]
    caps = s["caps"] | caps
    deadline = max(s["deadline"], sum(caps[p] for p in parts))
    start, results = time.perf_counter(), {}
    extra = ("--compile",) if compile_ else ()
    for name in parts:
        left = deadline - (time.perf_counter() - start)
        if left < 5:
            results[name] = {"status": "skipped", "error": "the overall deadline was spent", "seconds": 0}
            continue
        cap = min(caps[name], left)
        results[name] = spawn_part(name, device, cap, None, "perf.gpu_probe", extra)
        print(f"gpu-probe: {name}: {results[name]['status']} in {results[name]['seconds']} s", flush=True)
    return summarize(device, results) | {"wall_s": round(time.perf_counter() - start, 1)}


def _refuse(message: str) -> None:
    print(f"gpu-probe: {message}", file=sys.stderr)
    sys.exit(2)


def main(argv: list[str] | None = None) -> dict | None:
    ap = argparse.ArgumentParser(prog="python -m perf gpu_probe", description=__doc__.splitlines()[0])
    ap.add_argument(
        "--device", choices=sorted(SETTINGS), default=None, help="default: cuda when there is one"
    )
    ap.add_argument("--parts", default=",".join(PARTS), help="comma-separated parts to run")
    ap.add_argument("--compile", action="store_true", help="the static step through torch.compile too")
    ap.add_argument("--cap", action="append", default=[], metavar="PART=SECONDS", help="a part's time cap")
    ap.add_argument("--part", choices=sorted(PARTS), help=argparse.SUPPRESS)  # one part, in this process
    ap.add_argument("--missing", action="store_true", help="print the missing modules (one line) and exit")
    args = ap.parse_args(argv)
    caps = _caps_of(args.cap, PARTS, "gpu-probe")
    parts = [p for p in args.parts.split(",") if p]
    if unknown := sorted(set(parts) - set(PARTS)):
        _refuse(f"unknown part(s) {', '.join(unknown)}; choose from {', '.join(PARTS)}")
    missing = missing_modules()
    if args.missing:
        print(" ".join(m.split(">=")[0] for m in missing))
        return None
    if missing:
        _refuse(f"missing modules: {', '.join(missing)} (make gpu-wheels, then carry .whl)")
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        _refuse("--device cuda, but torch sees no CUDA device")
    if args.part:
        out = run_part(args.part, device, args.compile)
    else:
        out = run_all(device, parts, args.compile, caps)
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
