"""GRPO throughput on the tiny model (CPU): rollouts with and without frame sharing, and the time
split of one update between rollout, reward and policy update.

    python -m perf grpo                      # JSON on the last line
    python -m perf grpo --windows 8 --group 4 --threads 2
    python -m perf grpo --compile            # adds the rollouts with the model compiled

``shared``: the G rollouts of a window use one frame array, so each frame goes through the vision
tower once per window; ``unshared``: every rollout gets its own copy and its frames are encoded G
times. ``frames_encoded`` counts what the vision tower saw. ``--compile`` adds ``compiled``: the
shared rollouts with the language model compiled (``grpo.compile_rollouts``), timed on a second
pass (``compile_s``: the first, which builds the graphs), whether they sampled the same tokens as the
eager ones (same seeds), and ``compiled_speedup`` over an eager pass run just before it.

``update_parts`` splits the policy update of the last of ``--updates`` updates, measured in
``train.grpo.loop.GRPOLoop`` itself (``GRPOLoop.timing``): ``update_forward_s`` (the loss forwards,
with the window's frames, and the loss), ``update_backward_s``, ``optimizer_s`` (clipping and AdamW),
``loss_forwards`` (one per window: its G rollouts are the rows of one batch), ``loss_rows``,
``loss_positions`` (padding included) against ``loss_tokens``, ``repeated_prefix_tokens`` (the
positions that repeat a group's common start) and whether gradient checkpointing was on
(``--checkpointing`` turns it on). Every window is given a signal, so each runs its loss forward.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch
import yaml

from data_builders.config import CONF_DIR, model_render
from engine.config import model_preset
from train.grpo.config import GRPOStageConfig, reward_spec

TINY = CONF_DIR / "model" / "tiny.yaml"
WINDOW_STEPS = 20


def window_pool(root: Path, windows: int):
    """The tiny model, its processor and renderer (``render=toy``), and ``windows`` toy windows."""
    from data_builders.frames import stream_frames
    from data_builders.record_io import load_streams, write_jsonl
    from data_builders.synthetic.toy import generate_toy
    from engine.model import load_model_and_processor
    from engine.render import TurnRenderer
    from train.grpo.rollout import make_windows

    model, processor = load_model_and_processor(model_preset(TINY), cache_dir=root / "cache")
    write_jsonl(root / "records.jsonl", generate_toy(root, n=windows, seed=0))
    renderer = TurnRenderer(processor, model_render(TINY))
    streams = load_streams(root / "records.jsonl")
    frames = {s.id: stream_frames(s, root / s.video, renderer.cfg) for s in streams}
    pool = make_windows(streams, frames, window_steps=WINDOW_STEPS, negative_share=1.0, seed=0)[:windows]
    return model, processor, renderer, pool


def roll(model, renderer, pool, group: int, share: bool, compiled: bool = False) -> tuple[float, int, list]:
    """Every window's G rollouts: seconds, frames encoded, the tokens fed."""
    from engine.streaming import EngineConfig, StreamingEngine

    encoded, tokens, t0 = 0, [], time.perf_counter()
    for j, w in enumerate(pool):
        rows = [w.frames] * group if share else [w.frames.copy() for _ in range(group)]
        engine_cfg = EngineConfig(sample=True, max_new_tokens=16, seed=j, compile=compiled)
        engine = StreamingEngine(model, renderer, engine_cfg)
        with torch.no_grad():
            tokens += [r.tokens for r in engine.run([w.stream] * group, rows)]
        encoded += engine.frames_encoded
    return time.perf_counter() - t0, encoded, tokens


def compiled_figures(model, renderer, pool, group: int, eager_tokens: list) -> dict:
    """The shared rollouts compiled: a first pass builds the graphs, an eager one and a second
    compiled one are timed warm."""
    compile_s, _, _ = roll(model, renderer, pool, group, True, compiled=True)
    eager_s, _, _ = roll(model, renderer, pool, group, True)  # warm, as the compiled pass is
    compiled_s, _, tokens = roll(model, renderer, pool, group, True, compiled=True)
    return {
        "compiled": {
            "windows_per_s": round(len(pool) / compiled_s, 3),
            "eager_windows_per_s": round(len(pool) / eager_s, 3),
            "compile_s": round(compile_s, 1),
            "same_tokens": tokens == eager_tokens,
        },
        "compiled_speedup": round(eager_s / compiled_s, 3),
    }


def every_window_live(loop) -> None:
    """Give the groups without signal (equal rewards) a small constant advantage, so that the
    update runs a loss forward and backward for every window whatever the random policy sampled."""
    scored = loop._scored

    def live(rolled):
        groups = scored(rolled)
        for g in groups:
            if g.token_adv is not None and not g.live:
                g.token_adv = torch.full_like(g.token_adv, 1e-3)
        return groups

    loop._scored = live


def update_split(
    model, processor, renderer, pool, group: int, run_dir: Path, updates: int = 1, checkpointing: bool = False
) -> dict:
    """GRPO updates over the pool (every window with signal), the last one's seconds and shares of
    rollout, reward and policy update, and the policy update split (``GRPOLoop.timing``): loss
    forwards, backwards, the optimizer step, what the forwards fed the model."""
    from train.grpo.loop import GRPOLoop
    from train.grpo.rewards import build_reward

    loop_cfg = GRPOStageConfig(
        learning_rate=1e-4,
        windows_per_step=len(pool),
        num_generations=group,
        max_new_tokens=16,
        save_total_limit=1,
    )
    reward = build_reward(reward_spec(yaml.safe_load((CONF_DIR / "reward" / "prs.yaml").read_text())))
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    loop = GRPOLoop(loop_cfg, model, processor, renderer, reward, pool, run_dir)
    every_window_live(loop)
    for _ in range(updates):
        row = loop.update()
    split = {k: row[k] for k in ("rollout_s", "reward_s", "update_s")}
    total = sum(split.values())
    parts = {k: round(v, 4) if isinstance(v, float) else v for k, v in loop.timing.items()}
    return {
        "update_time_s": {k: round(v, 4) for k, v in split.items()},
        "update_time_share": {k: round(v / total, 4) for k, v in split.items()},
        "update_parts": parts
        | {"gradient_checkpointing": model.is_gradient_checkpointing, "updates": updates},
    }


def bench_grpo(
    windows: int,
    group: int,
    threads: int,
    compile: bool = False,
    updates: int = 1,
    checkpointing: bool = False,
) -> dict:
    from infra.entry import quiet_libraries

    quiet_libraries()
    torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory() as tmp:
        model, processor, renderer, pool = window_pool(Path(tmp), windows)
        out: dict = {
            "bench": "grpo",
            "model": "tiny",
            "device": "cpu",
            "windows": len(pool),
            "group": group,
            "window_steps": WINDOW_STEPS,
            "threads": threads,
        }
        model.eval()
        eager_tokens = {}
        for name, share in (("shared", True), ("unshared", False)):
            elapsed, encoded, eager_tokens[name] = roll(model, renderer, pool, group, share)
            out[name] = {"windows_per_s": round(len(pool) / elapsed, 3), "frames_encoded": encoded}
        out["sharing_speedup"] = round(out["shared"]["windows_per_s"] / out["unshared"]["windows_per_s"], 3)
        if compile:
            out |= compiled_figures(model, renderer, pool, group, eager_tokens["shared"])
        run = Path(tmp) / "run"
        return out | update_split(model, processor, renderer, pool, group, run, updates, checkpointing)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m perf grpo", description=__doc__.splitlines()[0])
    ap.add_argument("--windows", type=int, default=8, help="rollout windows")
    ap.add_argument("--group", type=int, default=4, help="rollouts per window")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--compile", action="store_true", help="also roll out with the language model compiled")
    ap.add_argument("--updates", type=int, default=1, help="updates run; the last one is reported")
    ap.add_argument("--checkpointing", action="store_true", help="gradient checkpointing in the loss forward")
    args = ap.parse_args(argv)
    out = bench_grpo(args.windows, args.group, args.threads, args.compile, args.updates, args.checkpointing)
    print(json.dumps(out, sort_keys=True))
    return out
