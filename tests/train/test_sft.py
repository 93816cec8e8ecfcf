"""SFT stage end to end on the tiny model and toy streams (CPU): pinned losses of the first steps,
HF checkpoints the engine loads, run directory, frozen vision tower, NaN guard, LoRA, the logger seam."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import TrainerCallback

from data_builders.mixture import build_toy_mixture
from engine.checkpoints import complete_checkpoints, saved_render
from infra.run_control import NonFiniteLoss
from train.run_dir import resolve_resume
from train.sft.run import build_trainer, compose_config, train
from train.sft.trainer import logger_report_to

#: Loss of steps 1 and 2 (focal gamma 2, static balanced weights, lr 1e-3, batch 4, seed 0) on the
#: 16-clip toy mixture; a change means the data, the renderer, the model or the loss changed.
PINNED_LOSSES = (6.57674, 5.75436)


@pytest.fixture(scope="module")
def toy_data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("sftdata")
    build_toy_mixture(root / "built", root / "toy", n=16, seed=0)
    return root


def sft_cfg(data: Path, out: Path, *overrides: str):
    return compose_config(
        [
            "experiment=toy_sft",
            f"paths.data_dir={data}",
            f"paths.cache_dir={data / 'cache'}",
            f"sft.output_dir={out}",
            "sft.per_device_batch_size=4",
            "sft.max_steps=2",
            "sft.logging_steps=1",
            "sft.save_steps=2",
            "sft.time_budget_s=null",
            "sft.num_threads=2",
            *overrides,
        ]
    )


def test_two_steps_pinned_losses_checkpoint_and_run_dir(toy_data, tmp_path):
    final = train(sft_cfg(toy_data, tmp_path / "run"))
    run = tmp_path / "run"
    assert (final / "COMPLETE").read_text() == "2\n"  # final/ marked whole, as its checkpoints are
    state = json.loads((run / "checkpoint-2" / "trainer_state.json").read_text())
    logs = [h for h in state["log_history"] if "loss" in h]
    assert [round(h["loss"], 5) for h in logs] == pytest.approx(PINNED_LOSSES, abs=2e-4)
    for key in (
        "loss_decision",
        "loss_text",
        "decision_accuracy",
        "recall_silence",
        "fire_rate",
        "tokens_per_s",
    ):
        assert key in logs[0], key
    assert logs[0]["learning_rate"] == pytest.approx(1e-3)
    ckpt = run / "checkpoint-2"
    for name in (
        "model.safetensors",
        "optimizer.pt",
        "scheduler.pt",
        "rng_state.pth",
        "tokenizer.json",
        "render.json",
        "COMPLETE",
    ):
        assert (ckpt / name).exists(), name
    # the frame budget it trained at travels with every checkpoint, for evaluation to read back
    toy = {
        "max_pixels": 4096,
        "video_backend": "decord",
        "history_budget_tokens": 2048,
        "frame_format": "raw",
    }
    assert saved_render(ckpt) == saved_render(final) == toy
    assert complete_checkpoints(run) == [ckpt] and resolve_resume("auto", run) == str(ckpt)
    info = json.loads((run / "run_info.json").read_text())
    assert info["packages"]["torch"] and info["packages"]["transformers"] and "commit" in info["git"]
    assert "learning_rate: 0.001" in (run / "config.yaml").read_text()
    # the final checkpoint is an ordinary HF directory the streaming engine runs
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from data_builders.config import RenderConfig
    from data_builders.frames import stream_frames
    from data_builders.record_io import load_streams
    from engine.render import TurnRenderer
    from engine.streaming import EngineConfig, StreamingEngine

    model = AutoModelForImageTextToText.from_pretrained(final)
    processor = AutoProcessor.from_pretrained(final)
    renderer = TurnRenderer(processor, RenderConfig(max_pixels=4096))
    records = toy_data / "toy" / "test" / "records.jsonl"
    stream = load_streams(records)[0]
    frames = stream_frames(stream, records.parent / stream.video, renderer.cfg)
    [result] = StreamingEngine(model.eval(), renderer, EngineConfig()).run([stream], [frames])
    assert len(result.steps) == 20


def test_frozen_vision_tower_gets_no_gradient_and_does_not_change(toy_data, tmp_path):
    from engine.model import vision_tower_parameters

    trainer, _ = build_trainer(sft_cfg(toy_data, tmp_path / "run", "sft.max_steps=1"))
    model = trainer.model
    batch = next(iter(trainer.get_train_dataloader()))
    trainer.compute_loss(model, batch).backward()
    tower = vision_tower_parameters(model)
    assert tower and all(p.grad is None and not p.requires_grad for p in tower.values())
    merger = {n: p for n, p in model.model.visual.named_parameters() if n.startswith("merger")}
    language = dict(model.model.language_model.named_parameters())
    assert all(p.grad is not None for p in merger.values())
    assert all(p.grad is not None for p in language.values())
    model.zero_grad(set_to_none=True)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer.train()
    after = dict(model.named_parameters())
    prefix = "model.visual."
    assert all(torch.equal(before[prefix + n], after[prefix + n]) for n in tower)
    assert all(not torch.equal(before[prefix + n], after[prefix + n]) for n in merger)
    changed = [n for n in language if not torch.equal(before["model.language_model." + n], language[n])]
    assert len(changed) == len(language)


def test_nonfinite_loss_is_skipped_then_stops(toy_data, tmp_path):
    trainer, _ = build_trainer(sft_cfg(toy_data, tmp_path / "run", "sft.max_steps=3", "sft.save_steps=100"))
    poisoned = {2}
    weights: dict[int, dict[str, torch.Tensor]] = {}

    def hook(module, args, output):
        step = trainer.state.global_step + 1
        return output * float("nan") if step in poisoned else output

    trainer.model.lm_head.register_forward_hook(hook)

    class Snapshot:
        def on_step_end(self, args, state, control, **kwargs):
            weights[state.global_step] = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}

    from transformers import TrainerCallback

    trainer.add_callback(type("SnapshotCallback", (TrainerCallback,), dict(vars(Snapshot)))())
    trainer.train()
    assert all(torch.equal(weights[1][n], weights[2][n]) for n in weights[1])  # step 2 skipped
    assert any(not torch.equal(weights[2][n], weights[3][n]) for n in weights[2])
    skipped = [h["nonfinite_skipped"] for h in trainer.state.log_history if "nonfinite_skipped" in h]
    assert skipped == [0, 1, 0]
    poisoned.update(range(1, 100))
    trainer.args.max_steps = 10
    trainer.run_control.max_nonfinite = 3
    with pytest.raises(NonFiniteLoss, match="3 non-finite losses in a row"):
        trainer.train()


def test_lora_trains_adapters_decision_rows_and_merger(toy_data, tmp_path):
    cfg = sft_cfg(toy_data, tmp_path / "run", "lora.enabled=true", "sft.max_steps=1", "lora.r=4")
    trainer, _ = build_trainer(cfg)
    trainable = [n for n, p in trainer.model.named_parameters() if p.requires_grad]
    assert any("lora_A" in n for n in trainable) and any("merger" in n for n in trainable)
    assert any("token_adapter" in n or "trainable_tokens" in n for n in trainable)
    assert not any("visual.blocks" in n for n in trainable)
    final = train(cfg)
    state = load_file(final / "model.safetensors")
    assert not any("lora" in k for k in state) and (final / "tokenizer.json").exists()


def test_the_trainer_hands_its_logger_the_loss_parts(toy_data, tmp_path, monkeypatch):
    """What SFT logs goes through its logger seam: ``logger=wandb`` becomes the Trainer's
    ``report_to=["wandb"]`` with W&B's settings in its env vars (``train.sft.trainer.logger_report_to``),
    and every back end of ``report_to`` is handed the Trainer's ``on_log`` rows, which carry the loss
    parts (W&B's back end logs each row as ``train/<key>``; tests/train/test_wandb_runs.py reads a
    real offline run back)."""
    for key in ("WANDB_MODE", "WANDB_DIR", "WANDB_PROJECT", "WANDB_RUN_GROUP"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")  # the logger group's mode: ${oc.env:WANDB_MODE,online}
    wandb_cfg = sft_cfg(toy_data, tmp_path / "wandb_run", "logger=wandb")
    assert logger_report_to(wandb_cfg) == ["wandb"]
    assert os.environ["WANDB_DIR"] == str(tmp_path / "wandb_run")
    assert os.environ["WANDB_PROJECT"] == "proactive-vlm" and os.environ["WANDB_MODE"] == "offline"
    assert logger_report_to(sft_cfg(toy_data, tmp_path / "run")) == []  # logger=none: no back end

    class Handed(TrainerCallback):
        rows: list[dict] = []

        def on_log(self, args, state, control, logs=None, **kwargs):
            self.rows.append(dict(logs))

    trainer, _ = build_trainer(sft_cfg(toy_data, tmp_path / "run"))
    trainer.add_callback(Handed)
    trainer.train()
    rows = [row for row in Handed.rows if "loss_decision" in row]
    assert len(rows) == 2  # logging_steps=1, max_steps=2
    for key in ("loss_text", "recall_response", "fire_rate", "tokens_per_s"):
        assert all(key in row for row in rows), key
    assert all(row["learning_rate"] > 0 for row in rows)
    assert [round(r["loss_decision"], 2) for r in rows] == pytest.approx([7.06, 5.69], abs=0.02)


def test_the_command_line_ends_with_one_json_line(tmp_path, monkeypatch, capsys):
    """``python -m train.sft`` prints its final checkpoint as one JSON object line, as every stage does."""
    import sys

    import train.sft.run as sft

    final = tmp_path / "run" / "final"
    (tmp_path / "data" / "toy" / "train").mkdir(parents=True)  # the pre-flight: data.dir is built
    monkeypatch.setattr(sft, "train_checked", lambda cfg: final)
    monkeypatch.setattr(
        sys, "argv", ["train.sft", f"paths.root_dir={tmp_path}", f"sft.output_dir={final.parent}"]
    )
    sft.main()
    assert json.loads(capsys.readouterr().out.splitlines()[-1]) == {"final_checkpoint": str(final)}


def test_a_second_run_on_a_held_folder_is_one_line_naming_it_and_its_holder(tmp_path, monkeypatch, capsys):
    """A second ``train.sft`` into a folder another run holds stops with one line naming the folder
    and the holder's pid and host, exit 2 (before: the lock's traceback), and leaves the folder as it was."""
    import platform
    import sys

    import train.sft.run as sft
    from infra.files import OutputLock

    out = tmp_path / "run"
    (tmp_path / "data" / "toy" / "train").mkdir(parents=True)  # the pre-flight: data.dir is built
    monkeypatch.setattr(sys, "argv", ["train.sft", f"paths.root_dir={tmp_path}", f"sft.output_dir={out}"])
    with OutputLock(out, "train.sft"):
        before = sorted(p.name for p in out.iterdir())
        with pytest.raises(SystemExit) as stopped:
            sft.main()
        assert sorted(p.name for p in out.iterdir()) == before
    err = capsys.readouterr().err
    assert stopped.value.code == 2
    [line] = [x for x in err.splitlines() if x.strip()]
    assert line.startswith(f"train.sft: {out} is in use by another run (")
    assert f'"pid": {os.getpid()}' in line and f'"host": "{platform.node()}"' in line
    assert "Traceback" not in err


def test_a_record_holding_a_control_token_stops_the_command_in_one_line(toy_data, tmp_path):
    """A split record whose instruction holds ``<|image_pad|>`` (written before the build refused it):
    ``python -m train.sft`` stops before training, exit 2, one line naming the file, the record, the
    field and the token (before: ``Image features and image tokens do not match``, a traceback, and
    the same record again on every resume)."""
    import shutil
    import subprocess
    import sys
    from dataclasses import replace

    from data_builders.record_io import load_streams, write_jsonl

    root = Path(__file__).resolve().parents[2]
    data = tmp_path / "data"
    shutil.copytree(toy_data, data, ignore=shutil.ignore_patterns("cache"))
    records = data / "toy" / "train" / "records.jsonl"
    streams = load_streams(records)
    streams[1] = replace(streams[1], instruction=streams[1].instruction + " <|image_pad|>")
    write_jsonl(records, streams)
    cmd = [sys.executable, "-m", "train.sft", "experiment=toy_sft", f"paths.data_dir={data}"]
    cmd += [f"paths.cache_dir={tmp_path / 'cache'}", f"sft.output_dir={tmp_path / 'run'}", "sft.max_steps=1"]
    cmd += ["sft.per_device_batch_size=4", "sft.time_budget_s=null", "sft.num_threads=2"]
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"train.sft: file {records}, record {streams[1].id}, field 'instruction': holds '<|image_pad|>', "
        "a control token of the model's turn format (chat, vision or decision marker); write it another way"
    )
    assert not list((tmp_path / "run").glob("checkpoint-*"))
