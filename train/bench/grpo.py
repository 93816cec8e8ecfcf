"""GRPO throughput on the tiny model (CPU): rollouts with and without frame sharing, and the time
split of one update between rollout, reward and policy update.

    python -m train.bench grpo                      # JSON on the last line
    python -m train.bench grpo --windows 8 --group 4 --threads 2
    python -m train.bench grpo --compile            # adds the rollouts with the model compiled

``shared``: the G rollouts of a window use one frame array, so each frame goes through the vision
tower once per window; ``unshared``: every rollout gets its own copy and its frames are encoded G
times. ``frames_encoded`` counts what the vision tower saw. ``--compile`` adds ``compiled``: the
shared rollouts with the language model compiled (``grpo.compile_rollouts``), timed on a second
pass (``compile_s``: the first, which builds the graphs), whether they sampled the same tokens as the
eager ones (same seeds), and ``compiled_speedup`` over an eager pass run just before it.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import torch
import yaml

from train.bench.sft import ROOT
from train.grpo_config import GRPOSettings, reward_spec


def bench_grpo(windows: int, group: int, threads: int, compile: bool = False) -> dict:
    from data_builders.config import RenderConfig
    from data_builders.frames import stream_frames
    from data_builders.records import load_streams, write_jsonl
    from data_builders.synthetic.toy import generate_toy
    from eval.config import quiet_libraries
    from eval.model import load_model_and_processor
    from eval.render import TurnRenderer
    from eval.streaming import EngineConfig, StreamingEngine
    from rewards.grpo import build_reward
    from train.grpo_trainer import GRPOLoop
    from train.rollout import make_windows

    quiet_libraries()
    torch.set_num_threads(threads)
    cfg = yaml.safe_load((ROOT / "conf" / "model" / "tiny.yaml").read_text())
    reward_cfg = yaml.safe_load((ROOT / "conf" / "reward" / "prs.yaml").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        model, processor = load_model_and_processor(cfg, cache_dir=Path(tmp) / "cache")
        write_jsonl(Path(tmp) / "records.jsonl", generate_toy(tmp, n=windows, seed=0))
        renderer = TurnRenderer(processor, RenderConfig(max_pixels=4096))
        streams = load_streams(Path(tmp) / "records.jsonl")
        frames = {s.id: stream_frames(s, Path(tmp) / s.video, renderer.cfg) for s in streams}
        pool = make_windows(streams, frames, window_steps=20, negative_share=1.0, seed=0)[:windows]
        out: dict = {
            "bench": "grpo",
            "model": "tiny",
            "device": "cpu",
            "windows": len(pool),
            "group": group,
            "window_steps": 20,
            "threads": threads,
        }
        model.eval()

        def roll(share: bool, compiled: bool = False) -> tuple[float, int, list]:
            """Every window's G rollouts: seconds, frames encoded, the tokens fed."""
            encoded, tokens, t0 = 0, [], time.perf_counter()
            for j, w in enumerate(pool):
                rows = [w.frames] * group if share else [w.frames.copy() for _ in range(group)]
                engine_cfg = EngineConfig(sample=True, max_new_tokens=16, seed=j, compile=compiled)
                engine = StreamingEngine(model, renderer, engine_cfg)
                with torch.no_grad():
                    tokens += [r.tokens for r in engine.run([w.stream] * group, rows)]
                encoded += engine.frames_encoded
            return time.perf_counter() - t0, encoded, tokens

        eager_tokens = {}
        for name, share in (("shared", True), ("unshared", False)):
            elapsed, encoded, eager_tokens[name] = roll(share)
            out[name] = {"windows_per_s": round(len(pool) / elapsed, 3), "frames_encoded": encoded}
        out["sharing_speedup"] = round(out["shared"]["windows_per_s"] / out["unshared"]["windows_per_s"], 3)
        if compile:
            compile_s, _, _ = roll(True, compiled=True)
            eager_s, _, _ = roll(True)  # warm, as the compiled pass is
            compiled_s, _, tokens = roll(True, compiled=True)
            out["compiled"] = {
                "windows_per_s": round(len(pool) / compiled_s, 3),
                "eager_windows_per_s": round(len(pool) / eager_s, 3),
                "compile_s": round(compile_s, 1),
                "same_tokens": tokens == eager_tokens["shared"],
            }
            out["compiled_speedup"] = round(eager_s / compiled_s, 3)
        loop_cfg = GRPOSettings(
            learning_rate=1e-4,
            windows_per_step=len(pool),
            num_generations=group,
            max_new_tokens=16,
            save_total_limit=1,
        )
        loop = GRPOLoop(
            loop_cfg,
            model,
            processor,
            renderer,
            build_reward(reward_spec(reward_cfg)),
            pool,
            Path(tmp) / "run",
        )
        row = loop.update()
    split = {k: row[k] for k in ("rollout_s", "reward_s", "update_s")}
    total = sum(split.values())
    out["update_time_s"] = {k: round(v, 4) for k, v in split.items()}
    out["update_time_share"] = {k: round(v / total, 4) for k, v in split.items()}
    return out
