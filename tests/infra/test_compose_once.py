"""Each command composes its config once and checks it once (issue 59, item 4).

Every command is run in-process on its real command line up to the point where its work starts (the
first function that loads or writes data), with Hydra's composition of a root, the schema
validation and the stage checks counted as they are called (each counter calls the real function):
one composition, one validation, one call of each check, whichever path the command takes.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest


class Reached(BaseException):
    """The command reached its work (raised past Hydra, which catches ``Exception``)."""


@pytest.fixture
def calls(monkeypatch):
    """``count(owner, name, key)``: ``owner.name`` wrapped to count its calls under ``key``."""
    counts: Counter = Counter()

    def count(owner, name: str, key: str) -> None:
        real = getattr(owner, name, None)
        if real is None:  # a module that does not call it
            return

        def counting(*args, **kwargs):
            counts[key] += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, name, counting)

    from hydra._internal.hydra import Hydra

    import infra.entry
    import infra.schema

    count(Hydra, "compose_config", "compose")  # every composition of a root, hydra.main's too
    for module in (infra.schema, infra.entry):
        count(module, "validate", "validate")
    counts.count = count
    return counts


def _reach(monkeypatch, owner, name: str) -> None:
    def reached(*args, **kwargs):
        raise Reached(name)

    monkeypatch.setattr(owner, name, reached)


def _run(monkeypatch, main, argv: list[str]) -> None:
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(Reached):
        main()


def _toy_data(root: Path) -> None:
    for split in ("train", "val", "test"):
        (root / "data" / "toy" / split).mkdir(parents=True)


def test_train_sft_composes_once_and_checks_once(tmp_path, monkeypatch, calls):
    import train.sft.run as sft

    _toy_data(tmp_path)
    calls.count(sft, "validate", "validate")
    calls.count(sft, "check_stage", "check_stage")
    _reach(monkeypatch, sft, "_train")
    _run(
        monkeypatch,
        sft.main,
        ["train.sft", f"paths.root_dir={tmp_path}", f"sft.output_dir={tmp_path / 'run'}"],
    )
    assert dict(calls) == {"compose": 1, "validate": 1, "check_stage": 1}


def test_train_grpo_composes_once_and_checks_once(tmp_path, monkeypatch, calls):
    import train.grpo.run as grpo

    _toy_data(tmp_path)
    calls.count(grpo, "validate", "validate")
    for check in ("check_stage", "check_config", "check_choices"):
        calls.count(grpo, check, check)
    _reach(monkeypatch, grpo, "_start")
    argv = ["train.grpo", "init=random", f"paths.root_dir={tmp_path}", f"grpo.output_dir={tmp_path / 'run'}"]
    _run(monkeypatch, grpo.main, argv)
    assert dict(calls) == {
        "compose": 1,
        "validate": 1,
        "check_stage": 1,
        "check_config": 1,
        "check_choices": 1,
    }


def test_eval_run_composes_once_and_checks_once(tmp_path, monkeypatch, calls):
    import eval.run as run

    records = tmp_path / "records.jsonl"
    records.write_text("")
    calls.count(run, "validate", "validate")
    calls.count(run, "check_stage", "check_stage")
    _reach(monkeypatch, run, "evaluate")
    _run(
        monkeypatch,
        run.main,
        ["eval.run", "checkpoint=null", f"records={records}", f"paths.root_dir={tmp_path}"],
    )
    assert dict(calls) == {"compose": 1, "validate": 1, "check_stage": 1}


@pytest.mark.parametrize("command", ["mix", "frames"])
def test_data_builders_mix_and_frames_compose_once_and_validate_once(command, tmp_path, monkeypatch, calls):
    import data_builders.__main__ as entry
    import data_builders.cli as cli
    import data_builders.frames as frames

    calls.count(cli, "typed", "validate")
    _reach(monkeypatch, cli, "build_mixture")
    _reach(monkeypatch, frames, "cache_frames")
    args = (
        [f"data.root={tmp_path}", f"data.dir={tmp_path / 'mix'}"]
        if command == "mix"
        else [f"records={tmp_path}"]
    )
    monkeypatch.setattr(sys, "argv", ["data_builders", command, *args])
    with pytest.raises(Reached):
        entry.main()
    assert dict(calls) == {"compose": 1, "validate": 1}


def test_data_builders_build_composes_once_and_checks_once(tmp_path, monkeypatch, calls):
    import data_builders.__main__ as entry
    import data_builders.cli as cli

    calls.count(cli, "split_build_config", "validate")
    _reach(monkeypatch, cli, "_build_locked")
    monkeypatch.setattr(
        sys, "argv", ["data_builders", "build", "source=toy", f"out={tmp_path / 'toy'}", "n=2"]
    )
    with pytest.raises(Reached):
        entry.main()
    assert dict(calls) == {"compose": 1, "validate": 1}


def test_pipeline_plan_composes_once_and_checks_once(calls, capsys):
    import pipeline.plan as plan

    calls.count(plan, "check_stage", "check_stage")
    plan.main(["stage=sft"])
    assert dict(calls) == {"compose": 1, "validate": 1, "check_stage": 1}


def test_train_export_composes_once_and_validates_once(tmp_path, monkeypatch, calls):
    import train.export as export

    calls.count(export, "validate", "validate")
    _reach(monkeypatch, export, "export")
    _run(monkeypatch, export.main, ["train.export", f"checkpoint={tmp_path}", f"out={tmp_path / 'out'}"])
    assert dict(calls) == {"compose": 1, "validate": 1}


@pytest.mark.parametrize("appears_later", [False, True])
def test_eval_watch_composes_once_checks_once_and_takes_the_runs_render(
    appears_later, tmp_path, monkeypatch, calls
):
    """A run dir there at the start gives its render block to the one composition; one that appears
    while the watcher waits gives it to the watch once it exists. Either way: one composition, one
    validation, one pre-flight, and the checkpoints listed at the run's frame size."""
    import threading

    import eval.watch as watch

    _toy_data(tmp_path)
    run_dir = tmp_path / "runs" / "sft"
    listed = []

    def make_run() -> None:  # whole when it appears
        building = tmp_path / "building"
        building.mkdir()
        (building / "render.json").write_text('{"max_pixels": 8192}')
        run_dir.parent.mkdir()
        building.rename(run_dir)

    def listing(cfg, run):
        listed.append(cfg.render.max_pixels)
        raise Reached("pending")

    calls.count(watch, "validate", "validate")
    calls.count(watch, "check_stage", "check_stage")
    monkeypatch.setattr(watch, "pending", listing)
    argv = ["eval.watch", f"run_dir={run_dir}", "poll_s=0.05", f"paths.root_dir={tmp_path}"]
    if appears_later:
        later = threading.Timer(0.3, make_run)
        later.start()
        try:
            _run(monkeypatch, watch.main, [*argv, "run_dir_wait_s=30"])
        finally:
            later.cancel()
    else:
        make_run()
        _run(monkeypatch, watch.main, argv)
    assert dict(calls) == {"compose": 1, "validate": 1, "check_stage": 1}
    assert listed == [8192]
