"""Model assembly: the tiny checkpoint is an ordinary HF checkpoint; decision tokens; frozen vision."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import torch
from transformers import AutoModelForImageTextToText

from engine.model import freeze_vision_tower, vision_tower_parameters
from tests.conftest import tiny_model_config

ROOT = Path(__file__).resolve().parents[2]


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


def _card(capsys, *overrides: str) -> dict:
    from eval.model import main

    assert main(list(overrides)) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_python_m_eval_model_prints_the_model_it_builds(tmp_path, capsys):
    card = _card(
        capsys,
        "model=tiny",
        f"paths.cache_dir={tmp_path}",
        "model.architecture.text_config.num_hidden_layers=3",
    )
    saved = AutoModelForImageTextToText.from_pretrained(card["path"])
    assert Path(card["path"]).parent == tmp_path and (Path(card["path"]) / "model.safetensors").exists()
    assert card["parameters"] == sum(p.numel() for p in saved.parameters())
    assert card["vision_parameters"] == sum(p.numel() for p in saved.model.visual.parameters())
    assert card["trainable"] < card["parameters"]  # the vision tower is frozen, its merger is not
    assert card["text"] == {
        "layers": 3,
        "hidden_size": 64,
        "attention_heads": 4,
        "kv_heads": 2,
        "vocab_size": 514,
    }
    assert card["vision"] == {"layers": 2, "hidden_size": 32, "out_hidden_size": 64, "patch_size": 16}
    assert (card["dtype"], card["random_init"], card["tokenizer_size"]) == ("float32", False, 514)


def test_python_m_eval_model_sizes_the_4b_without_its_weights(capsys):
    card = _card(capsys, "model=qwen3_vl_4b", "model.random_init=true", "model.init_device=meta")
    assert (card["parameters"], card["trainable"]) == (4_437_815_808, 4_131_573_248)  # docs: 4.44B, 4.13B
    assert (card["text"]["layers"], card["text"]["kv_heads"], card["vision"]["layers"]) == (36, 8, 24)
    assert (card["dtype"], card["path"], card["random_init"]) == ("bfloat16", None, True)


def test_processes_asking_for_one_tiny_checkpoint_at_once_build_it_once(tmp_path):
    """The points of a sweep build the same cache entry at the same moment: one builds, the others
    wait and load what it wrote (a second build rewriting config.json under a reader once made a
    sweep point fail with 'not a valid JSON file')."""
    out_dir, ready = tmp_path / "cache" / "tiny-x", tmp_path / "ready"
    ready.mkdir()
    code = f"""
import json, os, sys, time
from pathlib import Path
from tests.conftest import tiny_model_config
from engine.model import build_tiny_checkpoint
cfg = tiny_model_config()
ready = Path({str(ready)!r})
(ready / str(os.getpid())).touch()
deadline = time.time() + 240  # a sibling that died before this point: the test fails on its exit code
while len(list(ready.iterdir())) < 3 and time.time() < deadline:  # the three start together, imports done
    time.sleep(0.01)
path = build_tiny_checkpoint(cfg, {str(out_dir)!r})
mtime = (path / "model.safetensors").stat().st_mtime_ns
for _ in range(20):  # read while the others finish
    json.loads((path / "config.json").read_text())
    json.loads((path / "tokenizer_config.json").read_text())
print(mtime)
"""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(3)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [err[-1500:] for _, err in outs]
    assert len({out.split()[-1] for out, _ in outs}) == 1, "the weights were written more than once"
    assert len(list(ready.iterdir())) == 3
    assert sorted(p.name for p in out_dir.parent.iterdir()) == [
        ".tiny-x.lock",
        "tiny-x",
    ]  # no temp folder left


def test_a_reader_waits_for_the_fingerprint_not_for_config_json(tmp_path):
    """The race of a 2-rank ``eval.run`` on a fresh cache, made deterministic: a builder holds the lock
    and has put every file in place (``config.json`` and the weights) but the fingerprint; a second
    process asking for the checkpoint then waits, and gets it only once the fingerprint is written and
    the lock freed, without building it again."""
    import shutil
    import threading

    from engine.model import TINY_STAMP, _fingerprint, build_tiny_checkpoint
    from infra.files import waiting_lock, write_text_atomic

    cfg = tiny_model_config()
    built = build_tiny_checkpoint(cfg, tmp_path / "built")
    out = tmp_path / "cache" / "tiny-x"
    placed, finish = threading.Event(), threading.Event()

    def builder() -> None:  # the first rank, stopped between its last file and its fingerprint
        with waiting_lock(out.parent / f".{out.name}.lock"):
            out.mkdir(parents=True)
            for file in sorted(built.iterdir()):
                if file.name != TINY_STAMP:
                    shutil.copy(file, out / file.name)
            placed.set()
            finish.wait(30)
            write_text_atomic(out / TINY_STAMP, _fingerprint(cfg) + "\n")

    first = threading.Thread(target=builder)
    first.start()
    assert placed.wait(30)
    got: dict = {}
    second = threading.Thread(
        target=lambda: got.update(path=build_tiny_checkpoint(cfg, out), at=time.monotonic())
    )
    second.start()
    second.join(1.0)
    assert second.is_alive() and not got, "the second read a checkpoint whose fingerprint is not written"
    weights = (out / "model.safetensors").stat().st_mtime_ns
    released = time.monotonic()
    finish.set()
    first.join(30)
    second.join(60)
    assert got["path"] == out and got["at"] >= released
    assert (out / "model.safetensors").stat().st_mtime_ns == weights  # not built a second time
    json.loads((out / "config.json").read_text())


def test_a_tiny_checkpoint_of_another_config_is_replaced(tmp_path):
    from engine.model import TINY_STAMP, _fingerprint, build_tiny_checkpoint

    cfg = tiny_model_config()
    out = build_tiny_checkpoint(cfg, tmp_path / "ckpt")
    first = json.loads((out / "config.json").read_text())["text_config"]["num_hidden_layers"]
    cfg["architecture"]["text_config"]["num_hidden_layers"] = first + 1
    assert build_tiny_checkpoint(cfg, out) == out
    assert json.loads((out / "config.json").read_text())["text_config"]["num_hidden_layers"] == first + 1
    assert (out / TINY_STAMP).read_text().strip() == _fingerprint(cfg)
