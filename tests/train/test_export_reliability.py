"""``python -m train.export`` writes only where it may and never loses what it did not write: ``out``
is refused when it is, holds or lies in the checkpoint or a run dir, or holds anything but an earlier
export (and that only with ``replace=true``); the new export is swapped in whole (a kill at any
moment leaves the old or the new one at ``out``); a full disk or a read-only folder is one line and
leaves ``out`` as it was; what names code to fetch (``auto_map``) is not exported; the model card
publishes no local path and no text of the run can close its code block or bring HTML in."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import re
import shutil
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml
from safetensors.torch import load_file

from tests.train.test_export import Payload, run_export
from train.export_folder import MARKER
from train.model_card import LOCAL_PATH, model_card

ROOT = Path(__file__).resolve().parents[2]


def snapshot(folder: Path) -> dict[str, str]:
    """Every file and folder under ``folder`` (hidden ones too): its sha256, or ``dir``."""
    return {
        p.relative_to(folder).as_posix(): "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
    }


def card_heading(out: Path) -> str:
    """The export at ``out`` is whole (every file of its marker there, the weights load) and is
    the only thing there; returns its card's heading (which export it is)."""
    marker = json.loads((out / MARKER).read_text())
    assert marker["written_by"] == "train.export"
    assert sorted(p.name for p in out.iterdir() if p.name != MARKER) == marker["files"]
    assert load_file(out / "model.safetensors")
    return next(line for line in (out / "README.md").read_text().splitlines() if line.startswith("# "))


def hidden_beside(out: Path) -> list[str]:
    return sorted(p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}."))


@pytest.fixture
def run_dir(tiny_checkpoint, tmp_path) -> Path:
    """A finished training run: its config, run info, log, lock, ``final/`` and a checkpoint."""
    run = tmp_path / "runs" / "x"
    shutil.copytree(tiny_checkpoint, run / "final")
    shutil.copytree(tiny_checkpoint, run / "checkpoint-2")
    (run / "config.yaml").write_text(yaml.safe_dump({"run_name": "x", "sft": {"max_steps": 2}}))
    (run / "run_info.json").write_text("{}")
    (run / "logs").mkdir()
    (run / "logs" / "train.log").write_text("step 2\n")
    (run / ".lock").write_text("")
    return run


def test_an_out_that_is_holds_or_lies_in_the_checkpoint_or_a_run_dir_is_refused(
    run_dir, tmp_path, monkeypatch, capsys
):
    """``out=`` the run dir itself (the probe: the whole run was deleted, exit 0), a folder in it,
    the checkpoint, a folder holding the run, a folder in another run dir: exit 2, one line naming
    it, nothing of the run touched, with ``replace=true`` too."""
    other = tmp_path / "runs" / "y"
    other.mkdir()
    (other / "config.yaml").write_text("run_name: y\n")
    (other / "run_info.json").write_text("{}")
    before = snapshot(tmp_path)
    outs = [run_dir, run_dir / "export", run_dir / "final", tmp_path / "runs", other / "export"]
    for out in outs:
        for extra in ([], ["replace=true"]):
            code, _, output = run_export(
                monkeypatch, capsys, f"checkpoint={run_dir / 'final'}", f"out={out}", *extra
            )
            assert code == 2, output
            (line,) = [x for x in output.splitlines() if x.startswith("train.export:")]
            assert f"out={out} is" in line and "export to a folder outside it" in line, line
            assert "Traceback" not in output
            assert snapshot(tmp_path) == before


def test_a_folder_that_is_not_an_earlier_export_is_never_replaced(
    tiny_checkpoint, tmp_path, monkeypatch, capsys
):
    """A work tree's ``docs/`` (the probe: wiped, exit 0) is refused, with ``replace=true`` too; an
    earlier export is refused without ``replace=true`` and replaced with it, unless a file was
    added to it, which is named; an empty folder is written into."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "guide.md").write_text("# guide\n")
    (docs / "img").mkdir()
    (docs / "img" / "a.png").write_bytes(b"png")
    before = snapshot(docs)
    code, _, output = run_export(monkeypatch, capsys, f"checkpoint={tiny_checkpoint}", f"out={docs}")
    assert code == 2 and snapshot(docs) == before, output
    assert (
        f"out={docs} is not empty (guide.md, img); export to a new or empty folder, or pass replace=true"
        in output
    )
    code, _, output = run_export(
        monkeypatch, capsys, f"checkpoint={tiny_checkpoint}", f"out={docs}", "replace=true"
    )
    assert code == 2 and snapshot(docs) == before, output
    assert (
        f"out={docs} is not an export of train.export (no valid {MARKER}; it holds guide.md, img)" in output
    )

    out = tmp_path / "empty"
    out.mkdir()
    code, summary, output = run_export(monkeypatch, capsys, f"checkpoint={tiny_checkpoint}", f"out={out}")
    assert code == 0 and card_heading(out) == "# empty", output
    code, _, output = run_export(
        monkeypatch, capsys, f"checkpoint={tiny_checkpoint}", f"out={out}", "repo_id=me/new"
    )
    assert (
        code == 2
        and "pass replace=true to replace an earlier export" in output
        and card_heading(out) == "# empty"
    )
    (out / "notes.txt").write_text("mine\n")
    before = snapshot(out)
    code, _, output = run_export(
        monkeypatch, capsys, f"checkpoint={tiny_checkpoint}", f"out={out}", "repo_id=me/new", "replace=true"
    )
    assert code == 2 and f"out={out} holds files its export did not write (notes.txt)" in output
    assert snapshot(out) == before
    (out / "notes.txt").unlink()
    code, _, output = run_export(
        monkeypatch, capsys, f"checkpoint={tiny_checkpoint}", f"out={out}", "repo_id=me/new", "replace=true"
    )
    assert code == 0 and card_heading(out) == "# me/new", output
    assert hidden_beside(out) == []


#: ``python -c`` of an export that is killed (SIGKILL) at one moment of its swap: ``argv[1]`` names
#: it, the rest are the command's arguments.
KILLED = textwrap.dedent(
    """
    import os, signal, sys
    import train.export as export
    import train.export_folder as folder

    moment, sys.argv = sys.argv[1], ["train.export", *sys.argv[2:]]
    exchange, rename = folder._exchange, os.rename
    kill = lambda: os.kill(os.getpid(), signal.SIGKILL)

    def exchanged(a, b):
        if moment == "before the exchange":
            kill()
        if moment == "after the exchange":
            exchange(a, b)
            kill()
        return False  # "between the renames": a file system without the exchange

    def renamed(src, dst):
        rename(src, dst)
        if moment == "between the renames" and ".old-" in os.fspath(dst):
            kill()

    folder._exchange, os.rename = exchanged, renamed
    export.main()
    """
)


@pytest.mark.slow  # three export processes, at once
@pytest.mark.parametrize(
    ("moment", "at_out"),
    [("before the exchange", "# old"), ("after the exchange", "# me/new"), ("between the renames", None)],
)
def test_an_export_killed_while_swapping_leaves_an_export_whole_and_a_rerun_cleans_only_its_own(
    moment, at_out, tiny_checkpoint, tmp_path, monkeypatch, capsys
):
    """Killed just before or after the atomic exchange, ``out`` holds the old or the new export,
    whole. Where the file system has no exchange and the kill falls between the two renames, the
    old export is whole aside and the rerun moves it back. The rerun removes the staging and
    set-aside folders of the killed export and nothing else beside ``out``."""
    out = tmp_path / "old"
    code, _, output = run_export(monkeypatch, capsys, f"checkpoint={tiny_checkpoint}", f"out={out}")
    assert code == 0, output
    old = snapshot(out)
    (tmp_path / ".old.export-mine").mkdir()  # a user's folder named as ours, not marked: never touched
    (tmp_path / ".old.export-mine" / "notes.txt").write_text("mine\n")
    (tmp_path / "notes.txt").write_text("mine\n")
    args = [f"checkpoint={tiny_checkpoint}", f"out={out}", "repo_id=me/new", "replace=true"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    killed = subprocess.run(
        [sys.executable, "-c", KILLED, moment, *args], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert killed.returncode == -9, killed.stderr[-3000:]
    if at_out is None:
        assert not out.exists()
        (aside,) = tmp_path.glob(".old.old-*")
        assert snapshot(aside) == old
    else:
        assert card_heading(out) == at_out
        assert at_out != "# old" or snapshot(out) == old
    assert set(hidden_beside(out)) - {".old.export-mine"}, "the killed export left nothing to clean"

    code, _, output = run_export(monkeypatch, capsys, *args)
    assert code == 0, output
    assert card_heading(out) == "# me/new"
    assert hidden_beside(out) == [".old.export-mine"]
    assert (tmp_path / "notes.txt").read_text() == (tmp_path / ".old.export-mine" / "notes.txt").read_text()
    if at_out is None:
        assert f"train.export: moved {aside} back to {out}" in output
    assert re.search(rf"train.export: removed {re.escape(str(tmp_path))}/\.old\.(export|old)-", output), (
        output
    )


def test_auto_map_of_a_checkpoint_is_not_exported(tiny_checkpoint, tmp_path, monkeypatch, capsys):
    """A checkpoint with ``auto_map`` planted in its config and tokenizer config (a hub user with
    ``trust_remote_code=True`` would fetch and run the code it names), a ``.py`` file and a pickle:
    the export holds no ``auto_map``, says so, and copies neither file; the pickle is never run."""
    from transformers import AutoConfig, AutoTokenizer

    ckpt = tmp_path / "ckpt"
    shutil.copytree(tiny_checkpoint, ckpt)
    for name, auto_map in [
        ("config.json", {"AutoConfig": "evil.EvilConfig", "AutoModelForImageTextToText": "evil.EvilModel"}),
        ("tokenizer_config.json", {"AutoTokenizer": ["evil.EvilTokenizer", None]}),
    ]:
        config = json.loads((ckpt / name).read_text())
        (ckpt / name).write_text(json.dumps(config | {"auto_map": auto_map}))
    (ckpt / "evil.py").write_text("open('ran', 'w').write('ran')\n")
    marker = tmp_path / "marker"
    (ckpt / "evil.pkl").write_bytes(pickle.dumps(Payload(marker)))
    out = tmp_path / "out"
    code, _, output = run_export(monkeypatch, capsys, f"checkpoint={ckpt}", f"out={out}")
    assert code == 0, output
    assert (
        "train.export: removed auto_map from config.json; auto_map from tokenizer_config.json: the export "
        "names no code to fetch (trust_remote_code)" in output
    )
    for path in out.glob("*.json"):
        assert "auto_map" not in json.loads(path.read_text()), path.name
    assert not list(out.glob("*.py")) and not list(out.glob("*.pkl")) and not marker.exists()
    assert (
        AutoConfig.from_pretrained(out).model_type
        == json.loads((ckpt / "config.json").read_text())["model_type"]
    )
    assert AutoTokenizer.from_pretrained(out).convert_tokens_to_ids("</Silence>") is not None


def outside_code(markdown: str) -> tuple[list[str], list[str]]:
    """(lines outside fenced code blocks, the blocks' contents) as CommonMark reads them: a block
    opens with 3+ backticks (up to 3 spaces in) and closes at a line of at least as many backticks
    and nothing else, or at the end."""
    text, blocks, fence, block = [], [], None, []
    for line in markdown.splitlines():
        opening = re.match(r" {0,3}(`{3,})[^`]*$", line)
        if fence is None and opening:
            fence, block = len(opening.group(1)), []
        elif fence is not None and re.fullmatch(" {0,3}" + "`" * fence + "`* *", line):
            blocks.append("\n".join(block) + "\n")
            fence = None
        elif fence is not None:
            block.append(line)
        else:
            text.append(line)
    return text, blocks


def test_the_card_publishes_no_local_path_and_no_run_text_escapes_its_code_block(tmp_path):
    """A ``run_name`` holding a newline, a closing fence and HTML (the probe: HTML rendered on the
    hub page) stays inside the config's code block, whole; a mixture source and an evaluation's
    benchmark with HTML are escaped; ``paths``, ``data.dir``, an output dir and an evaluation's
    records path are not published, a hub id is."""
    html = '<img src=x onerror="alert(1)">'
    run = tmp_path / "runs" / "x"
    mixture = tmp_path / "secret-data" / "mix"
    mixture.mkdir(parents=True)
    (mixture / "mixture.json").write_text(json.dumps({"sources": {f"mine{html}": {"taken": 3}}}))
    config = {
        "run_name": f"x\n```\n{html}\n````\n",
        "paths": {"runs_dir": str(tmp_path / "runs"), "cache_dir": "/home/me/.cache"},
        "data": {"name": "mine", "dir": str(mixture), "root": "data/built", "splits": [0.8, 0.1, 0.1]},
        "model": {"path": "Qwen/Qwen3-VL-4B-Instruct"},
        "sft": {"output_dir": "runs/x", "lr": 1.0e-5},
    }
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    evaluation = {
        "benchmark": f"p3i{html}",
        "protocol_mode": "streaming",
        "records": "/home/me/data/test.jsonl",
        "threshold": 0.5,
        "figures": {"prs_u": 61.5},
    }
    card = model_card(run, [evaluation], "me/model")
    text, blocks = outside_code(card.split("---\n", 2)[2])
    spans = re.compile(r"(?<!\\)`[^`]*(?<!\\)`")  # code spans (`</Silence>`) show their text as is
    assert not [line for line in text if "<" in spans.sub("", line)], text
    assert '| mine&lt;img src=x onerror="alert(1)"&gt; |  | 3 |' in text
    published = yaml.safe_load(blocks[-1])
    assert published["run_name"] == config["run_name"]
    assert "paths" not in published and published["data"]["dir"] == LOCAL_PATH == published["data"]["root"]
    assert published["sft"] == {"output_dir": LOCAL_PATH, "lr": 1.0e-5}
    assert published["model"]["path"] == "Qwen/Qwen3-VL-4B-Instruct"
    for local in (str(tmp_path), "/home/me", "secret-data", "cache_dir", "runs_dir"):
        assert local not in card, local
    meta = yaml.safe_load(card.split("---\n", 2)[1])
    assert meta["model-index"][0]["results"][0]["dataset"]["split"] == "test.jsonl"


# -- a folder that takes no write: a real file system (tmpfs, or a read-only bind mount) in a mount
# namespace of its own, so the export's files, safetensors' and tokenizers' alike, meet it


def in_mount_namespace(setup: str, after: str, *args: str) -> subprocess.CompletedProcess:
    """``setup``, then ``python -m train.export ARGS``, then ``after``, in a private mount namespace
    (``unshare``: as root, or in a user namespace), from the repo root."""
    prefix = ["unshare", "-m"] if os.geteuid() == 0 else ["unshare", "-Urm"]
    script = f'set -e; {setup}; set +e; "$@"; rc=$?; {after}; exit $rc'
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [*prefix, "sh", "-c", script, "sh", sys.executable, "-m", "train.export", *args]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    if "unshare:" in done.stderr or "mount:" in done.stderr:
        raise AssertionError(f"this test mounts a file system in a mount namespace: {done.stderr[-500:]}")
    return done


def export_lines(done: subprocess.CompletedProcess) -> list[str]:
    return [line for line in done.stderr.splitlines() if line.startswith("train.export:")]


def pages_kib(path: Path) -> int:
    """KiB a file takes on tmpfs (whole 4 KiB pages)."""
    return -(-path.stat().st_size // 4096) * 4


@pytest.mark.slow  # an export process
def test_a_read_only_output_folder_is_one_line_and_the_old_export_stays(
    tiny_checkpoint, tmp_path, monkeypatch, capsys
):
    disk = tmp_path / "disk"
    out = disk / "out"
    code, _, output = run_export(monkeypatch, capsys, f"checkpoint={tiny_checkpoint}", f"out={out}")
    assert code == 0, output
    before = snapshot(disk)
    done = in_mount_namespace(
        f"mount --bind {disk} {disk}; mount -o remount,bind,ro {disk}",
        "true",
        f"checkpoint={tiny_checkpoint}",
        f"out={out}",
        "replace=true",
    )
    assert done.returncode == 2, done.stderr[-3000:]
    assert export_lines(done) == [
        f"train.export: cannot write in {disk}: Read-only file system; {out} is as it was"
    ]
    assert "Traceback" not in done.stderr
    assert snapshot(disk) == before


def _full_export(
    ckpt: Path, tmp_path: Path, total: int, free: int
) -> tuple[Path, Path, subprocess.CompletedProcess]:
    """``train.export`` over the old export (``tmp_path/old``) on a tmpfs with ``free`` KiB more than
    it; the tmpfs copied out to ``after<free>`` once it ends: (disk, copy, the process)."""
    disk, copy = tmp_path / f"disk{free}", tmp_path / f"after{free}"
    disk.mkdir()
    done = in_mount_namespace(
        f"mount -t tmpfs -o size={total + free}k tmpfs {disk}; cp -a {tmp_path / 'old'} {disk}/out",
        f"cp -a {disk} {copy}",
        f"checkpoint={ckpt}",
        f"out={disk}/out",
        "replace=true",
    )
    return disk, copy, done


@pytest.mark.slow  # three export processes, at once
def test_a_full_disk_during_the_export_is_one_line_and_leaves_the_old_export_whole(
    tiny_checkpoint, tmp_path, monkeypatch, capsys
):
    """A disk (tmpfs) that holds the old export and ``free`` KiB more: the weights do not fit
    (safetensors), the tokenizer does not (tokenizers), the card does not (Python): exit 2, one line
    naming the folder and the space left, the old export whole and nothing else left there; with
    room, the same command writes the export."""
    old = tmp_path / "old"
    code, _, output = run_export(monkeypatch, capsys, f"checkpoint={tiny_checkpoint}", f"out={old}")
    assert code == 0, output
    size = {p.name: pages_kib(p) for p in old.iterdir()}
    total = sum(size.values())
    first = size["config.json"] + size["generation_config.json"] + 16
    weights_in = first + size["model.safetensors"]
    frees = (first, weights_in, total - 8)
    with ThreadPoolExecutor(max_workers=len(frees)) as pool:  # three independent processes at once
        runs = list(pool.map(lambda free: _full_export(tiny_checkpoint, tmp_path, total, free), frees))
    for disk, copy, done in runs:
        assert done.returncode == 2, done.stderr[-3000:]
        (line,) = export_lines(done)
        assert (
            line.startswith(f"train.export: no space left writing in {disk}; ")
            and f"free in {disk}: " in line
        )
        assert f"the export to {disk}/out was not written and {disk}/out is as it was" in line
        assert "Traceback" not in done.stderr
        assert sorted(p.name for p in copy.iterdir()) == ["out"]
        assert snapshot(copy / "out") == snapshot(old)
    code, _, output = run_export(
        monkeypatch, capsys, f"checkpoint={tiny_checkpoint}", f"out={copy / 'out'}", "replace=true"
    )
    assert code == 0 and card_heading(copy / "out") == "# out", output
