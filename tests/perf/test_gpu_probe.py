"""``make gpu-probe``: on the tiny model, every key of the four parts on one JSON line, with numbers:
eager and static steps that agree, frame prep that matches the processor, and the split SFT step."""

from __future__ import annotations

import json
import math
import os
import subprocess
import time
from pathlib import Path

import pytest

from perf import gpu_probe
from perf.gpu import build_model, model_side
from perf.probe_steps import engine_steps, static_capacity

ROOT = Path(__file__).resolve().parents[2]


def _shell_env() -> dict:
    """A user's shell: no make variables from a make above (they would make this one a sub-make)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return {k: v for k, v in env.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}


def _number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _check_step(figures: dict, batches: tuple[int, ...]) -> None:
    """Both variants timed, their syncs counted, their outputs within float32 rounding."""
    for batch in batches:
        case = figures[f"batch{batch}"]
        for variant in ("eager", "static"):
            assert _number(case[variant]["ms"]) and case[variant]["ms"] > 0, case
            assert type(case[variant]["syncs"]) is int and case[variant]["syncs"] >= 0, case
        assert _number(case["max_diff"]) and 0 <= case["max_diff"] <= 1e-4, case
        assert case["compared_calls"] > 0, case


def test_eager_and_static_steps_agree_and_are_timed_on_the_tiny_model():
    model, renderer, _ = build_model("conf/model/tiny.yaml", "cpu", model_side("conf/model/tiny.yaml"))
    settings = {"steps": 5, "warm": 2, "max_new_tokens": 2, "batch": 3, "size": 64, "compile": False}
    noted = {}
    out = engine_steps(model, renderer, "cpu", settings, lambda **kw: noted.update(kw))
    for kind in ("frame_step", "reply_step"):
        _check_step(out[kind], (1, 3))
        # every step fires: 5 frame calls a run, and 3 reply rounds per step (2 tokens, then the end)
        assert out[kind]["batch3"]["compared_calls"] == (5 if kind == "frame_step" else 15), out[kind]
    assert noted["frame_step"] == out["frame_step"]  # kept as it landed, for a part stopped by its cap
    assert out["static_step"] == "uncompiled"
    # a silent static step reads nothing back; the static reply token step neither
    assert out["reply_step"]["batch1"]["static"]["syncs"] == 0
    assert static_capacity(1000, 10) == 2304  # 1000 + 64 x 11 + 512 = 2216, in 256s


@pytest.mark.slow  # four processes, each importing torch and transformers: about a minute on 2 cores
def test_make_gpu_probe_on_cpu_gives_every_key_with_numbers():
    t0 = time.monotonic()
    done = subprocess.run(
        ["make", "gpu-probe", "DEVICE=cpu"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=_shell_env(),
        timeout=300,
    )
    wall = time.monotonic() - t0
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["device"] == "cpu" and out["torch"] and out["model"] == "conf/model/tiny.yaml"
    assert {p: r["status"] for p, r in out["parts"].items()} == dict.fromkeys(gpu_probe.PARTS, "ok")
    for keys in gpu_probe.KEYS.values():
        assert all(key in out for key in keys), (keys, out)
    _check_step(out["frame_step"], (1, 8))
    _check_step(out["reply_step"], (1, 8))
    for key in ("frame_prep_ms_per_frame", "sampling_ms"):
        assert all(_number(out[key][k]) and out[key][k] > 0 for k in ("host", "device")), out[key]
    assert out["frame_prep_max_diff"] == 0.0  # the processor's pixel values bit for bit
    assert out["grpo_rollout_s"] > 0
    setup = out["grpo_rollout_setup"]
    assert (setup["rollouts"], setup["steps"]) == (4, 20), setup  # experiment=p3i_4b_grpo's group
    split = [out[f"sft_{k}_s"] for k in ("forward", "backward", "optimizer")]
    assert all(_number(x) and x > 0 for x in split), split
    assert out["sft_step_s"] == pytest.approx(sum(split), abs=2e-4)
    assert all(_number(v) and v > 0 for v in out["peak_gib"].values()), out["peak_gib"]
    assert out["wall_s"] <= gpu_probe.SETTINGS["cpu"]["deadline"] and wall < 240, (out["wall_s"], wall)


def test_a_bad_part_or_cap_is_refused_in_one_line(capsys):
    for argv, said in (
        (["--parts", "engine_steps,nope"], "gpu-probe: unknown part(s) nope; choose from engine_steps,"),
        (["--cap", "sft_split=x"], "gpu-probe: --cap 'sft_split=x': want PART=SECONDS, PART one of"),
    ):
        with pytest.raises(SystemExit) as stop:
            gpu_probe.main(argv)
        assert stop.value.code == 2
        assert capsys.readouterr().err.startswith(said)
