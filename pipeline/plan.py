"""The memory and time plan of a stage's config, before anything runs: one JSON line.

    python -m pipeline.plan stage=sft experiment=p3i_4b_sft data.dir=/data/mix_p3i gpu_memory_gb=80 nodes=2
    python -m pipeline.plan stage=sft experiment=p3i_4b_sft data.dir=/data/mix_p3i gpu_memory_gb=80 gpus=1
    python -m pipeline.plan stage=grpo experiment=p3i_4b_grpo gpu_memory_gb=80 gpus=8
    python -m pipeline.plan stage=eval model=qwen3_vl_4b benchmark=p3i records=/data/built/p3i gpu_memory_gb=80 gpus=1

``stage``, ``gpu_memory_gb``, ``gpus``, ``nodes``, ``gpus_per_node`` and ``zero`` are this command's
own, typed and bounded by :class:`PlanOptions` (a whole ``gpus`` of at least 1, ``zero`` 0 to 3, a
finite positive ``gpu_memory_gb``). ``nodes=N`` plans ``gpus = N x gpus_per_node`` (8 unless given);
a ``gpus`` that disagrees with them is refused. ``zero`` is the DeepSpeed ZeRO stage: by default 2
for a training stage on several GPUs, as ``slurm/sft.sh`` and ``slurm/grpo.sh`` launch them, and 0
(one process without DeepSpeed, ``python -m train.sft``) on one GPU and for eval; ``zero=2`` on one
GPU is ``slurm/sft.sh --gpus=1``, whose fp32 master weights and moments have no GPU to share them.
Every other argument is an override of that stage's root (``conf/sft.yaml``, ``conf/grpo.yaml``,
``conf/eval.yaml``). The figures (``engine.preflight.plan``): the peak memory per GPU (weights,
gradients, optimizer states, activations of the longest window, the KV cache), the rate, the steps,
the run's GPU-hours and its wall-clock hours on those GPUs, each ``{"value", "kind":
measured|estimated, "source"}``; ``fits`` and the ``biggest`` term. A plan that does not fit says
what to change in ``advice`` (each ``try`` with the peak it gives). It runs the stage's other
pre-flight checks on the config alone (splits); the stages run all of them at start on a GPU. Exit 2
with one line on a bad override or a failed check; a plan that does not fit still prints its line,
with ``fits: false``, and exits 1.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass

from omegaconf import OmegaConf

from engine.checkpoints import render_overrides
from engine.preflight import check_stage, plan
from infra.entry import explain, front_door, refuse, split_argv
from infra.registry import Registry
from infra.schema import bounded, typed
from pipeline.config import SCHEMAS

#: The stages planned -> their pre-flight (checks, plan, checkpoint key), defined with the stage; each
#: composes its own root, ``conf/<stage>.yaml``, typed by ``pipeline.config.SCHEMAS``.
PREFLIGHT = Registry(
    "stage pre-flight",
    {"sft": "train.preflight:SFT", "grpo": "train.preflight:GRPO", "eval": "eval.preflight:EVAL"},
)


@dataclass
class PlanOptions:
    """This command's own keys, checked by ``infra.schema.typed``: a mistyped, out-of-range, NaN or
    infinite value ends the command with one line naming the key (exit 2)."""

    stage: str | None = None
    gpu_memory_gb: float = bounded(80.0, gt=0, le=1e6)
    """Memory of one GPU, in GB."""
    gpus: int = bounded(1, ge=1, le=1_000_000)
    """GPUs in all (``nodes x gpus_per_node`` when ``nodes`` is given)."""
    nodes: int | None = bounded(None, ge=1, le=100_000)
    gpus_per_node: int = bounded(8, ge=1, le=1024)
    """GPUs of each node when ``nodes`` is given (8: the sbatch lines' ``--gpus-per-node=8``)."""
    zero: int | None = bounded(None, ge=0, le=3)
    """The DeepSpeed ZeRO stage (None: 2 for a training stage on several GPUs, 0 on one GPU and for eval)."""


def parse(argv: list[str]) -> tuple[dict, list[str]]:
    """(this command's own keys, the stage overrides)."""
    given, rest = {}, []
    for arg in argv:
        key, _, value = arg.partition("=")
        if key in PlanOptions.__dataclass_fields__ and value:
            given[key] = value
        else:
            rest.append(arg)
    try:
        own = asdict(typed(PlanOptions, given, "pipeline.plan"))
    except ValueError as exc:
        refuse("pipeline.plan", explain(exc, PlanOptions))
    if own["stage"] not in PREFLIGHT:
        refuse("pipeline.plan", f"give stage={'|'.join(PREFLIGHT.names())} (got {own['stage']})")
    if own["nodes"] is not None:
        total = own["nodes"] * own["gpus_per_node"]
        if "gpus" in given and own["gpus"] != total:
            refuse(
                "pipeline.plan",
                f"gpus={own['gpus']} but nodes={own['nodes']} x gpus_per_node={own['gpus_per_node']} = {total}: "
                "give one of them",
            )
        own["gpus"] = total
    if own["zero"] is None:
        own["zero"] = 0 if own["stage"] == "eval" or own["gpus"] == 1 else 2
    return own, rest


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--help" in argv or "-h" in argv:
        print(__doc__)
        return 0
    own, overrides = parse(argv)
    stage = own["stage"]
    root, schema, key = stage, SCHEMAS[stage], PREFLIGHT[stage].checkpoint_key
    overrides, printing = split_argv(overrides)
    cfg = front_door(
        "pipeline.plan",
        root,
        schema,
        overrides,
        check=lambda c: check_stage(PREFLIGHT[stage], c, on_disk=False, memory=False),
        transform=(lambda o: render_overrides(o, key=key)) if key else None,
    )
    if printing:  # --cfg job: the stage's composed config the plan reads
        print(OmegaConf.to_yaml(cfg, resolve=True), end="")
        return 0
    result = plan(
        PREFLIGHT[stage], cfg, gpu_memory_gb=own["gpu_memory_gb"], gpus=own["gpus"], zero=own["zero"]
    )
    if own["nodes"] is not None:
        result = {"nodes": own["nodes"], "gpus_per_node": own["gpus_per_node"], **result}
    try:
        line = json.dumps(result, allow_nan=False)
    except ValueError as exc:  # a figure that is NaN or infinite: never printed as such
        refuse("pipeline.plan", f"the plan holds a number that is not finite ({exc}): {result}")
    print(line)
    return 0 if result["fits"] else 1


if __name__ == "__main__":
    sys.exit(main())
