"""eval.run over several processes (eval.ranks): the split, the manifests, the merge, and real 2-process
``accelerate launch`` runs on the tiny model whose metrics equal one process's, resumed shard by shard."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks.runners import get_runner
from data_builders.record_io import load_streams
from data_builders.records import RecordError
from eval.ranks import adopt, check_manifests, merge, shard_path, split, write_manifest
from eval.run import evaluate, load_config
from eval.store import PredictionLog
from infra.ranks import Ranks
from tests.conftest import free_port

ROOT = Path(__file__).resolve().parents[2]
FIRING = 0.47  # the untrained tiny model fires on about half the steps (tests/eval/test_run.py)


@pytest.fixture
def one_thread():
    """The in-process reference runs on one thread, as the launched ranks do (OMP_NUM_THREADS=1):
    float32 sums split over other thread counts differ in their last bits. An earlier test in the
    same worker may have left torch on more (``sft.num_threads: 2`` in the toy experiments)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_split_depends_on_the_record_set_only_and_keeps_videos_together(toy_dir):
    streams = load_streams(toy_dir / "records.jsonl")
    shares = split(streams, 3)
    shuffled = random.Random(0).sample(streams, len(streams))
    assert [{s.id for s in share} for share in split(shuffled, 3)] == [
        {s.id for s in share} for share in shares
    ]
    ids = sorted(s.id for s in streams)
    assert [[s.id for s in share] for share in shares] == [
        [s.id for s in streams if ids.index(s.id) % 3 == r] for r in range(3)
    ]
    assert [len(share) for share in shares] == [3, 3, 2]
    # OVO-Bench official answers a video's probes from one pass: the video is the shard key.
    ovo = load_config(["benchmark=ovo", "benchmark.protocol_mode=official"]).benchmark
    two_videos = [replace(s, video=f"v{i % 2}.mp4") for i, s in enumerate(streams)]
    runner = get_runner("ovo")
    shares = split(two_videos, 2, lambda s: runner.shard_key(s, ovo))
    assert sorted({s.video for s in share} == {f"v{r}.mp4"} for r, share in enumerate(shares)) == [True, True]
    assert runner.shard_key(streams[0], load_config(["benchmark=ovo"]).benchmark) == streams[0].id


def test_ranks_that_read_other_records_stop_naming_both_manifests(toy_dir, tmp_path):
    streams = load_streams(toy_dir / "records.jsonl")
    decision = {"threshold": 0.5, "render": {"max_pixels": 4096}, "weights": "ab" * 32}
    write_manifest(tmp_path, Ranks(0, 2), streams, streams[:4], toy_dir / "records.jsonl", decision)
    write_manifest(tmp_path, Ranks(1, 2), streams[:7], streams[4:7], tmp_path / "other.jsonl", decision)
    with pytest.raises(RecordError, match="disagree on the record set: rank 1 read 7 records") as exc:
        check_manifests(tmp_path, 2)
    assert exc.value.file == str(tmp_path / "predictions.rank-1-of-2.manifest.json")
    assert "rank 0 read 8" in str(exc.value) and str(tmp_path / "other.jsonl") in str(exc.value)
    with pytest.raises(RecordError, match="rank 0 of 3 wrote no manifest"):
        check_manifests(tmp_path, 3)


def test_ranks_with_other_weights_or_another_manifest_version_stop(toy_dir, tmp_path):
    """The same records and config, other weights at the same path (another node's copy): the key
    and both sha256 named. A manifest of another layout (a rank running other code) is refused."""
    streams = load_streams(toy_dir / "records.jsonl")
    decision = {"threshold": 0.5, "render": {"max_pixels": 4096}, "weights": "ab" * 32}
    write_manifest(tmp_path, Ranks(0, 2), streams, streams[:4], toy_dir / "records.jsonl", decision)
    write_manifest(tmp_path, Ranks(1, 2), streams, streams[4:], toy_dir / "records.jsonl", decision)
    assert len(check_manifests(tmp_path, 2)) == 2
    write_manifest(
        tmp_path,
        Ranks(1, 2),
        streams,
        streams[4:],
        toy_dir / "records.jsonl",
        decision | {"weights": "cd" * 32},
    )
    host = os.uname().nodename
    with pytest.raises(RecordError, match="the ranks would predict differently: weights") as exc:
        check_manifests(tmp_path, 2)
    assert f'"{"cd" * 32}" (rank 1 on {host}) vs "{"ab" * 32}" (rank 0 on {host})' in str(exc.value)
    path = tmp_path / "predictions.rank-1-of-2.manifest.json"
    old = json.loads(path.read_text())
    for key in ("manifest", "decides", "decides_sha256"):
        old.pop(key)
    path.write_text(json.dumps(old))  # as the previous version wrote it
    with pytest.raises(RecordError, match="rank 1's manifest is of version None, this eval.run writes 2"):
        check_manifests(tmp_path, 2)
    path.write_text('{"rank": 1, "wor')
    with pytest.raises(RecordError, match="rank 1's manifest is not JSON"):
        check_manifests(tmp_path, 2)


@pytest.mark.slow  # two processes loading the stack (~20 s)
@pytest.mark.ranks
def test_ranks_started_with_other_thresholds_refuse_to_merge(tiny_checkpoint, toy_dir, tmp_path):
    """Two ranks of one launch (``python -m eval.run`` with ``RANK``/``WORLD_SIZE`` as a launcher
    sets them), one with threshold 0.5, one with 0.05: both stop before streaming, exit 2, naming
    the key and both values; nothing is predicted or merged."""
    out = tmp_path / "out"
    args = [
        f"checkpoint={tiny_checkpoint}",
        f"records={toy_dir / 'records.jsonl'}",
        f"paths.cache_dir={tmp_path / 'cache'}",
        "render.max_pixels=4096",
        f"out_dir={out}",
        "limit=4",
    ]
    port = str(free_port())
    procs = []
    for rank, threshold in ((0, 0.5), (1, 0.05)):
        env = {**os.environ, "PYTHONPATH": str(ROOT), "RANK": str(rank), "LOCAL_RANK": str(rank)}
        env |= {"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "OMP_NUM_THREADS": "1"}
        cmd = [sys.executable, "-m", "eval.run", *args, f"threshold={threshold}"]
        procs.append(
            subprocess.Popen(
                cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        )
    done = [p.communicate(timeout=300) for p in procs]
    host = os.uname().nodename
    for p, (_, err) in zip(procs, done, strict=True):
        assert p.returncode == 2, err[-2000:]
        assert f"threshold: 0.05 (rank 1 on {host}) vs 0.5 (rank 0 on {host})" in err.splitlines()[-1]
    assert not list(out.glob("predictions*.jsonl")) and not (out / "metrics.json").exists()


def test_adopt_resplits_another_layout_and_merge_checks_every_share(toy_dir, tmp_path):
    streams = load_streams(toy_dir / "records.jsonl")
    one = PredictionLog(tmp_path / "predictions.jsonl")  # a one-process run, 5 records done
    for s in streams[:5]:
        one.append({"id": s.id, "replies": []})
    shares = split(streams, 2)
    assert adopt(tmp_path, shares) == 5
    for rank, share in enumerate(shares):
        got = [r["id"] for r in PredictionLog(shard_path(tmp_path, rank, 2)).rows()]
        assert got == [s.id for s in share if s in streams[:5]]
    with pytest.raises(RecordError, match=r"rank \d of 2 left \d of its 4 records unwritten"):
        merge(tmp_path, streams, shares)
    assert adopt(tmp_path, shares) == 0  # nothing twice
    shares3 = split(streams, 3)  # the world grows to 3: the 2-rank shards are re-split, then removed
    assert adopt(tmp_path, shares3) == 5
    assert not list(tmp_path.glob("predictions.rank-*-of-2.*"))
    for rank, share in enumerate(shares3):
        log = PredictionLog(shard_path(tmp_path, rank, 3))
        log_ids = [r["id"] for r in log.rows()]
        for s in share:
            if s not in streams[:5]:
                log.append({"id": s.id, "replies": []})
        assert set(log_ids) <= {s.id for s in share}
    assert [r["id"] for r in merge(tmp_path, streams, shares3)] == [s.id for s in streams]
    assert [r["id"] for r in PredictionLog(tmp_path / "predictions.jsonl").rows()] == [s.id for s in streams]
    PredictionLog(shard_path(tmp_path, 0, 3)).append({"id": shares3[1][0].id, "replies": []})
    with pytest.raises(RecordError, match="not in rank 0's share of 3"):
        merge(tmp_path, streams, shares3)


def _launch(argv: list[str]) -> subprocess.CompletedProcess:
    accelerate = shutil.which("accelerate", path=str(Path(sys.executable).parent)) or "accelerate"
    cmd = [accelerate, "launch", "--config_file", "conf/accelerate/ddp.yaml", "--num_processes", "2"]
    cmd += ["--main_process_port", str(free_port()), "-m", "eval.run", *argv]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.ranks
@pytest.mark.slow  # two real 2-process launches (~20 s each alone, more on a busy machine)
def test_two_ranks_score_as_one_process_and_a_requeue_resumes_every_shard(
    tiny_checkpoint, toy_dir, tmp_path, capsys, one_thread
):
    records = toy_dir / "records.jsonl"
    streams = load_streams(records)[:4]
    common = [
        f"checkpoint={tiny_checkpoint}",
        f"records={records}",
        f"paths.cache_dir={tmp_path / 'cache'}",
        "render.max_pixels=4096",
        "max_new_tokens=4",
        f"threshold={FIRING}",
        "limit=4",
        "batch_size=1",  # the same batches in one process and in two: bit-equal probabilities
    ]
    ref = tmp_path / "one"
    one = evaluate(load_config([*common, f"out_dir={ref}"]), echo=False)
    out = tmp_path / "two"
    run = _launch([*common, f"out_dir={out}"])
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert json.loads(run.stdout.strip().splitlines()[-1]) == one
    assert json.loads((out / "metrics.json").read_text()) == one
    assert "4 records, 2 ranks, 4 streamed" in run.stdout
    merged = PredictionLog(out / "predictions.jsonl").rows()
    assert merged == PredictionLog(ref / "predictions.jsonl").rows()  # same rows, in record order
    assert sum(sum(r["fired"]) for r in merged) > 5
    shares = split(streams, 2)
    for rank in (0, 1):
        ids = [r["id"] for r in PredictionLog(shard_path(out, rank, 2)).rows()]
        assert ids == [s.id for s in shares[rank]]

    # Rank 1 died part way: one record kept, a torn line after it. The rerun redoes its other one.
    kept = (out / "predictions.rank-0-of-2.jsonl").read_bytes()
    rank1 = out / "predictions.rank-1-of-2.jsonl"
    first = rank1.read_text().splitlines(keepends=True)[0]
    rank1.write_text(first + '{"id": "' + shares[1][1].id + '", "repl')
    (out / "metrics.json").unlink()
    (out / "predictions.jsonl").unlink()
    rerun = _launch([*common, f"out_dir={out}"])
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    assert "4 records, 2 ranks, 1 streamed" in rerun.stdout
    assert json.loads((out / "metrics.json").read_text()) == one
    assert (out / "predictions.rank-0-of-2.jsonl").read_bytes() == kept
    assert PredictionLog(out / "predictions.jsonl").rows() == merged  # no duplicate, none lost

    # One process resumes the 2-rank run: the shards' rows are taken over, nothing is streamed again.
    capsys.readouterr()
    assert evaluate(load_config([*common, f"out_dir={out}"])) == one
    assert "4 records, 0 streamed" in capsys.readouterr().out
    assert not list(out.glob("predictions.rank-*"))
    assert PredictionLog(out / "predictions.jsonl").rows() == merged


def test_a_sweep_under_a_launch_is_refused(tiny_checkpoint, toy_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    cfg = load_config(
        [f"checkpoint={tiny_checkpoint}", f"records={toy_dir / 'records.jsonl'}", "threshold=0.3"]
    )
    with pytest.raises(ValueError, match="threshold sweep .* not under a 2-process launch"):
        evaluate(cfg, sweep=True)
