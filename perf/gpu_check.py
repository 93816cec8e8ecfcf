"""One command that measures what a cluster allocation needs to know, on one GPU, in 6 minutes.

    make gpu-check                      # python -m perf gpu_check --device cuda (the 4B, random weights)
    make gpu-check DEVICE=cpu           # the same code on the tiny model, under 3 minutes on 2 cores

Six parts, each in its own subprocess with its own time cap (a CUDA out-of-memory error or a hang
ends that part alone; the parts still to come run), all inside one overall deadline of 5 minutes
on a GPU (6 with ``make gpu-check``'s install of the carried wheels and the processes' starts):

- ``sft``: the SFT step of ``experiment=p3i_4b_sft`` (its model, gradient checkpointing, learning
  rate and focal exponent, the vision tower frozen) on one 30-step window, the mixture's sample
  length: forward, the trainer's loss at the labelled positions, backward, AdamW
  (``perf.gpu.bench_sft``). ``sft_mfu``: model FLOPs (6 x language-model parameters x tokens,
  the causal attention's 6 x layers x tokens^2 x heads x head width, the frozen vision tower's
  forward) per second over the device's bf16 dense peak (H100/H200 989, A100 312 TFLOP/s), or, for a
  device not in that table (a CPU), over the rate of a square matrix product measured on it
  (``sft_peak_source`` says which).
- ``grpo``: one update of ``experiment=p3i_4b_grpo`` (windows per update, group size, window length,
  reply length, learning rate, gradient checkpointing) over toy windows drawn in memory
  (``train.grpo.loop.GRPOLoop.update``): rollout seconds and update seconds.
- ``engine``: the streaming engine, eager, silent (threshold above 1): steps/s of one stream,
  stream-steps/s of 8 streams batched (30 steps each on a GPU), where one silent and one firing step's time goes
  (``engine_step_split``: ``perf.profile.profile_stream`` at step ``profile_at``; on a GPU the
  device's busy time, kernel launches and synchronisations beside the host's time in the
  language model, the vision call, the head and the engine's own work), and the median step early
  and late in a long stream (240 steps on a GPU) with a 32-frame window
  (``perf.gpu.window_figures``).
- ``compiled``: one stream and 8 batched, eager vs compiled language model
  (``perf.compile.bench_case``); ``compiled_vs_eager``: one stream's eager step time over its
  compiled one.
- ``probes``: 12 probes over a 240-step stream (``engine.probes.answer_probes``; on CPU 20 over
  120), one branched pass vs a re-run per probe on the cut video. The re-runs of ``--rerun-probes`` probes spread over
  the stream are timed, a quadratic in the probe's step fitted through them, and the other probes'
  re-runs read off it (``probe_rerun_timed`` says how many were timed; ``--rerun-probes 20`` times
  them all).
- ``eval``: ``python -m eval.run`` on toy records at ``render=hd``, batch 8, the model built with
  random weights: streams per hour over the command's whole wall time, model building included
  (``eval_wall_s``).

On CUDA ``peak_gib`` is each part's ``torch.cuda.max_memory_allocated``; on CPU the part's peak
resident set. A part that fails or runs past its cap gives ``"failed: <its last error line>"`` (or
``"timeout after N s"``) in each of its keys and in ``parts``. Prints one JSON object on its last
line and writes it, with a markdown table, to ``<out>/gpu_check-<device>-<UTC time>.{json,md}``.

Before anything heavy it checks the modules the project needs and prints one line naming the
missing ones (exit 2); ``make gpu-wheels`` fetches them as wheels into ``.whl/`` for a machine
without a registry, and ``make gpu-check`` installs them from there into ``.whl/site``.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from infra.registry import Registry

ROOT = Path(__file__).resolve().parents[1]
#: import name -> (distribution, lowest version); the modules the six parts import.
NEEDED = {
    "torch": ("torch", "2.9"),
    "transformers": ("transformers", "5.23"),
    "accelerate": ("accelerate", None),
    "peft": ("peft", None),
    "safetensors": ("safetensors", None),
    "numpy": ("numpy", None),
    "PIL": ("pillow", None),
    "yaml": ("pyyaml", None),
    "tokenizers": ("tokenizers", None),
    "hydra": ("hydra-core", None),
    "omegaconf": ("omegaconf", None),
    "antlr4": ("antlr4-python3-runtime", None),
    "av": ("av", None),
}
#: What each part measures, in the order they run: part -> its keys in the summary.
KEYS = {
    "sft": ("sft_step_s", "sft_tokens_per_s", "sft_mfu"),
    "grpo": ("grpo_rollout_s", "grpo_update_s"),
    "engine": (
        "engine_steps_per_s",
        "batched_stream_steps_per_s",
        "engine_step_split",
        "window_step_ms_early",
        "window_step_ms_late",
    ),
    "compiled": ("compiled_vs_eager", "compiled_batched_stream_steps_per_s"),
    "probes": ("probe_branch_vs_rerun",),
    "eval": ("eval_streams_per_hour",),
}
#: Per device: the model, the sizes, each part's cap in seconds and the overall deadline.
SETTINGS = {
    "cuda": {
        "model": "conf/model/qwen3_vl_4b.yaml",
        "stream_steps": 30,
        "profile_at": 20,
        "window_steps": 240,
        "grpo_windows": 1,  # one rank's share: the recipe rolls its 6 windows out on 6 ranks
        "compiled_steps": 16,
        "probes": (240, 12, 8),  # stream steps, probes, reply tokens
        "eval": {"render": "hd", "streams": 16, "seconds": 6},
        # 6 minutes with the install (since 2026-12-06; 8 before): the H200 run of 2026-12-04
        # (docs/performance.md) took sft 29 s, grpo 64 s, engine 102 s with 60 steps of one stream and
        # a 480-step window, so the engine's streams are halved; the probes part keeps what it measured
        "caps": {"sft": 35, "grpo": 65, "engine": 60, "compiled": 40, "probes": 55, "eval": 45},
        "deadline": 300,
    },
    "cpu": {  # the same code, sized for 2 shared cores: the tiny model, shorter runs, toy frames
        "model": "conf/model/tiny.yaml",
        "stream_steps": 30,
        "profile_at": 10,
        "window_steps": 100,
        "grpo_windows": 2,
        "compiled_steps": 8,
        "probes": (120, 20, 8),
        "eval": {"render": "toy", "streams": 24, "seconds": 12},
        # importing torch and transformers alone takes 7 s of CPU, 17 s of wall at a load of 7
        "caps": {"sft": 40, "grpo": 40, "engine": 35, "compiled": 60, "probes": 35, "eval": 40},
        "deadline": 175,
    },
}
#: bf16 dense peak of known devices, by a word of their name (TFLOP/s).
PEAK_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0}
SFT_WINDOW_STEPS = 30  # the mixture's samples (experiment=p3i_4b_sft: one window per sample)
BATCH = 8


def _version(dist: str) -> tuple[int, ...]:
    raw = importlib.metadata.version(dist).split("+")[0]
    return tuple(int(x) for x in raw.split(".")[:2] if x.isdigit())


def missing_modules() -> list[str]:
    """The needed modules that cannot be imported here, or are older than the project needs."""
    missing = []
    for name, (dist, lowest) in NEEDED.items():
        if importlib.util.find_spec(name) is None:
            missing.append(name)
        elif lowest and _version(dist) < tuple(int(x) for x in lowest.split(".")):
            missing.append(f"{name}>={lowest} (have {importlib.metadata.version(dist)})")
    return missing


# -- the parts (each runs in its own process: ``--part NAME``) --------------------------------------

PARTIAL_ENV = "GPU_CHECK_PARTIAL"
_noted: dict = {}  # this part's figures so far


def note(**figures) -> None:
    """Keep a part's figures as they are measured (a JSON file the parent reads when the part runs
    out of time, so that what was measured before the cap still shows), and say so on stderr."""
    _noted.update(figures)
    print(f"gpu-check: {json.dumps(figures)}", file=sys.stderr, flush=True)
    if path := os.environ.get(PARTIAL_ENV):
        Path(path).write_text(json.dumps(_noted))


def _peak_gib(device: str) -> float:
    """This process's peak: CUDA memory allocated, or on CPU the resident set (``ru_maxrss``)."""
    import torch

    if device == "cuda":
        return round(torch.cuda.max_memory_allocated() / 2**30, 2)
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)


def _model(device: str, s: dict):
    """The settings' model with random weights on ``device``, its renderer at the model's frame size."""
    from perf.gpu import build_model, model_side

    size = model_side(s["model"])
    model, renderer, about = build_model(s["model"], device, size)
    return model, renderer, about, size


def _recipe(root: str, experiment: str):
    """``conf/<root>.yaml`` composed with ``experiment=<experiment>`` (the recipe's blocks)."""
    import train.grpo.config  # noqa: F401  (stores the grpo schema)
    import train.sft.config  # noqa: F401  (stores the sft schema)
    from infra.schema import compose

    return compose(root, [f"experiment={experiment}"])


def device_peak_flops(device: str) -> tuple[float, str]:
    """(FLOP/s, where it comes from): the bf16 dense peak of a known GPU, else a measured square
    matrix product (2,048 on CPU in float32, 8,192 in bf16 elsewhere), the best of 3."""
    import torch

    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    for word, tflops in PEAK_TFLOPS.items():
        if word in name:
            return tflops * 1e12, f"{name}: bf16 dense peak {tflops:g} TFLOP/s"
    n, dtype = (2048, torch.float32) if device == "cpu" else (8192, torch.bfloat16)
    a = torch.randn(n, n, device=device, dtype=dtype)
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        a @ a
        if device == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best, f"{name}: measured {n}x{n} {str(dtype).split('.')[-1]} matrix product"


def sft_flops(model, tokens: int, patches: int) -> float:
    """Model FLOPs of one SFT step: the language model's matrix products forward and backward
    (6 per parameter and token, embeddings left out), its causal attention (6 x layers x tokens^2
    x heads x head width) and the frozen vision tower's forward (2 per parameter and patch)."""
    text = model.config.text_config
    lm = model.model.language_model
    lm_params = sum(p.numel() for n, p in lm.named_parameters() if "embed_tokens" not in n)
    vision = sum(p.numel() for p in model.model.visual.parameters())
    attention = 6 * text.num_hidden_layers * tokens**2 * text.num_attention_heads * text.head_dim
    return 6 * lm_params * tokens + attention + 2 * vision * patches


def part_sft(device: str, s: dict) -> dict:
    from perf.gpu import bench_sft

    cfg = _recipe("sft", "p3i_4b_sft")
    steps = cfg.sft.window_steps or SFT_WINDOW_STEPS
    model, renderer, about, size = _model(device, s)
    if cfg.sft.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    out = bench_sft(model, renderer, device, steps, size, 3, gamma=cfg.loss.gamma, lr=cfg.sft.learning_rate)
    peak, source = device_peak_flops(device)
    flops = sft_flops(model, out["tokens"], out["patches"])
    return {
        "sft_step_s": out["step_s"],
        "sft_tokens_per_s": out["tokens_per_s"],
        "sft_mfu": round(flops / out["step_s"] / peak, 4),
        "sft_tokens": out["tokens"],
        "sft_frames": steps,
        "sft_gradient_checkpointing": bool(cfg.sft.gradient_checkpointing),
        "sft_peak_source": source,
        "model": about,
    }


def _every_window_trained(loop) -> dict:
    """Make every window of ``loop``'s updates run its loss forward and backward. A window whose
    rollouts scored alike (random weights on toy windows: the usual case here) has no advantage and
    the loop skips its loss, so the update would time nothing; such a window gets a small constant
    advantage instead, which costs what a real one does. Returns a dict that counts the windows that
    had a signal of their own."""
    import torch

    scored, seen = loop._scored, {"windows": 0}

    def scored_all_live(rolled):
        groups = scored(rolled)
        for g in groups:
            if g.token_adv is None:
                continue
            seen["windows"] += g.live
            if not g.live:
                g.token_adv = torch.full_like(g.token_adv, 1e-3)
        return groups

    loop._scored = scored_all_live
    return seen


def part_grpo(device: str, s: dict) -> dict:
    import tempfile

    from perf.gpu import toy_stream
    from train.grpo.config import reward_spec
    from train.grpo.loop import GRPOLoop
    from train.grpo.rewards import build_reward
    from train.grpo.rollout import make_windows

    cfg = _recipe("grpo", "p3i_4b_grpo")
    g = cfg.grpo
    model, renderer, about, size = _model(device, s)
    if g.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if s["grpo_windows"]:
        g.windows_per_step = s["grpo_windows"]
    drawn = [toy_stream(i, g.window_steps, size) for i in range(g.windows_per_step)]
    frames = {stream.id: f for stream, f in drawn}
    # toy_stream's clips carry no targets: every window is a negative one (PRS scores the silence)
    pool = make_windows([st for st, _ in drawn], frames, g.window_steps, negative_share=1.0, seed=0)
    reward = build_reward(reward_spec(cfg.reward))
    with tempfile.TemporaryDirectory() as run_dir:
        loop = GRPOLoop(g, model, renderer.processor, renderer, reward, pool, run_dir)
        with_signal = _every_window_trained(loop)
        row = loop.update()
    return {
        "grpo_rollout_s": round(row["rollout_s"], 3),
        "grpo_update_s": round(row["update_s"], 3),
        "grpo_reward_s": round(row["reward_s"], 4),
        "grpo_windows": len(pool),
        "grpo_windows_with_signal": with_signal["windows"],
        "grpo_group": g.num_generations,
        "grpo_window_steps": g.window_steps,
        "grpo_max_new_tokens": g.max_new_tokens,
        "model": about,
    }


def part_engine(device: str, s: dict) -> dict:
    import torch

    from engine.streaming import EngineConfig, StreamingEngine
    from perf.gpu import timed_on, toy_stream, window_figures

    model, renderer, about, size = _model(device, s)
    cfg = EngineConfig(threshold=1.01, max_new_tokens=8)  # above 1: silent, the decision path alone
    steps = s["stream_steps"]
    many = [toy_stream(i, steps, size) for i in range(BATCH)]

    def run(rows):
        return StreamingEngine(model, renderer, cfg).run([r[0] for r in rows], [r[1] for r in rows])

    with torch.no_grad():
        timed_on(
            device, lambda: (run([(st, f[:4]) for st, f in many[:1]]), run([(st, f[:4]) for st, f in many]))
        )
        _, one_s = timed_on(device, lambda: run(many[:1]))
        note(engine_steps_per_s=round(steps / one_s, 2))
        _, batch_s = timed_on(device, lambda: run(many))
        note(batched_stream_steps_per_s=round(BATCH * steps / batch_s, 2))
        split = step_split(model, renderer, device, size, s["profile_at"])
        note(engine_step_split=split)
        window = window_figures(model, renderer, cfg, device, s["window_steps"], size)
    return {
        "engine_steps_per_s": round(steps / one_s, 2),
        "batched_stream_steps_per_s": round(BATCH * steps / batch_s, 2),
        "engine_step_split": split,
        "window_step_ms_early": window["window_step_ms_early"],
        "window_step_ms_late": window["window_step_ms_late"],
        "window_late_vs_early": window["window_late_vs_early"],
        "window_steps": s["window_steps"],
        "frame_side": size,
        "model": about,
    }


#: The figures of a profiled step kept in ``engine_step_split`` (``perf.profile``; the ``gpu``
#: ones on a GPU only).
SPLIT_FIGURES = (
    "wall_ms",
    "host_ms",
    "model_cpu_ms",
    "vision_cpu_ms",
    "head_cpu_ms",
    "model_calls",
    "syncing_ops",
    "gpu_busy_ms",
    "model_gpu_ms",
    "launches",
    "syncs",
    "sync_wait_ms",
)


def step_split(model, renderer, device: str, size: int, at: int) -> dict:
    """Where a silent and a firing step's time goes at step ``at`` of one stream (no window): the
    profiled steps' figures (milliseconds, the profiler's overhead included) and the unprofiled
    silent step beside them."""
    from perf.profile import profile_stream

    found = profile_stream(model, renderer, device, size, at, None, max_new=8)
    split = {"at": at, "unprofiled_silent_ms": found["unprofiled_step_ms"]}
    for kind in ("silent", "firing"):
        split[kind] = {k: found[kind][k] for k in SPLIT_FIGURES if k in found[kind]}
    return split


def part_compiled(device: str, s: dict) -> dict:
    import torch

    from perf.compile import bench_case
    from perf.gpu import toy_stream

    model, renderer, about, size = _model(device, s)
    rows = [toy_stream(i, s["compiled_steps"], size) for i in range(BATCH)]
    with torch.no_grad():
        one = bench_case(model, renderer, device, rows[:1], 1.01, 8, 4, 2)
        batched = bench_case(model, renderer, device, rows, 1.01, 8, 4, 2)
    return {
        "compiled_vs_eager": one["eager_vs_compiled"],
        "compiled_batched_stream_steps_per_s": round(1e3 * BATCH / batched["compiled_step_ms"], 2),
        "eager_batched_stream_steps_per_s": round(1e3 * BATCH / batched["eager_step_ms"], 2),
        "compiled_batch1": one,
        f"compiled_batch{BATCH}": batched,
        "model": about,
    }


def _reruns_read_off(probes: list, rerun: dict[int, float]) -> float:
    """The seconds of a re-run per probe: those timed (``rerun``: probe index -> seconds) as timed,
    the others read off a polynomial in the probe's step fitted through them (a line through two,
    a quadratic through more)."""
    import numpy as np

    timed = list(rerun)
    fit = np.polyfit([probes[i].step + 1 for i in timed], [rerun[i] for i in timed], min(2, len(timed) - 1))
    return sum(
        rerun[i] if i in rerun else max(0.0, float(np.polyval(fit, p.step + 1))) for i, p in enumerate(probes)
    )


def part_probes(device: str, s: dict, rerun_probes: int) -> dict:
    import torch

    from engine.probes import Probe, answer_probes
    from perf.gpu import timed_on, toy_stream

    steps, n, tokens = s["probes"]
    model, renderer, about, size = _model(device, s)
    stream, frames = toy_stream(3, steps, size)
    probes = [Probe((i + 1) * steps // n - 1, f"What has happened by probe {i + 1}?", i) for i in range(n)]

    def ask(probes_, frames_=frames, mode="branch"):
        return answer_probes(model, renderer, stream, frames_, probes_, max_new_tokens=tokens, mode=mode)

    k = max(2, min(rerun_probes, n))
    spread = sorted({round(j * (n - 1) / (k - 1)) for j in range(k)})
    timed = [spread[0], spread[-1], *spread[1:-1]]  # the two ends first: a line through them early
    rerun = {}
    with torch.no_grad():
        ask([Probe(3, "warm-up", "w")], frames[:4])
        branch, branch_s = timed_on(device, lambda: ask(probes))
        note(probe_branch_s=round(branch_s, 2))
        for i in timed:
            answer, rerun[i] = timed_on(device, lambda i=i: ask([probes[i]], mode="rerun"))
            note(probe_rerun_s_at_step={probes[j].step: round(rerun[j], 2) for j in rerun})
            if len(rerun) == 2:  # what a part stopped by its cap still tells: a line through the ends
                note(probe_branch_vs_rerun_linear=round(_reruns_read_off(probes, rerun) / branch_s, 2))
            if answer[0].text != branch[i].text:
                raise RuntimeError(
                    f"probe {i}: the re-run answered {answer[0].text!r}, the branch {branch[i].text!r}"
                )
    total = _reruns_read_off(probes, rerun)
    return {
        "probe_branch_vs_rerun": round(total / branch_s, 2),
        "probe_branch_s": round(branch_s, 2),
        "probe_rerun_s": round(total, 2),
        "probe_rerun_timed": len(timed),
        "probe_setup": {"steps": steps, "probes": n, "max_new_tokens": tokens},
        "model": about,
    }


def _prediction_lines(out: Path) -> int:
    return sum(len(p.read_bytes().splitlines()) for p in out.rglob("predictions*.jsonl"))


def part_eval(device: str, s: dict) -> dict:
    """``python -m eval.run`` over toy records, batch 8; the steady rate is the streams of the
    batches after the first over the time from the first batch's predictions to the last's."""
    import tempfile

    from data_builders.record_io import write_jsonl
    from data_builders.synthetic.toy import generate_toy

    e = s["eval"]
    with tempfile.TemporaryDirectory() as tmp:
        records = Path(tmp) / "toy" / "records.jsonl"  # the videos' paths are relative to its folder
        toy = generate_toy(records.parent, n=e["streams"], seed=0, duration=e["seconds"], size=448)
        write_jsonl(records, toy)
        name = Path(s["model"]).stem
        cmd = [sys.executable, "-m", "eval.run", "checkpoint=null", f"records={records}", f"model={name}"]
        cmd += [f"render={e['render']}", f"batch_size={BATCH}", f"out_dir={tmp}/out"]
        cmd += ["timelines=0", "view=false", "logger=none"]
        if name != "tiny":
            cmd += ["model.random_init=true", f"model.init_device={device}"]
        t0, batches = time.perf_counter(), []
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        while proc.poll() is None:
            time.sleep(0.05)
            if _prediction_lines(Path(tmp) / "out") >= BATCH * (len(batches) + 1):
                batches.append(time.perf_counter() - t0)
                note(eval_batches_landed_s=[round(b, 1) for b in batches])
        wall = time.perf_counter() - t0
        while _prediction_lines(Path(tmp) / "out") >= BATCH * (len(batches) + 1):  # landed as it ended
            batches.append(wall)
        _, err = proc.communicate()
        if proc.returncode:
            raise RuntimeError(f"eval.run exited {proc.returncode}: {_last_line(err)}")
    if len(batches) < 2:
        raise RuntimeError(f"eval.run: {len(batches)} batch(es) seen landing, 2 needed for a rate")
    return {
        "eval_streams_per_hour": round(3600 * BATCH * (len(batches) - 1) / (batches[-1] - batches[0]), 1),
        "eval_streams_per_hour_with_startup": round(3600 * e["streams"] / wall, 1),
        "eval_wall_s": round(wall, 1),
        "eval_first_batch_s": round(batches[0], 1),
        "eval_streams": e["streams"],
        "eval_stream_seconds": e["seconds"],
        "eval_render": e["render"],
    }


PARTS = Registry(
    "gpu-check part",
    {name: f"perf.gpu_check:part_{name}" for name in ("sft", "grpo", "engine", "compiled", "probes", "eval")},
)


def start_part(device: str) -> None:
    """How a part's process starts (here and in ``perf.gpu_probe``): the libraries quiet and,
    on CPU, one torch thread."""
    import torch

    from infra.entry import quiet_libraries

    quiet_libraries()
    if device == "cpu":
        torch.set_num_threads(1)


def run_part(name: str, device: str, rerun_probes: int) -> dict:
    """One part in this process: its figures and this process's peak memory."""
    start_part(device)
    s = SETTINGS[device]
    args = (rerun_probes,) if name == "probes" else ()
    out = PARTS[name](device, s, *args)
    return out | {"peak_gib": _peak_gib(device)}


# -- the orchestration -------------------------------------------------------------------------------


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "no output"


def spawn_part(
    name: str,
    device: str,
    cap: float,
    rerun_probes: int | None,
    module: str = "perf.gpu_check",
    extra: tuple[str, ...] = (),
) -> dict:
    """The part in a child process of its own session (``python -m <module> --part NAME``, then
    ``extra``), killed whole past ``cap`` seconds."""
    cmd = [sys.executable, "-m", module, "--part", name, "--device", device, *extra]
    if rerun_probes is not None:
        cmd += ["--rerun-probes", str(rerun_probes)]
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        partial = Path(tmp) / "partial.json"
        proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            env=os.environ | {PARTIAL_ENV: str(partial)},
        )
        try:
            out, err = proc.communicate(timeout=max(1.0, cap))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            _, err = proc.communicate()
            return {
                "status": "timeout",
                "error": f"timeout after {cap:.0f} s; its last line: {_last_line(err)}",
                "seconds": round(cap, 1),
                "partial": json.loads(partial.read_text()) if partial.exists() else {},
            }
    seconds = round(time.perf_counter() - t0, 1)
    if proc.returncode:
        return {"status": "failed", "error": _last_line(err), "seconds": seconds}
    try:
        return {"status": "ok", "seconds": seconds, "figures": json.loads(out.strip().splitlines()[-1])}
    except (ValueError, IndexError):
        return {"status": "failed", "error": f"no JSON line: {_last_line(out + err)}", "seconds": seconds}


def summarize(device: str, parts: dict) -> dict:
    """The summary: every part's keys (a number, or the part's failure), ``peak_gib`` per part."""
    import torch

    out: dict = {
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "model": SETTINGS[device]["model"],
        "peak_gib_kind": "torch.cuda.max_memory_allocated" if device == "cuda" else "process peak RSS",
    }
    out["peak_gib"] = {}
    for name, result in parts.items():
        figures = result.get("figures", result.get("partial", {}))
        failure = f"{result['status']}: {result.get('error', '')}"
        for key in KEYS[name]:
            out[key] = figures[key] if key in figures else failure
        out["peak_gib"][name] = figures["peak_gib"] if result["status"] == "ok" else failure
    out["parts"] = parts
    return out


def markdown(summary: dict) -> str:
    """The summary as a markdown table, one row per figure."""
    lines = [
        f"# gpu-check: {summary['device']}, torch {summary['torch']}, {summary['model']}",
        "",
        "| part | figure | value | part's seconds |",
        "|---|---|---|---|",
    ]
    for name, result in summary["parts"].items():
        seconds = result["seconds"]
        for key in (*KEYS[name], "peak_gib"):
            value = summary["peak_gib"][name] if key == "peak_gib" else summary[key]
            lines.append(f"| {name} | {key} | {value} | {seconds} |")
    return "\n".join(lines) + "\n"


def run_all(
    device: str, out_dir: Path, parts: list[str], rerun_probes: int, caps: dict | None = None
) -> dict:
    """Every part in turn, each under its cap and what is left of the deadline; the summary written.
    ``caps`` overrides parts' caps (seconds) and, where they add up to more, the deadline."""
    s = dict(SETTINGS[device])
    if caps:
        s["caps"] = s["caps"] | caps
        s["deadline"] = max(s["deadline"], sum(s["caps"][p] for p in parts))
    start, results = time.perf_counter(), {}
    for name in parts:
        left = s["deadline"] - (time.perf_counter() - start)
        if left < 5:
            results[name] = {"status": "skipped", "error": "the overall deadline was spent", "seconds": 0}
            continue
        results[name] = spawn_part(name, device, min(s["caps"][name], left), rerun_probes)
        print(f"gpu-check: {name}: {results[name]['status']} in {results[name]['seconds']} s", flush=True)
    summary = summarize(device, results)
    summary["wall_s"] = round(time.perf_counter() - start, 1)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / f"gpu_check-{device}-{datetime.now(UTC):%Y%m%dT%H%M%SZ}"
    stem.with_suffix(".json").write_text(json.dumps(summary, indent=2) + "\n")
    stem.with_suffix(".md").write_text(markdown(summary))
    summary["table"] = str(stem.with_suffix(".md"))
    return summary


def _caps(pairs: list[str]) -> dict:
    """``--cap PART=SECONDS`` pairs as a dict; a bad pair exits 2 with the reason."""
    return _caps_of(pairs, PARTS, "gpu-check")


def _caps_of(pairs: list[str], parts, command: str) -> dict:
    """``--cap PART=SECONDS`` pairs, PART one of ``parts``, as a dict; a bad pair exits 2 with the
    reason, ``command`` naming the command that refuses it."""
    caps = {}
    for pair in pairs:
        name, _, value = pair.partition("=")
        try:
            seconds = float(value)
        except ValueError:
            seconds = 0.0
        if name not in parts or not seconds > 0:
            print(
                f"{command}: --cap {pair!r}: want PART=SECONDS, PART one of {', '.join(parts)}",
                file=sys.stderr,
            )
            sys.exit(2)
        caps[name] = seconds
    return caps


def main(argv: list[str] | None = None) -> dict | None:
    ap = argparse.ArgumentParser(prog="python -m perf gpu_check", description=__doc__.splitlines()[0])
    ap.add_argument(
        "--device", choices=sorted(SETTINGS), default=None, help="default: cuda when there is one"
    )
    ap.add_argument("--out", default="runs/gpu_check", help="folder of the JSON and markdown files")
    ap.add_argument("--parts", default=",".join(PARTS), help="comma-separated parts to run")
    ap.add_argument("--rerun-probes", type=int, default=4, help="probes whose re-run is timed (2-20)")
    ap.add_argument(
        "--cap",
        action="append",
        default=[],
        metavar="PART=SECONDS",
        help="a part's time cap (repeatable; a slower device); the deadline grows to their sum",
    )
    ap.add_argument("--part", choices=sorted(PARTS), help=argparse.SUPPRESS)  # one part, in this process
    ap.add_argument("--missing", action="store_true", help="print the missing modules (one line) and exit")
    args = ap.parse_args(argv)
    caps = _caps(args.cap)  # a bad --cap is refused before anything loads
    missing = missing_modules()
    if args.missing:
        print(" ".join(m.split(">=")[0] for m in missing))
        return None
    if missing:
        print(
            f"gpu-check: missing modules: {', '.join(missing)} (make gpu-wheels, then carry .whl)",
            file=sys.stderr,
        )
        sys.exit(2)
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        print("gpu-check: --device cuda, but torch sees no CUDA device", file=sys.stderr)
        sys.exit(2)
    if args.part:
        out = run_part(args.part, device, args.rerun_probes)
    else:
        parts = [p for p in args.parts.split(",") if p]
        unknown = sorted(set(parts) - set(PARTS))
        if unknown:
            print(
                f"gpu-check: unknown part(s) {', '.join(unknown)}; choose from {', '.join(PARTS)}",
                file=sys.stderr,
            )
            sys.exit(2)
        out = run_all(
            device,
            ROOT / args.out if not Path(args.out).is_absolute() else Path(args.out),
            parts,
            args.rerun_probes,
            caps,
        )
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
