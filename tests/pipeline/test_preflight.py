"""The pre-flight each stage runs at start (``engine.preflight``), the one-line errors of the entry
points' front door (``infra.entry``) and the memory plan (``python -m pipeline.plan``)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.preflight import PreflightError, check_stage, plan
from eval.config import EvalConfig
from eval.preflight import EVAL
from eval.watch import WatchConfig, load_config
from infra.entry import did_you_mean
from infra.schema import compose
from train.grpo.config import GRPOConfig
from train.preflight import GRPO, SFT
from train.sft.config import SFTConfig

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}


def run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=ENV
    )


def test_a_split_the_data_set_lacks_is_refused_before_the_model_loads(tmp_path):
    t0 = time.time()
    proc = run("eval.run", "checkpoint=null", "data=mix_p3i", f"data.dir={tmp_path}", "split=test")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith("eval.run: split=test: data=mix_p3i has no split 'test' (it has train, val)")
    assert "Traceback" not in proc.stderr and proc.stdout.strip() == ""
    assert time.time() - t0 < 60
    assert not list(tmp_path.iterdir())  # nothing written


def test_checkpoint_selection_reads_val_by_default(tmp_path):
    cfg = load_config([f"run_dir={tmp_path}", "benchmark=p3i", "data=mix_p3i", "data.dir=/data/mix_p3i"])
    assert cfg.split == "val"
    check_stage(EVAL, cfg, on_disk=False)  # the README's watch line passes
    grpo = compose("grpo", ["grpo.eval_every=5"], GRPOConfig)
    assert grpo.grpo.eval_split == "val"


def test_a_built_mixture_without_the_split_is_named(tmp_path):
    (tmp_path / "train").mkdir()
    cfg = compose("sft", ["data=mix_p3i", f"data.dir={tmp_path}", "sft.eval_split=val"], SFTConfig)
    with pytest.raises(PreflightError, match=r"sft.eval_split=val: .* has no val/ \(it has train\)"):
        check_stage(SFT, cfg)


def test_grpo_refuses_a_missing_init_and_a_lacking_eval_split(tmp_path):
    (tmp_path / "train").mkdir()
    cfg = compose("grpo", [f"data.dir={tmp_path}", f"init={tmp_path}/sft/final"], GRPOConfig)
    with pytest.raises(PreflightError, match=r"init=.*sft/final does not exist"):
        check_stage(GRPO, cfg)
    check_stage(
        GRPO, compose("grpo", [f"data.dir={tmp_path}", "init=random"], GRPOConfig)
    )  # the model config
    cfg = compose("grpo", ["data=mix_p3i", "grpo.eval_every=5", "grpo.eval_split=test"], GRPOConfig)
    with pytest.raises(PreflightError, match=r"grpo.eval_split=test: data=mix_p3i has no split 'test'"):
        check_stage(GRPO, cfg, on_disk=False)


@pytest.mark.slow
@pytest.mark.parametrize(
    "args, line",
    [
        (["eval.run", "+splt=test"], "eval.run: unknown key splt (did you mean split?)"),
        (["eval.run", "splt=test"], "eval.run: unknown key splt (did you mean split?)"),
        (["train.sft", "data.dir=/nonexistent/mix"], "train.sft: data.dir=/nonexistent/mix does not exist"),
        (
            ["eval.watch", "run_dir=/nonexistent/run", "once=true"],
            "eval.watch: run_dir=/nonexistent/run does not exist",
        ),
    ],
)
def test_a_mistake_is_one_line_exit_2(args, line):
    proc = run(*args)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith(line)


def test_did_you_mean_comes_from_the_schema_keys():
    assert (
        did_you_mean("train.per_device_batchsize", SFTConfig) == " (did you mean sft.per_device_batch_size?)"
    )
    assert did_you_mean("grpo.windows_per_stp", GRPOConfig) == " (did you mean grpo.windows_per_step?)"
    assert did_you_mean("zzz", EvalConfig) == ""


@pytest.mark.slow
def test_watch_cfg_job_with_a_missing_run_dir_returns_at_once():
    t0 = time.time()
    proc = run("eval.watch", "run_dir=/nonexistent/run", "--cfg", "job")
    assert proc.returncode == 0, proc.stderr
    assert "run_dir: /nonexistent/run" in proc.stdout and "split: val" in proc.stdout
    assert time.time() - t0 < 60


SFT_4B = ["model=qwen3_vl_4b", "experiment=p3i_4b_sft"]


def test_the_4b_recipe_fits_80_gb_and_the_stage_defaults_do_not():
    recipe = plan(SFT, compose("sft", SFT_4B, SFTConfig), gpu_memory_gb=80, gpus=16, zero=2)
    assert recipe["fits"] is True
    assert recipe["parameters"] == {
        "value": 4437815808,
        "kind": "measured",
        "source": "the model config built on the meta device",
    }
    assert 10 < recipe["memory_gb"]["peak"]["value"] < 80
    defaults = SFT_4B + ["sft.per_device_batch_size=8", "sft.gradient_checkpointing=false"]
    big = plan(SFT, compose("sft", defaults, SFTConfig), gpu_memory_gb=80, gpus=16, zero=2)
    assert big["fits"] is False and big["biggest"] == "activations"
    assert big["memory_gb"]["activations"]["value"] > 80
    for term in recipe["memory_gb"].values():
        assert term["kind"] in ("measured", "estimated") and term["source"]


def test_the_time_of_a_data_set_with_no_counts_is_unknown_not_zero(tmp_path):
    """Toy data never built: no stats.json and no source counts. Steps set by epochs (no
    ``max_steps``), the time and the GPU-hours are null (kind ``unknown``), not 0; a built split's
    stats.json gives them."""
    overrides = ["experiment=toy_sft", f"data.dir={tmp_path}", "sft.max_steps=-1"]
    cfg = compose("sft", overrides, SFTConfig)
    out = plan(SFT, cfg, gpu_memory_gb=80, gpus=1)
    for key in ("records", "steps", "gpu_hours"):
        assert out[key]["value"] is None and out[key]["kind"] == "unknown", (key, out[key])
    (tmp_path / "train").mkdir()
    stats = {"records": 96, "clip_seconds": {"max": 20.0}, "steps_per_second": 1.0}
    (tmp_path / "train" / "stats.json").write_text(json.dumps(stats))
    out = plan(SFT, cfg, gpu_memory_gb=80, gpus=1)
    assert out["records"] == {
        "value": 96,
        "kind": "measured",
        "source": str(tmp_path / "train" / "stats.json"),
    }
    assert out["steps"]["value"] > 0 and out["gpu_hours"]["value"] > 0


def test_the_plan_reproduces_the_measured_h200_step():
    """The calibration points: one 30-frame window, one process, no ZeRO (the H200 steps of
    docs/performance.md): 74.5 GiB without checkpointing and logits at every position, 39.5 GiB with
    checkpointing and the loss at the labelled positions."""
    from engine.preflight import (
        GIB,
        H200_MODEL,
        activation_bytes_per_token,
        calibration,
        model_parameters,
        state_bytes,
    )

    cfg = compose("sft", SFT_4B, SFTConfig)
    p = model_parameters(cfg.model)
    assert {k: p[k] for k in H200_MODEL} == H200_MODEL  # the constant is the 4B config, built
    states = sum(state_bytes(p, zero=0, gpus=1).values())
    acts = activation_bytes_per_token(p, False, full_logits=True) * calibration(False) * 6701
    assert (states + acts) / GIB == pytest.approx(74.5, rel=1e-6)
    assert 0.5 < calibration(False) < 2.0  # the width formula is within 2x of the measurement
    acts = activation_bytes_per_token(p, True) * calibration(True) * 6701
    assert (states + acts) / GIB == pytest.approx(39.5, rel=1e-6)


def _plan_of(model: str, *args: str) -> dict:
    from pipeline.config import SCHEMAS
    from pipeline.plan import parse

    own, rest = parse(["stage=sft", "gpu_memory_gb=80", *args])
    cfg = compose("sft", [*SFT_4B, f"model={model}", "data.dir=/data/mix_p3i", *rest], SCHEMAS["sft"])
    return plan(SFT, cfg, gpu_memory_gb=own["gpu_memory_gb"], gpus=own["gpus"], zero=own["zero"])


def test_activations_memory_and_time_grow_with_the_model():
    """2B, 4B, 8B on one 80 GB GPU: activations per token, the peak and the time grow with the model
    (they shrank, 0.542 / 0.383 / 0.120 MB/token, and the time was 2.81 GPU-hours for all three);
    only the 4B's rate is measured, the others scaled from it by FLOPs per token."""
    plans = [_plan_of(f"qwen3_vl_{size}", "gpus=1") for size in ("2b", "4b", "8b")]
    per_token = [float(p["memory_gb"]["activations"]["source"].split(" MB/token")[0]) for p in plans]
    assert per_token == sorted(per_token) and len(set(per_token)) == 3, per_token
    assert per_token[1] == pytest.approx(1.305, abs=0.001)  # 39.5 GiB less the 4B's states, / 6,701 tokens
    for key in ("gpu_hours", "wall_hours"):
        hours = [p[key]["value"] for p in plans]
        assert hours == sorted(hours) and len(set(hours)) == 3, (key, hours)
    peaks = [p["memory_gb"]["peak"]["value"] for p in plans]
    assert peaks == sorted(peaks) and len(set(peaks)) == 3, peaks
    rates = [p["tokens_per_s_per_gpu"] for p in plans]
    assert rates[1]["value"] == 8401 and rates[1]["kind"] == "measured"
    for rate, p in zip(rates[::2], plans[::2], strict=True):
        assert rate["kind"] == "estimated"
        assert rate["source"].startswith(
            "scaled from the 4B's measured 8,401 tokens/s on one H200 by FLOPs per token"
        ), rate
        assert rate["value"] == pytest.approx(8401 * 4437815808 / p["parameters"]["value"], abs=1)


def test_one_80_gb_gpu_plans_the_measured_step_and_zero_shares_states_over_gpus():
    """On one GPU the default is one process without DeepSpeed, the measured step: its terms are
    39.5 GiB (within 1%; it planned 73.28 GB with zero=2). ``zero=2`` on one GPU keeps DeepSpeed's
    fp32 master weights and moments unshared; on 8 GPUs ZeRO-2 divides them and the gradients by 8."""
    from engine.preflight import GIB, RESERVE_GB

    one = _plan_of("qwen3_vl_4b", "gpus=1")
    assert one["zero"] == 0 and one["fits"] is True
    terms = one["memory_gb"]["peak"]["value"] - RESERVE_GB
    assert terms * 1e9 / GIB == pytest.approx(39.5, rel=0.01)
    t = one["trainable"]["value"]
    deepspeed = _plan_of("qwen3_vl_4b", "gpus=1", "zero=2")["memory_gb"]
    eight = _plan_of("qwen3_vl_4b", "gpus=8")
    assert eight["zero"] == 2
    assert deepspeed["optimizer"]["value"] == pytest.approx(12 * t / 1e9, abs=0.01)
    assert eight["memory_gb"]["optimizer"]["value"] == pytest.approx(12 * t / 8 / 1e9, abs=0.01)
    assert eight["memory_gb"]["gradients"]["value"] == pytest.approx(2 * t / 8 / 1e9, abs=0.01)
    assert eight["wall_hours"]["value"] == pytest.approx(eight["gpu_hours"]["value"] / 8 / 0.9, rel=0.01)
    assert one["wall_hours"]["value"] == one["gpu_hours"]["value"]


def test_a_plan_that_does_not_fit_says_what_to_change_and_the_change_fits():
    """The 8B on one 80 GB GPU: ``fits: false`` with the changes that lower the peak; the first, given
    to a fresh ``python -m pipeline.plan``, fits."""
    base = ["stage=sft", *SFT_4B, "model=qwen3_vl_8b", "data.dir=/data/mix_p3i", "gpu_memory_gb=80", "gpus=1"]
    proc = run("pipeline.plan", *base)
    assert proc.returncode == 1, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert out["fits"] is False and out["advice"][0]["fits"] is True, out.get("advice")
    first = out["advice"][0]
    assert first["try"] == "gpus=3 zero=3" and first["peak_gb"] <= 80
    args = [a for a in base if not a.startswith("gpus=")] + first["try"].split()
    proc = run("pipeline.plan", *args)
    assert proc.returncode == 0, proc.stderr[-2000:]
    applied = json.loads(proc.stdout)
    assert applied["fits"] is True and applied["memory_gb"]["peak"]["value"] == first["peak_gb"]


def test_the_plan_takes_nodes():
    """``nodes=2``: 2 x 8 GPUs (``gpus_per_node``); a ``gpus`` that disagrees is refused in one line."""
    from pipeline.plan import parse

    own, _ = parse(["stage=sft", "nodes=2"])
    assert own["gpus"] == 16 and own["zero"] == 2
    assert parse(["stage=sft", "nodes=2", "gpus_per_node=4", "gpus=8"])[0]["gpus"] == 8
    proc = run("pipeline.plan", "stage=sft", *SFT_4B, "nodes=2", "gpus=8")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == (
        "pipeline.plan: gpus=8 but nodes=2 x gpus_per_node=8 = 16: give one of them"
    )
    out = _plan_of("qwen3_vl_4b", "nodes=2")
    assert out["gpus"] == 16 and out["fits"] is True


@pytest.mark.slow
def test_train_plan_prints_one_json_line(capsys):
    """The command as run (a fresh process) for a plan that fits; one that does not returns 1 (the
    command's exit status, ``sys.exit(main())``; a fresh process exiting 1:
    test_a_plan_that_does_not_fit_says_what_to_change_and_the_change_fits)."""
    from pipeline.plan import main

    proc = run("pipeline.plan", "stage=sft", *SFT_4B, "gpu_memory_gb=80", "gpus=16")
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["fits"] is True and out["gpus"] == 16 and out["gpu_hours"]["value"] > 0
    big = ["sft.per_device_batch_size=8", "sft.gradient_checkpointing=false"]
    code = main(["stage=sft", *SFT_4B, "gpu_memory_gb=80", "gpus=16", *big])
    assert code == 1 and json.loads(capsys.readouterr().out.strip().splitlines()[-1])["fits"] is False


@pytest.mark.parametrize(
    "arg, line",
    [
        ("gpus=-1", "gpus=-1: must be at least 1"),
        ("gpus=0", "gpus=0: must be at least 1"),
        ("gpus=1.5", "gpus: bad pipeline.plan config: Value '1.5' of type 'str' could not be converted"),
        ("gpus=10000000000000000000000000", "gpus=10000000000000000000000000: must be at most 1000000"),
        ("zero=7", "zero=7: must be at most 3"),
        ("zero=-1", "zero=-1: must be at least 0"),
        ("gpu_memory_gb=inf", "gpu_memory_gb=inf: must be a finite number"),
        ("gpu_memory_gb=nan", "gpu_memory_gb=nan: must be a finite number"),
        ("gpu_memory_gb=-42", "gpu_memory_gb=-42.0: must be more than 0"),
    ],
)
def test_the_plan_refuses_a_hostile_gpu_count_zero_stage_or_memory(arg, line, capsys):
    """Each of these planned as fitting (``gpus=-1``: -12,700 steps), wrote ``NaN`` into the JSON or
    ended in a ZeroDivisionError: now one line naming the key, exit 2, nothing on stdout."""
    from pipeline.plan import main

    with pytest.raises(SystemExit) as done:
        main(["stage=eval", "model=qwen3_vl_4b", "records=/nonexistent", arg])
    out, err = capsys.readouterr()
    assert done.value.code == 2 and out == ""
    assert err.splitlines() == [err.strip()] and err.startswith("pipeline.plan: ") and line in err, err


def test_the_plan_of_a_zero_gpu_count_is_one_line_in_a_fresh_process():
    proc = run("pipeline.plan", "stage=eval", "model=qwen3_vl_4b", "records=/nonexistent", "gpus=0")
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr[-2000:]
    assert proc.stderr.strip() == "pipeline.plan: bad pipeline.plan config: gpus=0: must be at least 1"


def test_the_gpu_check_refuses_what_would_not_fit(monkeypatch):
    import engine.preflight as preflight

    monkeypatch.setattr(preflight, "_device_memory_gb", lambda: 80.0)
    monkeypatch.setenv("WORLD_SIZE", "16")
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "2")
    big = SFT_4B + ["sft.per_device_batch_size=8", "sft.gradient_checkpointing=false"]
    with pytest.raises(PreflightError, match=r"would not fit: .* > 80 GB \(activations: .*plan.check=false"):
        check_stage(SFT, compose("sft", big, SFTConfig), on_disk=False)
    assert check_stage(SFT, compose("sft", big + ["plan.check=false"], SFTConfig), on_disk=False) is None
    assert check_stage(SFT, compose("sft", SFT_4B, SFTConfig), on_disk=False)["fits"] is True
    assert WatchConfig.split == "val"


def test_the_front_door_refuses_in_process(capsys):
    """``front_door`` as the entry points call it: a mistyped key ends the command, exit 2, one line."""
    from infra.entry import front_door

    with pytest.raises(SystemExit) as stop:
        front_door("train.sft", "sft", SFTConfig, ["train.per_device_batchsize=2"])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "train.sft: unknown key train.per_device_batchsize (did you mean sft.per_device_batch_size?)"
    ]
    assert front_door("train.sft", "sft", SFTConfig, ["--cfg", "job", "data.dir=/nowhere"]) is None


@pytest.mark.slow
def test_the_model_card_command_runs_in_a_fresh_process():
    """README's ``python -m eval.model model=tiny``, as a user runs it (no schema preloaded)."""
    proc = run("eval.model", "model=tiny")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1])["name"] == "tiny"


def test_mix_names_every_missing_source(tmp_path):
    from data_builders.mixture import BuildFailed, MixtureConfig, build_mixture
    from infra.schema import typed

    cfg = compose("mix", ["data=mix_p3i", f"data.root={tmp_path}", f"data.dir={tmp_path}/mix"])
    mixture = typed(MixtureConfig, dict(cfg.data), "data")
    with pytest.raises(BuildFailed) as err:
        build_mixture(mixture)
    message = str(err.value)
    assert "4 of 4 sources have no records" in message
    for name in ("ego4d_events", "llava_video", "nexar", "shot2story"):
        assert f"{name} ({tmp_path}/{name})" in message
    assert not (tmp_path / "mix").exists()


@pytest.mark.slow
def test_demo_answers_cfg_job_and_a_mistyped_key():
    proc = run("pipeline.demo", "--cfg", "job")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "n_streams: 512" in proc.stdout
    proc = run("pipeline.demo", "demo.n_strams=3")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "pipeline.demo: unknown key demo.n_strams (did you mean demo.n_streams?)"
    ]


def test_a_run_of_epochs_is_finished_only_at_its_planned_steps(tmp_path):
    """``sft.max_steps=-1`` (epochs): a resumed run is finished at the Trainer's planned count, not
    at any step (every step is >= -1)."""
    from train.sft.run import _finished

    ckpt = tmp_path / "checkpoint-3"
    ckpt.mkdir()
    (ckpt / "trainer_state.json").write_text(json.dumps({"max_steps": 5, "global_step": 3}))
    (tmp_path / "final").mkdir()
    (tmp_path / "final" / "config.json").write_text("{}")
    (tmp_path / "final" / "COMPLETE").write_text("")
    assert _finished(tmp_path, str(ckpt), -1) is False
    (ckpt / "trainer_state.json").write_text(json.dumps({"max_steps": 3, "global_step": 3}))
    assert _finished(tmp_path, str(ckpt), -1) is True
    assert _finished(tmp_path, str(ckpt), 4) is False


def test_the_data_docs_list_every_task():
    from data_builders.records import TASKS

    text = (ROOT / "docs" / "data.md").read_text()
    paragraph = text[text.index("- `task` is one of") :].split("\n- ", 1)[0]
    assert sorted(t for t in TASKS if f"`{t}`" not in paragraph) == []


def test_every_eval_score_flag_is_documented(capsys):
    import re

    from eval.score import parse_args

    with pytest.raises(SystemExit):
        parse_args(["--help"])
    flags = set(re.findall(r"(--[a-z][a-z-]+)", capsys.readouterr().out)) - {"--help"}
    assert len(flags) > 15
    doc = (ROOT / "docs" / "evaluation.md").read_text()
    assert sorted(f for f in flags if f"`{f}`" not in doc) == []


@pytest.mark.parametrize("script", ["sft", "grpo", "eval", "frames"])
def test_a_job_submitted_outside_the_repository_stops_in_one_line(script, tmp_path):
    env = {
        **ENV,
        "SLURM_SUBMIT_DIR": str(tmp_path),
        "SLURM_ARRAY_TASK_ID": "0",
        "SLURM_ARRAY_TASK_COUNT": "1",
    }
    proc = subprocess.run(
        ["bash", str(ROOT / "slurm" / f"{script}.sh"), "data=toy"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"slurm/{script}.sh: no slurm/launch.sh under {tmp_path}: submit from the repository root"
    ]


def test_deepspeed_says_nothing_on_stdout_after_a_stage_quiets_the_libraries():
    """DeepSpeed, imported on a machine without CUDA, printed "Setting accelerator to CPU" on stdout
    (a GRPO or export command's output then did not end with its JSON line alone)."""
    code = "from infra.entry import quiet_libraries; quiet_libraries(); import deepspeed; deepspeed.get_accelerator()"
    env = {k: v for k, v in os.environ.items() if k != "DS_ACCELERATOR"}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-1000:]
    assert done.stdout == ""


def test_the_4b_grpo_recipe_takes_the_h200_update_and_a_longer_window_scales_it():
    """experiment=p3i_4b_grpo is the setting make gpu-check timed on one H200: 6 windows on 6 GPUs
    is one window per rank, 31.8 + 18.1 s an update; 40-step windows on 3 GPUs, twice the window
    and two windows per rank, four times that."""
    cfg = compose("grpo", ["experiment=p3i_4b_grpo", "init=random"], GRPOConfig)
    recipe = plan(GRPO, cfg, gpu_memory_gb=141, gpus=6, zero=2)
    assert recipe["steps_per_s"]["kind"] == "measured"
    assert recipe["steps_per_s"]["value"] == pytest.approx(1 / 49.9, abs=1e-5)
    assert recipe["gpu_hours"]["value"] == round(143 * 49.9 * 6 / 3600, 2)  # 11.89
    longer = compose("grpo", ["experiment=p3i_4b_grpo", "init=random", "grpo.window_steps=40"], GRPOConfig)
    slow = plan(GRPO, longer, gpu_memory_gb=141, gpus=3, zero=2)
    assert (
        slow["steps_per_s"]["kind"] == "estimated" and "x2 for this window" in slow["steps_per_s"]["source"]
    )
    assert slow["steps_per_s"]["value"] == pytest.approx(1 / (4 * 49.9), abs=1e-5)


def test_each_stage_s_checks_and_plan_live_with_the_stage():
    """``engine.preflight`` holds what the stages share and names none of them; SFT's and GRPO's
    checks and plan are ``train.preflight``'s, evaluation's ``eval.preflight``'s."""
    import engine.preflight as shared

    assert [s.name for s in (SFT, GRPO, EVAL)] == ["sft", "grpo", "eval"]
    owners = {f.__module__ for s in (SFT, GRPO) for f in (s.check, s.planner, s.changes)}
    assert owners == {"train.preflight"}
    assert {f.__module__ for f in (EVAL.check, EVAL.planner, EVAL.changes)} == {"eval.preflight"}
    source = Path(shared.__file__).read_text(encoding="utf-8")
    assert re.findall(r'cfg\.(?:sft|grpo|records|split)\b|"(?:sft|grpo|eval)"', source) == []
