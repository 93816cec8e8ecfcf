"""A checkpoint's files are checked before anything runs: weights that do not fit the config, a
damaged file or an interpolation in ``render.json`` stop the evaluation with a message naming the file
(or folder) and the reason, before a single record is streamed."""

from __future__ import annotations

import ast
import functools
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from eval.run import evaluate, load_config

ROOT = Path(__file__).resolve().parents[2]
TOY_RENDER = {"max_pixels": 4096, "video_backend": "decord", "history_budget_tokens": 2048}


def copy_checkpoint(tiny_checkpoint: Path, dest: Path, render: dict | None = TOY_RENDER) -> Path:
    """The tiny checkpoint as a trained one looks: weights, processor and ``render.json``."""
    shutil.copytree(tiny_checkpoint, dest)
    if render is not None:
        (dest / "render.json").write_text(json.dumps(render))
    return dest


def edit_config(ckpt: Path, **text_config) -> None:
    config = json.loads((ckpt / "config.json").read_text())
    config["text_config"].update(text_config)
    (ckpt / "config.json").write_text(json.dumps(config))


def eval_overrides(ckpt: Path, toy_dir: Path, tmp: Path, *extra: str) -> list[str]:
    return [
        f"checkpoint={ckpt}",
        f"records={toy_dir / 'records.jsonl'}",
        f"paths.cache_dir={tmp / 'cache'}",
        f"out_dir={tmp / 'out'}",
        "max_new_tokens=4",
        "limit=2",
        *extra,
    ]


@pytest.mark.parametrize("damage", ["missing", "mismatched", "unexpected"])
def test_weights_that_do_not_fit_the_config_are_refused(
    damage, tiny_checkpoint, toy_dir, tmp_path, drop_tensors
):
    """11 tensors removed, a config with a wider MLP (other shapes) or one layer fewer (keys left
    over): the load fails naming the folder and the first keys, instead of filling weights at random."""
    ckpt = copy_checkpoint(tiny_checkpoint, tmp_path / "ckpt")
    if damage == "missing":
        first = drop_tensors(ckpt)[0]
        expect = rf"11 missing \({re.escape(first)},"
    elif damage == "mismatched":
        edit_config(ckpt, intermediate_size=256)
        expect = r"6 mismatched \(model\.language_model\.layers\.0\.mlp\.down_proj\.weight: checkpoint \(64, 128\) vs model \(64, 256\),"
    else:
        edit_config(ckpt, num_hidden_layers=1)
        expect = r"\d+ unexpected \(model\.language_model\.layers\.1\."
    with pytest.raises(
        ValueError, match=re.escape(str(ckpt)) + r": its weights do not fit its config\.json: " + expect
    ):
        evaluate(load_config(eval_overrides(ckpt, toy_dir, tmp_path)), echo=False)
    assert not (tmp_path / "out" / "predictions.jsonl").exists()


def test_an_interpolation_in_render_json_is_refused_and_never_resolved(
    tiny_checkpoint, toy_dir, tmp_path, monkeypatch, caplog, capsys
):
    """``render.json`` is data: ``${oc.env:...}`` in it is refused, naming the file and the key, and
    the variable's value reaches no file written and no log line."""
    secret = "hunter2-do-not-leak-7731"
    monkeypatch.setenv("CKPT_TEST_SECRET", secret)
    ckpt = copy_checkpoint(
        tiny_checkpoint, tmp_path / "ckpt", TOY_RENDER | {"video_backend": "${oc.env:CKPT_TEST_SECRET}"}
    )
    render_json = re.escape(str(ckpt / "render.json"))
    with pytest.raises(ValueError, match=render_json + r": video_backend is an interpolation"):
        evaluate(load_config(eval_overrides(ckpt, toy_dir, tmp_path, "logger=wandb")), echo=False)
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert [p for p in written if secret.encode() in p.read_bytes()] == []
    assert not (tmp_path / "out").exists()
    out, err = capsys.readouterr()
    assert secret not in caplog.text + out + err


def _damage(ckpt: Path, name: str) -> Path:
    """Damage one file of ``ckpt`` the way a killed copy or a bad edit does; returns its path."""
    if name == "render.json":
        (ckpt / name).write_text('{"max_pixels": 4096, "video_backend": "dec')
    elif name == "config.json":
        (ckpt / name).write_text('{"model_type": "qwen3_vl", ')
    elif name == "trainer_state.json":
        (ckpt / name).write_text('{"global_step": 12, "log_history": [')
    elif name == "model.safetensors (truncated)":
        name = "model.safetensors"
        data = (ckpt / name).read_bytes()
        (ckpt / name).write_bytes(data[: len(data) // 2])
    elif name == "model.safetensors (garbage)":
        name = "model.safetensors"
        (ckpt / name).write_bytes(b"this is not a safetensors file at all")
    return ckpt / name


DAMAGED = {
    "render.json": r"not valid JSON",
    "config.json": r"not valid JSON",
    "trainer_state.json": r"not valid JSON",
    "model.safetensors (truncated)": r"truncated: its header describes \d+ bytes, the file holds \d+",
    "model.safetensors (garbage)": r"header length \d+ runs past the end of the file",
}


@pytest.mark.parametrize("damaged", list(DAMAGED))
def test_a_damaged_checkpoint_file_stops_the_evaluation_before_streaming(
    damaged, tiny_checkpoint, toy_dir, tmp_path
):
    ckpt = copy_checkpoint(tiny_checkpoint, tmp_path / "ckpt")
    (ckpt / "trainer_state.json").write_text(json.dumps({"global_step": 12}))
    path = _damage(ckpt, damaged)
    with pytest.raises(ValueError, match=re.escape(str(path)) + ": " + DAMAGED[damaged]):
        evaluate(load_config(eval_overrides(ckpt, toy_dir, tmp_path)), echo=False)
    assert not (tmp_path / "out" / "predictions.jsonl").exists()  # nothing streamed


@pytest.mark.slow  # a python -m eval.run process (31 s loaded)
def test_the_command_line_names_the_damaged_file_without_a_traceback(tiny_checkpoint, toy_dir, tmp_path):
    ckpt = copy_checkpoint(tiny_checkpoint, tmp_path / "ckpt")
    path = _damage(ckpt, "render.json")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "eval.run", *eval_overrides(ckpt, toy_dir, tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert f"eval.run: {path}: not valid JSON" in done.stderr


@pytest.mark.parametrize(("prog", "key"), [("eval.watch", "run_dir"), ("train.grpo", "init")])
def test_each_command_reads_the_render_of_the_checkpoint_it_names(
    prog, key, tiny_checkpoint, tmp_path, monkeypatch, capsys
):
    """What eval.run, eval.watch and train.grpo do first: the checkpoint's render block added to the
    command line (``infra.entry.rewrite_argv`` over ``engine.checkpoints.render_overrides``), and a
    damaged one a one-line exit 2 naming the command and the file."""
    from engine.checkpoints import CheckpointError, render_overrides
    from infra.entry import rewrite_argv

    rewrite = functools.partial(render_overrides, key=key)
    ckpt = copy_checkpoint(tiny_checkpoint, tmp_path / "ckpt", render={"max_pixels": 8192})
    monkeypatch.setattr(sys, "argv", [prog, f"{key}={ckpt}", "limit=2"])
    rewrite_argv(prog, rewrite, CheckpointError)
    added = sys.argv[2:-1]
    assert sys.argv[1] == f"{key}={ckpt}" and sys.argv[-1] == "limit=2"
    assert "render.max_pixels=8192" in added and all(a.startswith("render.") for a in added), added

    path = _damage(ckpt, "render.json")
    monkeypatch.setattr(sys, "argv", [prog, f"{key}={ckpt}"])
    with pytest.raises(CheckpointError, match="not valid JSON"):  # the library raises
        rewrite(sys.argv[1:])
    with pytest.raises(SystemExit) as stop:  # the entry point ends the command
        rewrite_argv(prog, rewrite, CheckpointError)
    assert stop.value.code == 2
    assert capsys.readouterr().err.startswith(f"{prog}: {path}: not valid JSON")


def test_the_model_library_neither_ends_the_process_nor_rewrites_its_arguments():
    """``engine/`` returns values and raises; the entry points read ``sys.argv`` and exit."""
    found = []
    for path in sorted((ROOT / "engine").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            name = ast.unparse(node.func) if isinstance(node, ast.Call) else None
            if name in ("sys.exit", "exit", "quit", "os._exit") or (
                isinstance(node, ast.Attribute) and ast.unparse(node) == "sys.argv"
            ):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert found == []
