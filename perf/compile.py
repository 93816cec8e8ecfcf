"""The streaming engine with its language model eager and compiled (``EngineConfig.compile``).

    python -m perf compile                                  # tiny model, CPU: ~1-2 min on 2 cores
    python -m perf compile --layers 36                      # tiny widths at the 4B's depth: ~18 min
    python -m perf compile --model conf/model/qwen3_vl_4b.yaml --device cuda --size 448

Four cases over toy streams with a ``--window``-frame window: silent (threshold above 1) and firing
at every step (threshold below 0, replies of ``--max-new-tokens``), each for one stream and for
``--batch`` streams in lock step; together they build every graph a run needs. Each case runs
compiled once first (``compile_s``: that run's wall time, graphs built), then eager and compiled
alternately ``--repeats`` times. Per case: the median wall milliseconds of a step each way (its
firing steps include the reply) and their ratio ``eager_vs_compiled``, whether the decisions and
replies are identical, and the largest difference of the decision logits. ``graphs``: the graphs
this command built (a process that compiled the same model code before may reuse some). JSON on
the last line.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time

import torch

from engine.step_forward import compiled_graphs
from engine.streaming import EngineConfig, StreamingEngine
from perf.gpu import SIZE_HELP, _sync, build_model, model_side, toy_stream

CASES = {"silent": 1.01, "firing": -1.0}  # thresholds


def _run(model, renderer, device: str, cfg: EngineConfig, rows) -> tuple[float, list, list]:
    """Wall seconds of one engine run, its median step latency and each row's steps."""
    _sync(device)
    t0 = time.perf_counter()
    results = StreamingEngine(model, renderer, cfg).run([s for s, _ in rows], [f for _, f in rows])
    _sync(device)
    wall = time.perf_counter() - t0
    steps = [s for r in results for s in r.steps]
    return wall, statistics.median(s.latency_s for s in steps), [r.steps for r in results]


def bench_case(
    model, renderer, device: str, rows, threshold: float, window: int, max_new: int, repeats: int
) -> dict:
    eager = EngineConfig(threshold=threshold, max_new_tokens=max_new, frame_window=window)
    compiled = dataclasses.replace(eager, compile=True)
    compile_s, _, _ = _run(model, renderer, device, compiled, rows)
    times: dict[str, list[float]] = {"eager": [], "compiled": []}
    for _ in range(repeats):
        _, step_e, ref = _run(model, renderer, device, eager, rows)
        _, step_c, got = _run(model, renderer, device, compiled, rows)
        times["eager"].append(step_e)
        times["compiled"].append(step_c)
    pairs = [(a, b) for x, y in zip(ref, got) for a, b in zip(x, y)]
    eager_ms = 1e3 * statistics.median(times["eager"])
    compiled_ms = 1e3 * statistics.median(times["compiled"])
    return {
        "rows": len(rows),
        "fires": sum(a.fired for a, _ in pairs),
        "compile_s": round(compile_s, 1),
        "eager_step_ms": round(eager_ms, 3),
        "compiled_step_ms": round(compiled_ms, 3),
        "eager_vs_compiled": round(eager_ms / compiled_ms, 2),
        "same_decisions": all(a.fired == b.fired and a.text == b.text for a, b in pairs),
        "max_decision_logit_diff": max(
            abs(u - v) for a, b in pairs for u, v in zip(a.decision_logits, b.decision_logits)
        ),
    }


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m perf compile", description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="conf/model/tiny.yaml", help="a conf/model/*.yaml file")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--size", type=int, default=None, help=SIZE_HELP)
    ap.add_argument(
        "--layers", type=int, default=None, help="the language model's depth (default: the model's)"
    )
    ap.add_argument("--steps", type=int, default=24, help="steps of each stream")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--window", type=int, default=8, help="frame window")
    ap.add_argument("--max-new-tokens", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    args.size = args.size or model_side(args.model)
    model, renderer, out = build_model(args.model, args.device, args.size, args.layers)
    out["layers"] = model.config.text_config.num_hidden_layers
    streams = [toy_stream(i, args.steps, args.size) for i in range(args.batch)]
    out["cases"] = {}
    before = compiled_graphs()
    with torch.no_grad():
        for case, threshold in CASES.items():
            for rows in (streams[:1], streams):
                name = f"{case}_batch{len(rows)}"
                out["cases"][name] = bench_case(
                    model,
                    renderer,
                    args.device,
                    rows,
                    threshold,
                    args.window,
                    args.max_new_tokens,
                    args.repeats,
                )
                print(name, json.dumps(out["cases"][name]), flush=True)
    out["graphs"] = compiled_graphs() - before
    print(json.dumps(out))
    return out
