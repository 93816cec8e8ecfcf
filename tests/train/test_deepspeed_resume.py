"""``resume=auto`` under DeepSpeed runs no code from a checkpoint, for SFT and GRPO, ZeRO-2 and ZeRO-3.

Each stage writes one 1-step checkpoint per ZeRO level (``accelerate launch``, one process, gloo on
CPU). A copy of it gets a pickle planted in the model states file or in the rank's optimizer
partition, whose loading would write a marker file; the resumed run must refuse it, name the file,
leave the marker unwritten and the checkpoint as it was. The honest checkpoint resumes to step 2."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from eval.engine.checkpoints import complete_checkpoints

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
RUNS = [(stage, zero) for stage in ("sft", "grpo") for zero in ("zero2", "zero3")]


class Payload:
    """Pickles as a call of ``exec`` that writes ``marker``: what a planted checkpoint would run."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"open({str(self.marker)!r}, 'w').write('ran')",))


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> Path:
    from data_builders.mixture import build_toy_mixture

    root = tmp_path_factory.mktemp("ds_resume")
    build_toy_mixture(root / "built", root / "toy", n=8, seed=0)
    return root


def launch(stage: str, zero: str, toy: Path, run: Path, steps: int) -> subprocess.CompletedProcess:
    exe = shutil.which("accelerate", path=str(Path(sys.executable).parent)) or "accelerate"
    cmd = [exe, "launch", "--config_file", f"conf/accelerate/{zero}.yaml", "--num_processes", "1"]
    if stage == "sft":
        cmd += [
            "-m",
            "train.sft",
            "experiment=toy_sft",
            f"paths.data_dir={toy}",
            f"paths.cache_dir={toy / 'cache'}",
            f"train.output_dir={run}",
            f"train.max_steps={steps}",
            "train.save_steps=1",
            "train.per_device_batch_size=2",
            "train.logging_steps=1",
            "train.time_budget_s=null",
            "train.num_threads=1",
        ]
    else:
        cmd += [
            "-m",
            "train.grpo",
            "init=random",
            f"paths.root_dir={toy}",
            f"paths.cache_dir={toy / 'cache'}",
            f"data.dir={toy / 'toy'}",
            f"grpo.output_dir={run}",
            f"grpo.max_steps={steps}",
            "grpo.windows_per_step=1",
            "grpo.num_generations=2",
            "grpo.window_steps=4",
            "grpo.max_new_tokens=2",
            "grpo.eval_split=null",
            "grpo.num_threads=1",
        ]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module", params=RUNS, ids=["-".join(r) for r in RUNS])
def written(request, toy, tmp_path_factory) -> tuple[str, str, Path]:
    """(stage, zero level, run dir holding the honest ``checkpoint-1``)."""
    stage, zero = request.param
    run = tmp_path_factory.mktemp(f"{stage}_{zero}") / "run"
    out = launch(stage, zero, toy, run, steps=1)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    if stage == "grpo":
        assert f"DeepSpeed ZeRO-{zero[-1]}" in out.stderr
    assert [c.name for c in complete_checkpoints(run)] == ["checkpoint-1"]
    return stage, zero, run


def checkpoint_files(run: Path) -> list[Path]:
    return sorted(p.relative_to(run) for p in run.glob("checkpoint-*/**/*"))


def copy_run(written, tmp_path: Path) -> tuple[str, str, Path]:
    stage, zero, pristine = written
    run = tmp_path / "run"
    shutil.copytree(pristine, run)
    return stage, zero, run


#: The file planted in each run: every stage, every ZeRO level and both files, each pair once (a
#: covering design of the 8 combinations in 4 runs; the guard is one code path for every file).
PLANTED = {
    ("sft", "zero2"): "model_states",
    ("sft", "zero3"): "optim_states",
    ("grpo", "zero2"): "optim_states",
    ("grpo", "zero3"): "model_states",
}


def test_a_planted_pickle_is_refused_on_resume_and_nothing_runs(written, toy, tmp_path):
    stage, zero, run = copy_run(written, tmp_path)
    part = PLANTED[(stage, zero)]
    (target,) = (run / "checkpoint-1").rglob(f"*{part}.pt")  # ZeRO-2 / ZeRO-3 names differ
    state = torch.load(target, weights_only=False)  # the honest file this module's own run wrote
    marker = tmp_path / "marker"
    state["note"] = Payload(marker)
    torch.save(state, target)
    before = checkpoint_files(run)

    out = launch(stage, zero, toy, run, steps=2)
    assert not marker.exists(), f"{target.name}'s code ran on resume ({stage}, {zero})"
    assert out.returncode != 0
    output = out.stdout + out.stderr
    assert f"{target}: refused to load: it calls or builds builtins.exec" in output, output[-3000:]
    assert checkpoint_files(run) == before
    assert [c.name for c in complete_checkpoints(run)] == ["checkpoint-1"]


def test_an_honest_checkpoint_resumes(written, toy, tmp_path):
    stage, zero, run = copy_run(written, tmp_path)
    out = launch(stage, zero, toy, run, steps=2)
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
