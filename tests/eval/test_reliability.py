"""Bad inputs and misuse of eval.run, eval.score and eval.watch: clear errors, nothing overwritten,
nothing written outside its folder, no silently wrong number."""

from __future__ import annotations

import errno
import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from data_builders.record_io import load_streams, write_jsonl
from data_builders.records import RecordError
from eval import score, store
from eval.run import evaluate, load_config
from eval.store import PredictionLog, PredictionWriteError
from eval.watch import load_config as watch_config
from eval.watch import watch
from infra.files import OutputLock, OutputLocked
from infra.schema import ConfigValueError

ROOT = Path(__file__).resolve().parents[2]


def overrides(ckpt: Path, records: Path, tmp: Path, *extra: str) -> list[str]:
    return [
        f"checkpoint={ckpt}",
        f"records={records}",
        f"paths.cache_dir={tmp / 'cache'}",
        f"paths.runs_dir={tmp / 'runs'}",
        "render.max_pixels=4096",
        "max_new_tokens=4",
        *extra,
    ]


def test_traversal_ids_stay_inside_the_output_folder(tiny_checkpoint, toy_dir, tmp_path):
    base = load_streams(toy_dir / "records.jsonl")[:2]
    video = [str((toy_dir / s.video).resolve()) for s in base]
    hostile = [
        replace(base[0], id="../../escaped/a", video=video[0]),
        replace(base[1], id=str(tmp_path / "abs" / "b"), video=video[1]),
    ]
    write_jsonl(tmp_path / "hostile.jsonl", hostile)
    out = tmp_path / "deep" / "out"
    evaluate(load_config(overrides(tiny_checkpoint, tmp_path / "hostile.jsonl", tmp_path, f"out_dir={out}")))
    assert not (tmp_path / "deep" / "escaped").exists() and not (tmp_path / "escaped").exists()
    assert not (tmp_path / "abs").exists()
    assert len(list((out / "timelines").glob("*.png"))) == 2
    outside = [p for p in tmp_path.rglob("*.png") if out not in p.parents]
    assert outside == []


def test_two_runs_on_one_folder_the_second_stops_naming_the_first(tiny_checkpoint, toy_dir, tmp_path):
    out = tmp_path / "out"
    cfg = load_config(
        overrides(tiny_checkpoint, toy_dir / "records.jsonl", tmp_path, f"out_dir={out}", "limit=1")
    )
    with OutputLock(out, "eval.run"):  # the first run, still going
        with pytest.raises(OutputLocked, match="in use by another run"):
            evaluate(cfg)
    assert not (out / "predictions.jsonl").exists()  # nothing written by the second


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("limit=-1", "limit=-1: must be at least 1"),
        ("threshold=nan", "threshold=nan: must be a finite number"),
        ("threshold=1.5", "threshold=1.5: must be at most 1"),
        ("batch_size=0", "batch_size=0: must be at least 1"),
        ("benchmark.alpha=-1", "benchmark.alpha=-1.0: must be at least 0"),
    ],
)
def test_numeric_options_are_validated_naming_the_option(
    tiny_checkpoint, toy_dir, tmp_path, override, message
):
    with pytest.raises(ConfigValueError, match=message.replace(".", r"\.")):
        load_config(overrides(tiny_checkpoint, toy_dir / "records.jsonl", tmp_path, override))


def test_an_empty_records_file_and_a_missing_checkpoint_say_so(tiny_checkpoint, toy_dir, tmp_path):
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(RecordError, match="empty.jsonl: no records to evaluate"):
        evaluate(load_config(overrides(tiny_checkpoint, tmp_path / "empty.jsonl", tmp_path)))
    missing = load_config(overrides(tmp_path / "no-such-run", toy_dir / "records.jsonl", tmp_path, "limit=1"))
    with pytest.raises(FileNotFoundError, match="no-such-run does not exist"):
        evaluate(missing)


def test_the_watcher_fails_on_a_run_dir_that_does_not_exist(tmp_path):
    """With no wait left (``run_dir_wait_s=0``) a missing run dir fails at once, naming it; the
    default waits a day for one a queued training job has not made yet (tests/eval/test_watch.py)."""
    cfg = watch_config([f"run_dir={tmp_path / 'typo'}", "once=true", "run_dir_wait_s=0"])
    with pytest.raises(FileNotFoundError, match="run_dir=.*typo: no such folder"):
        watch(cfg, evaluate=lambda c: {})


def _gt_pred(tmp_path: Path) -> tuple[Path, Path]:
    gt, pred = tmp_path / "gt.jsonl", tmp_path / "pred.jsonl"
    target = {"time": 10.0, "content": "", "label": "Warning"}
    write_jsonl(gt, [{"id": "a", "task": "accident_warning", "targets": [target]}])
    write_jsonl(pred, [{"id": "a", "replies": [{"time": 10.0, "text": "Warning"}]}])
    return gt, pred


def test_eval_score_refuses_to_overwrite_its_ground_truth(tmp_path, capsys):
    gt, pred = _gt_pred(tmp_path)
    before = gt.read_text()
    args = ["--protocol", "p3i", "--gt", str(gt), "--pred", str(pred), "--per-sample", str(gt)]
    assert score.main(args) == 2
    assert "would overwrite an input" in capsys.readouterr().err and gt.read_text() == before


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (["--alpha", "-1"], "--alpha -1.0: the timing decay must be a finite number >= 0"),
        (["--alpha", "nan"], "--alpha nan"),
        (["--tolerance", "-3"], "--tolerance -3.0"),
    ],
)
def test_eval_score_rejects_bad_numbers(tmp_path, capsys, change, message):
    gt, pred = _gt_pred(tmp_path)
    assert score.main(["--protocol", "p3i", "--gt", str(gt), "--pred", str(pred), *change]) == 2
    assert message in capsys.readouterr().err


def test_eval_score_never_scores_nothing_as_zero(tmp_path, capsys):
    gt, pred = _gt_pred(tmp_path)
    (tmp_path / "empty_gt.jsonl").write_text("")
    assert (
        score.main(["--protocol", "p3i", "--gt", str(tmp_path / "empty_gt.jsonl"), "--pred", str(pred)]) == 2
    )
    assert "no ground-truth records to score" in capsys.readouterr().err
    (tmp_path / "preds").mkdir()
    args = ["--protocol", "p3i", "--gt", str(gt), "--pred", str(tmp_path / "preds"), "--allow-missing"]
    assert score.main(args) == 2
    assert "holds no parquet shards" in capsys.readouterr().err
    write_jsonl(tmp_path / "neg.jsonl", [{"id": "a", "replies": [{"time": -2.0, "text": "Warning"}]}])
    assert score.main(["--protocol", "p3i", "--gt", str(gt), "--pred", str(tmp_path / "neg.jsonl")]) == 2
    assert "replies[0].time" in capsys.readouterr().err


def test_an_unwritable_per_sample_path_keeps_the_metrics(tmp_path):
    gt, pred = _gt_pred(tmp_path)
    (tmp_path / "blocked").write_text("a file, not a folder")
    cmd = [sys.executable, "-m", "eval.score", "--protocol", "p3i", "--gt", str(gt), "--pred", str(pred)]
    out = subprocess.run(
        [*cmd, "--per-sample", str(tmp_path / "blocked" / "rows.jsonl")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and "cannot write --per-sample" in out.stderr
    assert json.loads(out.stdout.splitlines()[-1])["prs_b"] == 100.0


def test_a_clip_that_starts_before_zero_is_refused_before_it_runs_and_as_ground_truth(
    tiny_checkpoint, toy_dir, tmp_path, capsys
):
    [base] = load_streams(toy_dir / "records.jsonl")[:1]
    early = replace(base, clip_start=-2.0, video=str((toy_dir / base.video).resolve()))
    write_jsonl(tmp_path / "early.jsonl", [early])
    out = tmp_path / "out"
    cfg = load_config(overrides(tiny_checkpoint, tmp_path / "early.jsonl", tmp_path, f"out_dir={out}"))
    with pytest.raises(
        RecordError, match=rf"early.jsonl, record {base.id}, field 'clip_start': a clip starts at 0"
    ):
        evaluate(cfg)
    assert not out.exists()  # refused before anything ran or was written
    # the scorer refuses the same record as ground truth, naming it, not the replies made at its steps
    write_jsonl(tmp_path / "pred.jsonl", [{"id": base.id, "replies": [{"time": -2.0, "text": "Warning"}]}])
    args = [
        "--protocol",
        "p3i",
        "--gt",
        str(tmp_path / "early.jsonl"),
        "--pred",
        str(tmp_path / "pred.jsonl"),
    ]
    assert score.main(args) == 2
    err = capsys.readouterr().err
    assert f"file {tmp_path / 'early.jsonl'}, record {base.id}, field 'clip_start': a clip starts at 0" in err


def test_a_duplicate_or_torn_prediction_line_is_refused_naming_the_file(
    tiny_checkpoint, toy_dir, tmp_path, capsys
):
    """eval.run scores its predictions.jsonl as ``eval.score`` would: a duplicate id is an error in
    both (it was scored last-wins, PRS-B 0 -> 50 here), a torn line not at the end names file and line."""
    out = tmp_path / "out"
    cfg = load_config(
        overrides(
            tiny_checkpoint, toy_dir / "records.jsonl", tmp_path, f"out_dir={out}", "limit=2", "timelines=0"
        )
    )
    first = evaluate(cfg)
    assert first["prs_b"] == 0.0  # the untrained model stays silent at 0.5
    pred = out / "predictions.jsonl"
    rows = [json.loads(line) for line in pred.read_text().splitlines()]
    stream = next(s for s in load_streams(toy_dir / "records.jsonl")[:2] if s.targets)
    target = stream.targets[0]
    better = {**next(r for r in rows if r["id"] == stream.id)}
    better["replies"] = [{"time": target.time, "text": target.label or target.content, "category": None}]
    with pred.open("a") as fh:
        fh.write(json.dumps(better) + "\n")
    before = pred.read_text()
    with pytest.raises(RecordError, match=rf"file {pred}, record {stream.id}, field 'id': duplicate id"):
        evaluate(cfg)
    assert pred.read_text() == before  # nothing cut or rewritten
    args = ["--protocol", "p3i", "--gt", str(out / "gt.jsonl"), "--pred", str(pred)]
    capsys.readouterr()
    assert score.main(args) == 2 and "duplicate id" in capsys.readouterr().err  # the same verdict

    lines = before.splitlines(keepends=True)
    pred.write_text(lines[0][:40] + "\n" + lines[1])  # a torn line, then a whole one
    with pytest.raises(RecordError, match=rf"file {pred}, record line 1: invalid JSON"):
        evaluate(cfg)
    assert pred.read_text() == lines[0][:40] + "\n" + lines[1]


class _DiskFillsUp:
    """``eval.store``'s ``os`` with a disk that is full at its ``fail_at``-th fsync of the predictions
    file: the kernel kept part of that line, and fsync reports ENOSPC (space is freed after it)."""

    def __init__(self, fail_at: int):
        self.fail_at, self.calls = fail_at, 0

    def __getattr__(self, name):
        return getattr(os, name)

    def fsync(self, fd: int) -> None:
        self.calls += 1
        if self.calls == self.fail_at:
            size = os.fstat(fd).st_size
            os.ftruncate(fd, size - 30)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        os.fsync(fd)


def test_a_full_disk_in_predictions_names_the_file_and_a_resume_equals_an_uninterrupted_run(
    tiny_checkpoint, toy_dir, tmp_path, monkeypatch
):
    common = overrides(
        tiny_checkpoint, toy_dir / "records.jsonl", tmp_path, "limit=2", "batch_size=1", "timelines=0"
    )
    ref = tmp_path / "ref"
    evaluate(load_config([*common, f"out_dir={ref}"]), echo=False)
    out = tmp_path / "out"
    pred = out / "predictions.jsonl"
    monkeypatch.setattr(store, "os", _DiskFillsUp(fail_at=2))
    with pytest.raises(PredictionWriteError) as err:
        evaluate(load_config([*common, f"out_dir={out}"]), echo=False)
    message = str(err.value)
    assert f"cannot append record toy-0-00001 to {pred}" in message
    assert re.search(rf"[0-9.]+ [KMG]iB free in {out}; is the disk full\?", message)
    assert "No space left on device" in message
    assert "1 record(s) before it are kept" in message and err.value.errno == errno.ENOSPC
    assert pred.read_text().count("\n") == 1 and pred.read_text().endswith("\n")  # sound: no torn line
    assert [r["id"] for r in PredictionLog(pred).rows()] == ["toy-0-00000"]
    monkeypatch.undo()
    evaluate(load_config([*common, f"out_dir={out}"]), echo=False)  # space freed: the same command
    assert (out / "metrics.json").read_text() == (ref / "metrics.json").read_text()
    assert PredictionLog(pred).rows() == PredictionLog(ref / "predictions.jsonl").rows()


@pytest.mark.parametrize("case", ["clip_past_the_end", "extreme_aspect_ratio"])
def test_eval_run_names_the_video_and_record_it_cannot_read(tiny_checkpoint, toy_dir, tmp_path, case):
    from data_builders.synthetic.toy import write_mp4
    from data_builders.video import VideoError

    base = load_streams(toy_dir / "records.jsonl")[0]
    if case == "clip_past_the_end":  # a 20 s toy video, a clip to 26 s: never padded with its last frame
        video = (toy_dir / base.video).resolve()
        bad = replace(base, id="late-clip", video=str(video), clip_end=26.0)
        message = (
            r"frames asked up to 25\.000 s but the video lasts 20\.000 s.*"
            r"\(record late-clip, clip 0\.000-26\.000 s\)"
        )
    else:  # 16 x 4000 px: the image processor refuses it
        video = tmp_path / "tall.mp4"
        write_mp4(video, [np.full((4000, 16, 3), 90, np.uint8)] * 4, fps=1)
        bad = replace(base, id="tall-clip", video=str(video), clip_end=4.0, targets=[])
        message = (
            r"frames of 16 x 4000 px have an aspect ratio of 250:1; the model's image processor takes at "
            r"most 200:1 \(record tall-clip, clip 0\.000-4\.000 s\)"
        )
    write_jsonl(tmp_path / "bad.jsonl", [bad])
    with pytest.raises(VideoError, match=rf"^{re.escape(str(video))}: {message}"):
        evaluate(load_config(overrides(tiny_checkpoint, tmp_path / "bad.jsonl", tmp_path)), echo=False)


def test_eval_run_refuses_a_record_holding_a_control_token_in_one_line(tiny_checkpoint, toy_dir, tmp_path):
    """3 records, the second's instruction holding ``<|image_pad|>`` (written before the build refused
    it): ``python -m eval.run`` stops before streaming, exit 2, one line naming the file, the record,
    the field and the token, no prediction written (before: ``RuntimeError: generator raised
    StopIteration``, naming no record)."""
    streams = load_streams(toy_dir / "records.jsonl")[:3]
    streams = [replace(s, video=str((toy_dir / s.video).resolve())) for s in streams]
    streams[1] = replace(streams[1], instruction=streams[1].instruction + " <|image_pad|>")
    write_jsonl(tmp_path / "three.jsonl", streams)
    out = tmp_path / "out"
    args = overrides(tiny_checkpoint, tmp_path / "three.jsonl", tmp_path, f"out_dir={out}")
    done = _full_disk_run("eval.run", args, tmp_path, None)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert _errors(done) == [
        f"eval.run: file {tmp_path / 'three.jsonl'}, record {streams[1].id}, field 'instruction': holds "
        "'<|image_pad|>', a control token of the model's turn format (chat, vision or decision marker); "
        "write it another way"
    ]
    assert not (out / "predictions.jsonl").exists()


FULL_DISK = (
    ROOT / "tests" / "full_disk"
)  # its sitecustomize.py: a disk of FULL_DISK_BYTES under FULL_DISK_DIR


def _full_disk_run(
    module: str, args: list[str], folder: Path, budget: int | None
) -> subprocess.CompletedProcess:
    """``python -m <module> ARGS`` from the repo root; with ``budget``, writes under ``folder`` find
    no space once ``budget`` bytes were written."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if budget is not None:
        env |= {
            "PYTHONPATH": f"{FULL_DISK}:{ROOT}",
            "FULL_DISK_DIR": str(folder),
            "FULL_DISK_BYTES": str(budget),
        }
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )


def _errors(done: subprocess.CompletedProcess) -> list[str]:
    return [line for line in done.stderr.splitlines() if line.strip() and " INFO " not in line]


def _all_whole(folder: Path) -> None:
    """No temp file left, every JSON / JSON-lines / YAML / PNG file under ``folder`` whole."""
    import yaml
    from PIL import Image

    for p in folder.rglob("*"):
        if p.is_dir() or p.name == ".lock":
            continue
        assert not p.name.startswith(".") and not p.name.endswith(".tmp"), f"left behind: {p}"
        if p.suffix == ".jsonl":
            [json.loads(line) for line in p.read_text().splitlines()]
        elif p.suffix == ".json":
            json.loads(p.read_text())
        elif p.suffix == ".yaml":
            assert isinstance(yaml.safe_load(p.read_text()), dict) and "weights:" in p.read_text()
        elif p.suffix == ".png":
            Image.open(p).verify()


@pytest.mark.slow  # four eval.run processes on the tiny model, two at a time
def test_a_full_disk_anywhere_in_eval_run_is_one_line_and_a_rerun_completes(
    tiny_checkpoint, toy_dir, tmp_path
):
    """The disk fills up while ``python -m eval.run`` writes its config (1 KB in), or its timelines
    (12 KB in, after the predictions): exit 2, one line naming the output folder and the space left,
    no temp file and no cut file left; the same command with room again ends with the uninterrupted
    run's metrics (the uninterrupted run: in this process, the metrics its command line prints)."""
    from eval.run import evaluate, load_config

    common = [*overrides(tiny_checkpoint, toy_dir / "records.jsonl", tmp_path, "limit=2"), "view=false"]
    with ThreadPoolExecutor(max_workers=2) as pool:  # the two budgets' processes while ref runs here
        chains = [pool.submit(_full_then_room, common, tmp_path, b) for b in (1000, 12000)]
        ref = json.loads(
            json.dumps(evaluate(load_config([*common, f"out_dir={tmp_path / 'ref'}"]), echo=False))
        )
        runs = [chain.result() for chain in chains]
    for out, again in runs:
        assert json.loads(again.stdout.splitlines()[-1]) == ref
        assert (
            PredictionLog(out / "predictions.jsonl").rows()
            == PredictionLog(tmp_path / "ref" / "predictions.jsonl").rows()
        )


def _full_then_room(
    common: list[str], tmp_path: Path, budget: int
) -> tuple[Path, subprocess.CompletedProcess]:
    """``eval.run`` into ``out<budget>`` with room for ``budget`` bytes there: exit 2, one line, every
    file left whole; then the same command with room, which must succeed: (out, that rerun)."""
    out = tmp_path / f"out{budget}"
    full = _full_disk_run("eval.run", [*common, f"out_dir={out}"], out, budget)
    assert full.returncode == 2, full.stderr[-3000:]
    (line,) = _errors(full)
    assert line.startswith(f"eval.run: no space left writing in {out};") and f"free in {out}" in line
    assert "Traceback" not in full.stderr
    _all_whole(out)
    again = _full_disk_run("eval.run", [*common, f"out_dir={out}"], out, None)
    assert again.returncode == 0, again.stderr
    return out, again


def test_a_full_disk_in_the_frames_command_is_one_line_naming_the_cache(toy_dir, tmp_path):
    """``python -m data_builders frames`` (compressed entries) on a disk with room for about one
    entry: exit 2, one line naming the cache folder, no partial entry; with room, the rerun completes."""
    cache = tmp_path / "frames"
    args = [f"records={toy_dir / 'records.jsonl'}", "render=toy", "render.frame_format=jpeg90"]
    args += [f"paths.frame_cache_dir={cache}", "workers=1"]
    full = _full_disk_run("data_builders", ["frames", *args], cache, 30_000)
    assert full.returncode == 2, full.stderr[-3000:]
    (line,) = _errors(full)
    assert line.startswith(f"frames failed: no space left on device writing the frame cache in {cache} ")
    assert re.search(r"\. [12] of 8 clips are cached", line) and "Traceback" not in full.stderr
    left = [p for p in cache.rglob("*") if p.is_file()]
    assert left and all(p.suffix == ".frames" for p in left)  # whole entries only
    again = _full_disk_run("data_builders", ["frames", *args], cache, None)
    assert again.returncode == 0, again.stderr
    summary = json.loads(again.stdout.splitlines()[-1])
    assert (summary["clips"], summary["failed"]) == (8, 0) and len(list(cache.rglob("*.frames"))) == 8


def test_eval_run_into_a_read_only_folder_is_one_line_and_keeps_the_evaluation(
    tiny_checkpoint, toy_dir, tmp_path
):
    """Was ``OSError: [Errno 30]`` and a traceback: ``python -m eval.run`` into a read-only output
    folder that holds an evaluation ends with one line naming the folder and the reason, exit 2; the
    evaluation there stays byte for byte."""
    from tests.conftest import read_only_run

    out = tmp_path / "out"
    args = [*overrides(tiny_checkpoint, toy_dir / "records.jsonl", tmp_path, "limit=1"), "view=false"]
    evaluate(load_config([*args, f"out_dir={out}"]), echo=False)
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert "metrics.json" in {p.name for p in before}
    done = read_only_run("eval.run", [*args, "threshold=0.3", f"out_dir={out}"], out)
    assert done.returncode == 2 and done.stdout == "", done.stderr[-3000:]
    assert _errors(done) == [
        f"eval.run: cannot write in {out} ({out / '.lock'}): read-only file system: {PREDICTIONS_KEPT}; make "
        "it writable (or give another folder) and rerun the same command to go on"
    ]
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


#: What ``eval.run`` says of the files it wrote before a refused write.
PREDICTIONS_KEPT = "predictions.jsonl holds whole lines only, every other file is whole"
