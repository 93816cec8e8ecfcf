"""``python -m train.export``: LoRA adapters merged, ZeRO shards consolidated, only the evaluations
of these weights on the card, and ``push_to_hub`` through huggingface_hub with the environment's
token (the upload functions replaced: no network)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

import train.export as export_module
from data_builders.config import RenderConfig
from data_builders.frames import stream_frames
from data_builders.record_io import load_streams, resolve_video
from engine.checkpoints import weights_fingerprint, write_render
from engine.render import TurnRenderer
from train.model_card import evaluations_of

ROOT = Path(__file__).resolve().parents[2]


class Payload:
    """Pickles as a call of ``exec`` that writes ``marker``: what a planted shard would run."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"open({str(self.marker)!r}, 'w').write('ran')",))


def run_export(monkeypatch, capsys, *args: str) -> tuple[int, dict | None, str]:
    monkeypatch.setattr(sys, "argv", ["train.export", *args])
    code = 0
    try:
        export_module.main()
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    lines = out.out.strip().splitlines()
    return code, json.loads(lines[-1]) if code == 0 else None, out.out + out.err


def rendered_inputs(processor, toy_dir: Path) -> dict:
    stream = load_streams(toy_dir / "records.jsonl")[0]
    renderer = TurnRenderer(processor, RenderConfig(max_pixels=4096))
    frames = stream_frames(stream, resolve_video(stream, toy_dir / "records.jsonl"), renderer.cfg)[:3]
    return renderer.render(stream, frames, window=(0, 3)).as_model_inputs()


def test_a_lora_checkpoint_is_merged_into_its_base(tiny_checkpoint, toy_dir, tmp_path, monkeypatch, capsys):
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from train.sft.run import apply_lora

    processor = AutoProcessor.from_pretrained(tiny_checkpoint)
    base = AutoModelForImageTextToText.from_pretrained(tiny_checkpoint)
    settings = type("Lora", (), {"r": 4, "alpha": 8, "dropout": 0.0, "train_merger": True})
    settings.target_modules = ["q_proj", "v_proj"]
    decision = processor.tokenizer.convert_tokens_to_ids(["</Silence>", "</Response>"])
    peft_model = apply_lora(base, settings, decision)
    torch.manual_seed(0)
    with torch.no_grad():  # a trained adapter: B is not zero, the merger and decision rows moved
        for p in peft_model.parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p) * 0.05)
    ckpt = tmp_path / "run" / "checkpoint-1"
    peft_model.save_pretrained(ckpt)
    processor.save_pretrained(ckpt)
    write_render(ckpt, RenderConfig(max_pixels=4096))
    inputs = rendered_inputs(processor, toy_dir)
    with torch.no_grad():
        want = peft_model.eval()(**inputs).logits

    code, summary, output = run_export(monkeypatch, capsys, f"checkpoint={ckpt}", f"out={tmp_path / 'out'}")
    assert code == 0, output
    assert not (tmp_path / "out" / "adapter_config.json").exists()
    assert not any("lora" in k for k in load_file(tmp_path / "out" / "model.safetensors"))
    merged = AutoModelForImageTextToText.from_pretrained(tmp_path / "out").eval()
    with torch.no_grad():
        got = merged(**inputs).logits
    assert (got - want).abs().max() < 1e-4
    base_logits = AutoModelForImageTextToText.from_pretrained(tiny_checkpoint).eval()(**inputs).logits
    assert (base_logits - want).abs().max() > 1e-2  # the adapter changed the model


def test_without_a_token_nothing_is_sent_and_with_one_the_folder_is_uploaded(
    tiny_checkpoint, tmp_path, monkeypatch, capsys
):
    from huggingface_hub import HfApi

    calls = []
    monkeypatch.setattr(
        HfApi, "create_repo", lambda self, repo_id, **kw: calls.append(("create", repo_id, kw))
    )
    monkeypatch.setattr(
        HfApi,
        "upload_folder",
        lambda self, **kw: calls.append(
            ("upload", self.token, sorted(p.name for p in Path(kw["folder_path"]).iterdir()), kw)
        ),
    )
    args = [
        f"checkpoint={tiny_checkpoint}",
        f"out={tmp_path / 'out'}",
        "push_to_hub=true",
        "repo_id=me/proactive",
    ]
    monkeypatch.delenv("HF_TOKEN", raising=False)
    code, _, output = run_export(monkeypatch, capsys, *args)
    assert code == 2 and "push_to_hub=true needs a token: set HF_TOKEN" in output and calls == []

    monkeypatch.setenv("HF_TOKEN", "hf_secret_value_123")
    code, summary, output = run_export(monkeypatch, capsys, *args)
    assert code == 0, output
    assert summary["url"] == "https://huggingface.co/me/proactive"
    (create, upload) = calls
    assert create[:2] == ("create", "me/proactive") and create[2]["private"] is True
    assert upload[1] == "hf_secret_value_123" and upload[3]["repo_id"] == "me/proactive"
    assert "model.safetensors" in upload[2] and "README.md" in upload[2]
    assert "hf_secret_value_123" not in output


def test_the_card_lists_only_the_evaluations_of_these_weights(tiny_checkpoint, tmp_path):
    sha = weights_fingerprint(tiny_checkpoint)["sha256"]
    for name, weights, value in [("ours", sha, 61.5), ("other", "0" * 64, 99.0)]:
        folder = tmp_path / "eval" / name / "p3i"
        folder.mkdir(parents=True)
        cfg = {
            "weights": weights,
            "benchmark": {"name": "p3i", "protocol_mode": "streaming"},
            "threshold": 0.4,
        }
        (folder / "config.yaml").write_text(yaml.safe_dump(cfg | {"records": "data/test.jsonl"}))
        (folder / "metrics.json").write_text(json.dumps({"prs_u": value, "per_task": {"a": {"prs_u": 1}}}))
    found = evaluations_of(sha, [tmp_path / "eval"])
    assert found == [
        {
            "benchmark": "p3i",
            "protocol_mode": "streaming",
            "records": "data/test.jsonl",
            "threshold": 0.4,
            "figures": {"prs_u": 61.5},
        }
    ]


def export_command(checkpoint: Path, out: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "train.export", f"checkpoint={checkpoint}", f"out={out}"]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_a_zero3_checkpoint_without_gathered_weights_is_consolidated_from_its_shards(
    deepspeed_checkpoint, tmp_path
):
    """One ZeRO-3 SFT step (``accelerate launch``, gloo on CPU: the session's run, a copy of it here);
    its gathered ``model.safetensors`` is set aside, so only the shards hold the weights: the export
    rebuilds the same tensors."""
    run = tmp_path / "run"
    shutil.copytree(deepspeed_checkpoint("sft", "zero3"), run)
    ckpt = run / "checkpoint-1"
    want = load_file(ckpt / "model.safetensors")
    (ckpt / "model.safetensors").rename(tmp_path / "gathered.safetensors")
    assert any(ckpt.glob("global_step1/*model_states.pt"))
    done = export_command(ckpt, tmp_path / "out")
    assert done.returncode == 0, done.stderr[-3000:]
    got = load_file(tmp_path / "out" / "model.safetensors")
    assert sorted(got) == sorted(want)
    assert all(torch.equal(got[k], want[k]) for k in want)

    (states,) = ckpt.glob("global_step1/*model_states.pt")  # a planted pickle is refused, not run
    state = torch.load(states, weights_only=False)  # the honest file this test's own run wrote
    marker = tmp_path / "marker"
    state["note"] = Payload(marker)
    torch.save(state, states)
    planted = export_command(ckpt, tmp_path / "out2")
    assert planted.returncode == 2 and not marker.exists() and not (tmp_path / "out2").exists()
    assert f"{states}: refused to load: it calls or builds builtins.exec" in planted.stderr


def test_base_model_is_the_hub_id_a_grpo_run_started_from_through_its_sft_run(tmp_path):
    from train.model_card import base_model, front_matter

    sft = tmp_path / "sft"
    (sft / "final").mkdir(parents=True)
    (sft / "run_info.json").write_text("{}")
    (sft / "config.yaml").write_text(yaml.safe_dump({"model": {"path": "Qwen/Qwen3-VL-4B-Instruct"}}))
    grpo = {
        "init": str(sft / "final"),
        "grpo": {},
        "model": {"path": None},
        "data": {"sources": {"nexar": {}}},
    }
    assert base_model(grpo) == "Qwen/Qwen3-VL-4B-Instruct"
    assert base_model({"model": {"path": str(tmp_path)}}) is None  # a local folder of no run
    meta = front_matter(grpo, [], "m")
    assert (meta["base_model"], meta["datasets"], meta["tags"][-1]) == (
        "Qwen/Qwen3-VL-4B-Instruct",
        ["nexar"],
        "grpo",
    )
    assert "model-index" not in meta  # no evaluation: no results claimed
