"""pipeline.pictures: the README's two pictures from any checkpoint and records (here the untrained
tiny checkpoint on four toy records), taken in headless Chromium; the record the demo shows."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from data_builders.record_io import write_jsonl
from pipeline.pictures import main, pick_record

ROOT = Path(__file__).resolve().parents[2]
FIRING = 0.47  # the untrained tiny model fires on about half the steps at this threshold


@pytest.mark.slow  # an evaluation, the viewer and the served demo in chromium (about a minute loaded)
def test_pictures_of_a_checkpoint_are_written(tiny_checkpoint, toy_dir, tmp_path, capsys, monkeypatch):
    """The evaluation goes under a relative ``runs=`` as the command's default ``runs`` (the page is
    opened by its absolute file URI)."""
    from PIL import Image

    monkeypatch.chdir(tmp_path)
    out = tmp_path / "docs"
    argv = [
        f"checkpoint={tiny_checkpoint}",
        f"records={toy_dir / 'records.jsonl'}",
        f"out={out}",
        "runs=runs",
        f"paths.cache_dir={tmp_path / 'cache'}",
        "render.max_pixels=4096",
        "max_new_tokens=6",
        f"threshold={FIRING}",
        "limit=4",
    ]
    assert main(argv) == 0
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    folder = Path(figures["evaluation"])
    assert folder.resolve() == tmp_path / "runs" / "pictures" / "ckpt" and (folder / "view.html").is_file()
    assert (figures["record"], figures["outcomes"]) == pick_record(folder)
    for name, size in (("view", (1100, 900)), ("app", (1100, 620))):
        png = out / f"{name}.png"
        assert figures[name] == str(png) and figures[f"{name}_bytes"] == png.stat().st_size > 20_000
        img = Image.open(png).convert("RGB")
        assert (
            img.size == size and len(img.getcolors(maxcolors=1 << 20)) > 200
        )  # a drawn page, not a blank one
    assert not list(out.glob(".*.tmp.png"))


def test_the_record_shown_is_one_answered_once_on_time(tmp_path):
    """Of two records with targets (and a negative), the one whose replies are a single hit; without one, the most
    hits less other replies."""
    base = {
        "source": "toy",
        "task": "t",
        "video": "v.mp4",
        "clip_start": 0,
        "clip_end": 20,
        "instruction": "i",
    }
    target = [{"time": 5.0, "content": "x"}]
    records = [
        base | {"id": "a", "targets": target},
        base | {"id": "b", "targets": target},
        base | {"id": "c"},
    ]
    write_jsonl(tmp_path / "records.jsonl", records)
    (tmp_path / "config.yaml").write_text(
        f"records: {tmp_path / 'records.jsonl'}\nthreshold: 0.5\nbenchmark: {{name: p3i, protocol: p3i}}\n"
    )

    def rows(a: list[float], b: list[float]) -> None:
        write_jsonl(
            tmp_path / "predictions.jsonl",
            [
                {"id": "a", "replies": [{"time": t, "text": "x"} for t in a]},
                {"id": "b", "replies": [{"time": t, "text": "x"} for t in b]},
                {"id": "c", "replies": [{"time": 1.0, "text": "x"}]},
            ],
        )

    rows([2.0, 5.0, 6.0], [5.0])  # a: early, hit, redundant; b: one hit
    assert pick_record(tmp_path) == ("b", ["hit"])
    rows([5.0, 6.0], [2.0, 3.0])  # no single hit: a has one hit and one redundant
    assert pick_record(tmp_path) == ("a", ["hit", "redundant"])


def test_a_missing_checkpoint_is_one_line(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "pipeline.pictures", f"checkpoint={tmp_path / 'absent'}"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith(
        f"pipeline.pictures: checkpoint {tmp_path / 'absent'} does not exist: run `make demo`"
    )
    assert len(done.stderr.strip().splitlines()) == 1
