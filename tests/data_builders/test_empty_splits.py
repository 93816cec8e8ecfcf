"""Too few videos for a mixture's split shares: ``mix`` warns, naming the empty splits, why and what
to do, and a stage reading an empty split refuses in one line (it read no record, or trained on none)."""

from __future__ import annotations

import json

from tests.conftest import run_module


def test_an_empty_split_is_warned_of_by_mix_and_refused_by_eval_run(tmp_path):
    built = run_module(
        "data_builders", "build", "source=toy", "out=data/built/toy", "n=3", "seed=0", cwd=tmp_path
    )
    assert built.returncode == 0, built.stderr[-2000:]
    mixed = run_module("data_builders", "mix", "data=toy", cwd=tmp_path)
    assert mixed.returncode == 0, mixed.stderr[-2000:]
    splits = json.loads(mixed.stdout.splitlines()[-1])["splits"]
    assert {k: v["records"] for k, v in splits.items()} == {"train": 3, "val": 0, "test": 0}
    (warning,) = [line for line in mixed.stderr.splitlines() if "got no record" in line]
    assert "mixture toy: split(s) val, test got no record: 3 video(s) are too few for the shares" in warning
    assert "about 8 videos give every split one" in warning and "records=DIR" in warning

    refused = run_module("eval.run", "data=toy", "split=test", cwd=tmp_path)
    assert refused.returncode == 2
    (line,) = refused.stderr.strip().splitlines()
    assert line.startswith("eval.run: split=test: data/toy/test/records.jsonl holds no record")
    assert "records=<build dir>" in line
    assert not (tmp_path / "runs").exists()  # refused before anything was written
