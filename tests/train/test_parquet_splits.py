"""A built split read from its parquet shards alone: SFT, GRPO and eval.run resolve it alike
(``data_builders.splits``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from data_builders.mixture import build_toy_mixture
from data_builders.record_io import load_streams
from data_builders.splits import records_file, split_records


@pytest.fixture(scope="module")
def mixtures(tmp_path_factory) -> tuple[Path, Path]:
    """The toy mixture, and a copy of it whose splits hold parquet shards only."""
    root = tmp_path_factory.mktemp("parquet_splits")
    jsonl = build_toy_mixture(root / "built", root / "toy", n=8, seed=0)
    parquet = root / "parquet"
    shutil.copytree(jsonl, parquet)
    for split in ("train", "val", "test"):
        (parquet / split / "records.jsonl").unlink()
        assert any((parquet / split).glob("*.parquet"))
    return jsonl, parquet


def test_the_resolver_reads_a_split_its_shards_or_a_file(mixtures, tmp_path):
    jsonl, parquet = mixtures
    assert split_records(jsonl / "train") == jsonl / "train" / "records.jsonl"
    assert split_records(parquet / "train") == parquet / "train"
    assert records_file(jsonl / "train" / "records.jsonl") == jsonl / "train" / "records.jsonl"
    assert [s.id for s in load_streams(split_records(parquet / "train"))] == [
        s.id for s in load_streams(split_records(jsonl / "train"))
    ]
    with pytest.raises(FileNotFoundError, match="no records in .*: build the data first"):
        split_records(tmp_path)


def test_grpo_reads_a_parquet_only_split(mixtures):
    from train.grpo.run import compose_config, held_out_evaluator, load_windows, render_config

    jsonl, parquet = mixtures
    windows = {}
    for name, data in (("jsonl", jsonl), ("parquet", parquet)):
        cfg = compose_config(
            [f"data.dir={data}", "init=random", "grpo.window_steps=10", "grpo.eval_split=test"]
        )
        render = render_config(cfg)
        windows[name] = [
            (w.stream.id, w.start, w.end, w.frames.shape) for w in load_windows(cfg, render, None)
        ]
        assert callable(
            held_out_evaluator(cfg, None, render, None)
        )  # the test split read as the held-out set
    assert windows["parquet"] == windows["jsonl"] and len(windows["jsonl"]) > 0


def test_eval_run_reads_a_parquet_only_split(mixtures):
    from eval.run import load_config, records_path

    jsonl, parquet = mixtures
    cfg = load_config(["checkpoint=null", f"data.dir={parquet}", "split=test"])
    assert records_path(cfg) == parquet / "test"
    assert [s.id for s in load_streams(records_path(cfg))] == [
        s.id for s in load_streams(jsonl / "test" / "records.jsonl")
    ]
