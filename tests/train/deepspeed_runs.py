"""One-process DeepSpeed runs of SFT and GRPO on the tiny model (``accelerate launch``, gloo on CPU):
the launch, and the fixture ``deepspeed_checkpoint`` (tests/train/conftest.py) that writes each
stage's 1-step checkpoint once per session for the files that read one (test_deepspeed_resume.py,
test_export.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from engine.checkpoints import complete_checkpoints
from tests.conftest import free_port

ROOT = Path(__file__).resolve().parents[2]


def launch(stage: str, zero: str, toy: Path, run: Path, steps: int) -> subprocess.CompletedProcess:
    """``accelerate launch`` of ``stage`` (``sft`` or ``grpo``) under ``conf/accelerate/<zero>.yaml``,
    one process, on the toy mixture under ``toy``, for ``steps`` steps saving every step."""
    exe = shutil.which("accelerate", path=str(Path(sys.executable).parent)) or "accelerate"
    cmd = [exe, "launch", "--config_file", f"conf/accelerate/{zero}.yaml", "--num_processes", "1"]
    cmd += ["--main_process_port", str(free_port())]
    if stage == "sft":
        cmd += [
            "-m",
            "train.sft",
            "experiment=toy_sft",
            f"paths.data_dir={toy}",
            f"paths.cache_dir={toy / 'cache'}",
            f"sft.output_dir={run}",
            f"sft.max_steps={steps}",
            "sft.save_steps=1",
            "sft.per_device_batch_size=2",
            "sft.logging_steps=1",
            "sft.time_budget_s=null",
            "sft.num_threads=1",
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


def first_checkpoint(stage: str, zero: str, toy: Path, run: Path) -> Path:
    """Launch a 1-step run into ``run`` and check it wrote one complete ``checkpoint-1``."""
    out = launch(stage, zero, toy, run, steps=1)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    if stage == "grpo":
        assert f"DeepSpeed ZeRO-{zero[-1]}" in out.stderr
    assert [c.name for c in complete_checkpoints(run)] == ["checkpoint-1"]
    return run
