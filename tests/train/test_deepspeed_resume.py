"""``resume=auto`` under DeepSpeed runs no code from a checkpoint, for SFT and GRPO, ZeRO-2 and ZeRO-3.

Each stage writes one 1-step checkpoint per ZeRO level (``accelerate launch``, one process, gloo on
CPU; the session's ``deepspeed_checkpoint``, tests/train/conftest.py). A copy of it gets a pickle planted in the model states file or in the rank's optimizer
partition, whose loading would write a marker file; the resumed run must refuse it, name the file,
leave the marker unwritten and the checkpoint as it was. The honest checkpoint resumes to step 2
(GRPO under ZeRO-2: tests/train/test_grpo_distributed.py's USR1 test)."""

from __future__ import annotations

import json
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from engine.checkpoints import complete_checkpoints
from tests.train.deepspeed_runs import launch

pytestmark = pytest.mark.slow
RUNS = [(stage, zero) for stage in ("sft", "grpo") for zero in ("zero2", "zero3")]


@pytest.fixture(scope="module", autouse=True)
def _checkpoints_at_once(deepspeed_checkpoint):
    """The four honest 1-step checkpoints this file copies, launched at once (four independent
    processes, each checked by ``first_checkpoint``) rather than one by one as the tests first ask."""
    with ThreadPoolExecutor(max_workers=len(RUNS)) as pool:
        list(pool.map(lambda run: deepspeed_checkpoint(*run), RUNS))


class Payload:
    """Pickles as a call of ``exec`` that writes ``marker``: what a planted checkpoint would run."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"open({str(self.marker)!r}, 'w').write('ran')",))


def checkpoint_files(run: Path) -> list[Path]:
    return sorted(p.relative_to(run) for p in run.glob("checkpoint-*/**/*"))


def copy_run(deepspeed_checkpoint, stage: str, zero: str, tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(deepspeed_checkpoint(stage, zero), run)
    return run


#: The file planted in each run: every stage, every ZeRO level and both files, each pair once (a
#: covering design of the 8 combinations in 4 runs; the guard is one code path for every file).
PLANTED = {
    ("sft", "zero2"): "model_states",
    ("sft", "zero3"): "optim_states",
    ("grpo", "zero2"): "optim_states",
    ("grpo", "zero3"): "model_states",
}


@pytest.mark.parametrize(("stage", "zero"), RUNS, ids=["-".join(r) for r in RUNS])
def test_a_planted_pickle_is_refused_on_resume_and_nothing_runs(
    deepspeed_checkpoint, stage, zero, deepspeed_toy, tmp_path
):
    run = copy_run(deepspeed_checkpoint, stage, zero, tmp_path)
    part = PLANTED[(stage, zero)]
    (target,) = (run / "checkpoint-1").rglob(f"*{part}.pt")  # ZeRO-2 / ZeRO-3 names differ
    state = torch.load(target, weights_only=False)  # the honest file this module's own run wrote
    marker = tmp_path / "marker"
    state["note"] = Payload(marker)
    torch.save(state, target)
    before = checkpoint_files(run)

    out = launch(stage, zero, deepspeed_toy, run, steps=2)
    assert not marker.exists(), f"{target.name}'s code ran on resume ({stage}, {zero})"
    assert out.returncode != 0
    output = out.stdout + out.stderr
    assert f"{target}: refused to load: it calls or builds builtins.exec" in output, output[-3000:]
    assert checkpoint_files(run) == before
    assert [c.name for c in complete_checkpoints(run)] == ["checkpoint-1"]


#: GRPO under ZeRO-2 resumes in tests/train/test_grpo_distributed.py (the USR1 test: a 2-rank ZeRO-2
#: checkpoint continued by the rerun, no update repeated), a stronger check of the same resume path.
HONEST = [run for run in RUNS if run != ("grpo", "zero2")]


@pytest.mark.parametrize(("stage", "zero"), HONEST, ids=["-".join(r) for r in HONEST])
def test_an_honest_checkpoint_resumes(deepspeed_checkpoint, stage, zero, deepspeed_toy, tmp_path):
    run = copy_run(deepspeed_checkpoint, stage, zero, tmp_path)
    out = launch(stage, zero, deepspeed_toy, run, steps=2)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    ckpt, output = run / "checkpoint-1", out.stdout + out.stderr
    if stage == "sft":
        assert f"resuming from {ckpt}" in output
        state = json.loads((run / "checkpoint-2" / "trainer_state.json").read_text())
        assert state["global_step"] == 2 and (run / "checkpoint-2" / "global_step2").is_dir()
    else:
        assert f"resumed from {ckpt} at update 1" in output
        rows = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
        assert [row["step"] for row in rows] == [1, 2]  # continued from update 1, none repeated
    assert [c.name for c in complete_checkpoints(run)][-1] == "checkpoint-2"
