"""The memory and time plan of a stage's config, before anything runs: one JSON line.

    python -m pipeline.plan stage=sft experiment=p3i_4b_sft data.dir=/data/mix_p3i gpu_memory_gb=80 gpus=16
    python -m pipeline.plan stage=grpo experiment=p3i_4b_grpo gpu_memory_gb=80 gpus=8
    python -m pipeline.plan stage=eval model=qwen3_vl_4b benchmark=p3i records=/data/built/p3i gpu_memory_gb=80 gpus=1

``stage``, ``gpu_memory_gb``, ``gpus`` and ``zero`` (the DeepSpeed ZeRO stage; default 2 for the
training stages, as ``slurm/sft.sh`` and ``slurm/grpo.sh`` launch them, 0 for eval) are this command's
own; every other argument is an override of that stage's root (``conf/sft.yaml``, ``conf/grpo.yaml``,
``conf/eval.yaml``). The figures (``engine.preflight.plan``): the peak memory per GPU (weights,
gradients, optimizer states, activations of the longest window, the KV cache), the rate, the steps and
the run's GPU-hours, each ``{"value", "kind": measured|estimated, "source"}``; ``fits`` and the
``biggest`` term. It runs the stage's other pre-flight checks on the config alone (splits); the
stages run all of them at start on a GPU. Exit 2 with one line on a bad override or a failed check;
a plan that does not fit still prints its line, with ``fits: false``, and exits 1.
"""

from __future__ import annotations

import json
import sys

from omegaconf import OmegaConf

from engine.checkpoints import render_overrides
from engine.preflight import check_stage, plan
from eval.config import EvalConfig
from infra.entry import front_door, refuse, split_argv
from train.grpo.config import GRPOConfig
from train.sft.config import SFTConfig

#: stage -> (root config, schema, the key whose checkpoint's render block the stage composes at).
STAGES = {
    "sft": ("sft", SFTConfig, None),
    "grpo": ("grpo", GRPOConfig, "init"),
    "eval": ("eval", EvalConfig, "checkpoint"),
}

OWN = {"stage": str, "gpu_memory_gb": float, "gpus": int, "zero": int}


def parse(argv: list[str]) -> tuple[dict, list[str]]:
    """(this command's own keys, the stage overrides)."""
    own = {"stage": None, "gpu_memory_gb": 80.0, "gpus": 1, "zero": None}
    rest = []
    for arg in argv:
        key, _, value = arg.partition("=")
        if key in OWN and value:
            try:
                own[key] = OWN[key](value)
            except ValueError:
                refuse("pipeline.plan", f"{arg}: not a number")
        else:
            rest.append(arg)
    if own["stage"] not in STAGES:
        refuse("pipeline.plan", f"give stage={'|'.join(STAGES)} (got {own['stage']})")
    if own["zero"] is None:
        own["zero"] = 0 if own["stage"] == "eval" else 2
    return own, rest


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--help" in argv or "-h" in argv:
        print(__doc__)
        return 0
    own, overrides = parse(argv)
    stage = own["stage"]
    root, schema, key = STAGES[stage]
    overrides, printing = split_argv(overrides)
    cfg = front_door(
        "pipeline.plan",
        root,
        schema,
        overrides,
        check=lambda c: check_stage(stage, c, on_disk=False, memory=False),
        transform=(lambda o: render_overrides(o, key=key)) if key else None,
    )
    if printing:  # --cfg job: the stage's composed config the plan reads
        print(OmegaConf.to_yaml(cfg, resolve=True), end="")
        return 0
    result = plan(stage, cfg, gpu_memory_gb=own["gpu_memory_gb"], gpus=own["gpus"], zero=own["zero"])
    print(json.dumps(result))
    return 0 if result["fits"] else 1


if __name__ == "__main__":
    sys.exit(main())
