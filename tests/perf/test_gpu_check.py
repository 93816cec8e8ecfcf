"""``make gpu-check``: every figure of the six parts, or the part's stated failure, on one JSON line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perf import gpu_check

ROOT = Path(__file__).resolve().parents[2]
KEYS = (
    "sft_step_s",
    "sft_mfu",
    "grpo_rollout_s",
    "grpo_update_s",
    "engine_steps_per_s",
    "batched_stream_steps_per_s",
    "compiled_vs_eager",
    "probe_branch_vs_rerun",
    "eval_streams_per_hour",
)
PARTS = ("sft", "grpo", "engine", "compiled", "probes", "eval")


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _shell_env() -> dict:
    """The environment of a user's shell: under ``make test`` the variables a make hands its children
    would make this make a sub-make, which prints "Entering/Leaving directory" after the JSON line."""
    return {k: v for k, v in _env().items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}


def _number_or_time_out(value) -> bool:
    """A figure, or a part stopped by its cap or the deadline (a shared machine's load); an error
    inside a part ("failed: ...") is not accepted."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int | float):
        return value > 0
    return isinstance(value, str) and value.startswith(("timeout: timeout after", "skipped: "))


@pytest.mark.slow
def test_make_gpu_check_on_cpu_gives_every_key(tmp_path):
    t0 = time.monotonic()
    done = subprocess.run(
        ["make", "gpu-check", "DEVICE=cpu", f"OUT={tmp_path}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=_shell_env(),
        timeout=300,
    )
    wall = time.monotonic() - t0
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["device"] == "cpu" and out["torch"]
    for key in KEYS:
        assert _number_or_time_out(out[key]), (key, out[key], out["parts"])
    assert set(out["peak_gib"]) == set(PARTS)
    assert all(_number_or_time_out(v) for v in out["peak_gib"].values()), out["peak_gib"]
    ran = [p for p in PARTS if out["parts"][p]["status"] == "ok"]
    if "grpo" in ran:  # every window's loss runs, though random weights give no window a signal
        assert out["parts"]["grpo"]["figures"]["grpo_update_s"] > 0.05, out["parts"]["grpo"]
    if "engine" in ran:  # a silent step is one forward that reads nothing back; a firing one decodes
        split = out["engine_step_split"]
        assert split["silent"]["model_calls"] == 1 and split["silent"]["syncing_ops"] == 0, split
        assert split["firing"]["model_calls"] > 1 and split["silent"]["wall_ms"] > 0, split
    assert len(ran) >= 3, out["parts"]  # on a loaded machine a part may run out of time, not most
    assert wall < 200, wall  # the deadline is 175 s of parts
    table = Path(out["table"]).read_text()
    assert all(f"| {key} |" in table for key in KEYS)
    assert json.loads(Path(out["table"]).with_suffix(".json").read_text())["sft_mfu"] == out["sft_mfu"]


def test_a_part_past_its_cap_is_killed_and_reported_while_the_next_runs():
    t0 = time.monotonic()
    late = gpu_check.spawn_part("sft", "cpu", cap=1.0, rerun_probes=2)
    assert time.monotonic() - t0 < 10
    assert late["status"] == "timeout" and late["seconds"] == 1.0 and late["partial"] == {}
    assert late["error"].startswith("timeout after 1 s; its last line: ")
    bad = gpu_check.spawn_part("sft", "nodevice", cap=60.0, rerun_probes=2)
    assert bad["status"] == "failed" and "invalid choice: 'nodevice'" in bad["error"]
    ok = {
        "status": "ok",
        "seconds": 3.0,
        "figures": {"grpo_rollout_s": 1.5, "grpo_update_s": 0.5, "peak_gib": 0.9},
    }
    summary = gpu_check.summarize("cpu", {"sft": late, "grpo": ok})
    stopped = f"timeout: {late['error']}"
    assert summary["sft_step_s"] == summary["sft_mfu"] == stopped
    assert summary["grpo_rollout_s"] == 1.5 and summary["peak_gib"] == {"sft": stopped, "grpo": 0.9}


def test_what_a_part_measured_before_its_cap_is_kept(tmp_path, monkeypatch):
    partial = tmp_path / "partial.json"
    monkeypatch.setenv(gpu_check.PARTIAL_ENV, str(partial))
    monkeypatch.setattr(gpu_check, "_noted", {})  # a part's process starts with nothing noted
    gpu_check.note(engine_steps_per_s=7.26)
    gpu_check.note(batched_stream_steps_per_s=40.59)
    kept = json.loads(partial.read_text())
    assert kept == {"engine_steps_per_s": 7.26, "batched_stream_steps_per_s": 40.59}
    late = {"status": "timeout", "error": "timeout after 80 s", "seconds": 80.0, "partial": kept}
    summary = gpu_check.summarize("cpu", {"engine": late})
    assert summary["engine_steps_per_s"] == 7.26 and summary["batched_stream_steps_per_s"] == 40.59
    assert summary["window_step_ms_late"] == summary["peak_gib"]["engine"] == "timeout: timeout after 80 s"
    assert "| engine | engine_steps_per_s | 7.26 | 80.0 |" in gpu_check.markdown(summary)


def test_untimed_reruns_are_read_off_a_line_or_a_quadratic_through_the_timed_ones():
    from engine.probes import Probe

    probes = [Probe(step, f"probe at {step}") for step in (9, 19, 29, 39)]
    line = {0: 1.0, 3: 4.0}  # 0.1 s a step
    assert gpu_check._reruns_read_off(probes, line) == pytest.approx(1.0 + 2.0 + 3.0 + 4.0)
    square = {0: 1.0, 1: 4.0, 3: 16.0}  # (steps / 10) ** 2
    assert gpu_check._reruns_read_off(probes, square) == pytest.approx(1.0 + 4.0 + 9.0 + 16.0)


def test_caps_are_set_per_part_and_a_bad_one_is_refused(tmp_path, capsys):
    assert gpu_check._caps(["engine=120", "probes=90.5"]) == {"engine": 120.0, "probes": 90.5}
    for bad in ("engine=-1", "engine=soon"):
        with pytest.raises(SystemExit) as stop:
            gpu_check._caps([bad])
        assert stop.value.code == 2 and f"--cap {bad!r}: want PART=SECONDS" in capsys.readouterr().err
    cmd = [
        sys.executable,
        "-m",
        "perf.gpu_check",
        "--device",
        "cpu",
        "--cap",
        "engin=120",
        "--out",
        str(tmp_path),
    ]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=_env())
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "gpu-check: --cap 'engin=120': want PART=SECONDS, PART one of sft, grpo, engine, compiled, probes, eval"
    ]


def test_missing_modules_are_named_on_one_line_before_anything_loads():
    code = (
        "import sys; from perf import gpu_check as g; "
        "g.NEEDED['no_such_module_xyz'] = ('no-such-dist', None); g.main(['--device', 'cpu'])"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=_env())
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "gpu-check: missing modules: no_such_module_xyz (make gpu-wheels, then carry .whl)"
    ]
