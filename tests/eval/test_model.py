"""Model assembly: the tiny checkpoint is an ordinary HF checkpoint; decision tokens; frozen vision."""

from __future__ import annotations

import subprocess
import sys

import torch

from eval.model import freeze_vision_tower, vision_tower_parameters


def test_tiny_checkpoint_loads_offline_with_auto_classes(tiny_checkpoint):
    code = f"""
import os
assert os.environ["HF_HUB_OFFLINE"] == "1"
from transformers import AutoModelForImageTextToText, AutoProcessor
proc = AutoProcessor.from_pretrained({str(tiny_checkpoint)!r})
model = AutoModelForImageTextToText.from_pretrained({str(tiny_checkpoint)!r})
tok = proc.tokenizer
ids = tok.convert_tokens_to_ids(["</Silence>", "</Response>"])
assert tok.decode(ids) == "</Silence></Response>", tok.decode(ids)
assert max(ids) < model.get_input_embeddings().weight.shape[0]
print(type(model).__name__, type(proc).__name__, sum(p.numel() for p in model.parameters()))
"""
    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    name, proc_name, n_params = out.stdout.split()[-3:]
    assert (name, proc_name) == ("Qwen3VLForConditionalGeneration", "Qwen3VLProcessor")
    assert 100_000 < int(n_params) < 1_000_000


def test_decision_tokens_are_single_special_tokens(tiny_model_and_processor):
    _, processor = tiny_model_and_processor
    tok = processor.tokenizer
    for text in ("</Silence>", "</Response>"):
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert len(ids) == 1 and tok.convert_ids_to_tokens(ids[0]) == text
    assert (
        tok("a </Response> b", add_special_tokens=False)["input_ids"].count(
            tok.convert_tokens_to_ids("</Response>")
        )
        == 1
    )


def test_freeze_vision_keeps_merger_trainable(tiny_model_and_processor):
    model, _ = tiny_model_and_processor
    frozen = vision_tower_parameters(model)
    assert frozen and not any(p.requires_grad for p in frozen.values())
    merger = [p for n, p in model.model.visual.named_parameters() if n.startswith("merger")]
    assert merger and all(p.requires_grad for p in merger)
    assert all(p.requires_grad for p in model.model.language_model.parameters())
    freeze_vision_tower(model, train_merger=False)
    assert not any(p.requires_grad for p in model.model.visual.parameters())
    freeze_vision_tower(model)  # restore the default for other tests
    assert torch.is_grad_enabled()
