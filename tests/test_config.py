"""Config composition: every root and every group option composes; schemas catch typos and types."""

from __future__ import annotations

import importlib.util
import re
import shlex
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf
from omegaconf.errors import ValidationError

from data_builders.__main__ import source_overrides
from data_builders.config import compose_build
from infra.schema import compose, validate
from pipeline.config import SCHEMAS

CONF = Path(__file__).resolve().parents[1] / "conf"
ROOTS = sorted(p.stem for p in CONF.glob("*.yaml"))
GROUPS = sorted(p.name for p in CONF.iterdir() if p.is_dir() and p.name != "hydra")


def _defaults(root: str) -> list[str]:
    entries = yaml.safe_load((CONF / f"{root}.yaml").read_text()).get("defaults", [])
    names = []
    for e in entries:
        if isinstance(e, dict):
            names += [k.split("@")[0].lstrip("/").replace("override ", "") for k in e]
    return names


def _compose(root: str, overrides: list[str] | None = None):
    if root == "build":  # the build stores the schema of the source it names first (data_builders.config)
        return compose_build(overrides or [])
    if root in SCHEMAS:  # its schema's module stores <root>_schema, the root's first default
        SCHEMAS.get(root)
    return compose(root, overrides or [])


def _entry(path: Path) -> str | None:
    """The module an option's or root's header command runs (``# python -m train.grpo ...``)."""
    for line in path.read_text().splitlines()[:4]:
        if line.startswith("# python -m "):
            return line.split()[3]
    return None


def _entries(path: Path) -> set[str]:
    """Every module the header commands of an option name (``debug=cpu`` serves several roots)."""
    return {entry for entry, _ in header_commands(path)}


def _cases():
    for group in GROUPS:
        for path in sorted((CONF / group).rglob("*.yaml")):
            option = path.stem
            users = [r for r in ROOTS if group in _defaults(r)]
            if group in ("experiment", "debug"):  # an option belongs to the roots whose command it names
                users = [r for r in users if _entry(CONF / f"{r}.yaml") in _entries(path)]
            if users:
                yield from ((r, [f"{group}={option}"]) for r in users)
            else:
                yield ROOTS[0], [f"+{group}={option}"]


#: Entry point (``python -m X`` and its sub-command) -> the root ``conf/<root>.yaml`` it composes.
HYDRA_ENTRIES = {
    "train.sft": "sft",
    "train.grpo": "grpo",
    "pipeline.demo": "demo",
    "eval.run": "eval",
    "eval.watch": "watch",
    "data_builders build": "build",
    "data_builders mix": "mix",
    "data_builders frames": "frames",
    "train.export": "export",
}
#: Entry points that are not Hydra apps: their header commands are checked with ``--help``.
PLAIN_ENTRIES = {"eval.score"}
_COMMAND = re.compile(r"^(?:[A-Za-z ()]+: )?(?:python -m |accelerate launch .*?-m )(\S+)(.*)$")


def header_commands(path: Path) -> list[tuple[str, list[str]]]:
    """The commands of a YAML file's leading comment lines, as (entry, arguments): ``python -m X ARGS``
    and ``accelerate launch ... -m X ARGS`` lines (``\\`` continues a line), their arguments up to a
    ``(remark)``, without ``...`` and ``--cfg job``. A sweep's (``-m``) comma lists keep their first value."""
    lines, joined = [], ""
    for raw in path.read_text().splitlines():
        if not raw.startswith("#"):
            break
        text = raw.lstrip("#").strip()
        joined = f"{joined} {text}".strip() if joined else text
        if joined.endswith("\\"):
            joined = joined[:-1].rstrip()
            continue
        lines.append(joined)
        joined = ""
    out = []
    for line in lines:
        m = _COMMAND.match(line)
        if not m:
            continue
        entry = m.group(1)
        args = shlex.split(m.group(2).split(" (")[0])  # the remark is prose
        if entry == "data_builders":
            entry = f"{entry} {args.pop(0)}"
        sweep = "-m" in args
        args = [a for a in args if a not in ("-m", "--cfg", "job") and a != "..." and not a.endswith("=...")]
        if sweep:
            args = [a.split(",")[0] if "=" in a and "[" not in a else a for a in args]
        out.append((entry, args))
    return out


HEADERS = [
    (str(path.relative_to(CONF)), entry, args)
    for path in sorted(CONF.rglob("*.yaml"))
    for entry, args in header_commands(path)
]


def test_header_commands_are_found():
    found = {(f, e) for f, e, _ in HEADERS}
    assert {
        ("sft.yaml", "train.sft"),
        ("debug/cpu.yaml", "pipeline.demo"),
        ("accelerate/zero3.yaml", "train.sft"),
    } <= found
    assert (
        "data/toy.yaml",
        "data_builders mix",
        ["data=toy", "data.root=data/built", "data.dir=data/toy"],
    ) in HEADERS
    (estp,) = [a for f, _, a in HEADERS if f == "benchmark/estp.yaml" and "benchmark.content=any" not in a]
    assert estp[:3] == ["benchmark=estp", "records=/data/built/estp", "checkpoint=DIR"] and len(estp) > 3
    assert ("eval.yaml", "eval.run", ["checkpoint=DIR", "threshold=0.3"]) in HEADERS  # a sweep's first point
    assert len(HEADERS) >= 60


@pytest.mark.parametrize(
    ("path", "entry", "args"), HEADERS, ids=[f"{f}: {e} {' '.join(a)}" for f, e, a in HEADERS]
)
def test_every_yaml_header_command_composes(path, entry, args):
    """Each command a YAML file's header advertises composes (as ``--cfg job`` would) and validates."""
    if entry in PLAIN_ENTRIES:
        assert importlib.util.find_spec(entry) is not None
        return
    assert entry in HYDRA_ENTRIES, f"conf/{path} advertises {entry}, which composes no conf/ root"
    root = HYDRA_ENTRIES[entry]
    if entry.startswith("data_builders"):  # its command line names a mixture's sources as it reads them
        args = source_overrides(args)
    cfg = _compose(root, args)
    if root in SCHEMAS:
        validate(cfg, SCHEMAS[root])
    else:
        OmegaConf.to_container(cfg, resolve=True)


#: The tiny-run override lists the tests spelt out before conf/debug/tiny.yaml, and what they pass now.
TINY_RUNS = {
    "tests/slurm/test_sweep.py": (
        ["init=random", "grpo.windows_per_step=1", "grpo.num_generations=2", "grpo.window_steps=10"]
        + ["grpo.max_new_tokens=4", "grpo.eval_split=null", "grpo.max_steps=1", "grpo.num_threads=1"],
        ["debug=tiny"],
    ),
    "tests/train/test_grpo_run.py": (
        ["init=random", "grpo.windows_per_step=1", "grpo.num_generations=2", "grpo.window_steps=10"]
        + ["grpo.max_new_tokens=4", "grpo.eval_split=null", "grpo.learning_rate=1e-3", "grpo.max_steps=3"],
        ["debug=tiny", "grpo.learning_rate=1e-3", "grpo.num_threads=null", "grpo.max_steps=3"],
    ),
    "tests/slurm/test_preemption.py": (
        ["init=random", "grpo.windows_per_step=1", "grpo.num_generations=2", "grpo.window_steps=10"]
        + ["grpo.max_new_tokens=4", "grpo.eval_split=null", "grpo.num_threads=1", "grpo.save_every=1000"]
        + ["grpo.max_steps=500"],
        ["debug=tiny", "grpo.save_every=1000", "grpo.max_steps=500"],
    ),
    "tests/train/test_init_checkpoints.py": (
        ["init=/ckpt", "grpo.max_steps=1", "grpo.windows_per_step=1", "grpo.num_generations=2"]
        + ["grpo.window_steps=6", "grpo.max_new_tokens=2", "grpo.eval_split=null", "grpo.save_every=0"]
        + ["grpo.num_threads=2"],
        ["init=/ckpt", "debug=tiny", "grpo.window_steps=6", "grpo.max_new_tokens=2", "grpo.save_every=0"]
        + ["grpo.num_threads=2"],
    ),
}


@pytest.mark.parametrize("test_file", sorted(TINY_RUNS))
def test_debug_tiny_gives_the_tiny_runs_their_old_config(test_file):
    spelt_out, now = TINY_RUNS[test_file]
    before = validate(_compose("grpo", ["data.dir=/d", *spelt_out]), SCHEMAS["grpo"])
    after = validate(_compose("grpo", ["data.dir=/d", *now]), SCHEMAS["grpo"])
    assert after == before
    assert (after.grpo.num_generations, after.grpo.windows_per_step, after.grpo.eval_split) == (2, 1, None)
    plain = validate(_compose("grpo", ["data.dir=/d", "init=random"]), SCHEMAS["grpo"])
    assert plain != after and plain.grpo.num_generations == 4


def test_debug_cpu_composes_for_the_demo():
    """``python -m pipeline.demo debug=cpu`` (conf/debug/cpu.yaml's command) composes and validates."""
    cfg = validate(_compose("demo", ["debug=cpu"]), SCHEMAS["demo"])
    assert (cfg.model.dtype, cfg.logger.mode) == ("float32", "disabled")


def test_there_are_roots_and_groups():
    assert "demo" in ROOTS
    assert {"model", "paths", "logger", "debug"} <= set(GROUPS)


@pytest.mark.parametrize("root", ROOTS)
def test_every_root_composes_and_validates(root):
    first = (CONF / f"{root}.yaml").read_text().splitlines()[0]
    assert first.startswith("# python -m") or first.startswith("# sbatch"), (
        f"{root}.yaml must open with its command"
    )
    cfg = _compose(root)
    OmegaConf.to_container(cfg, resolve=True)
    if root in SCHEMAS:
        validate(cfg, SCHEMAS[root])


@pytest.mark.parametrize(
    ("root", "overrides"), list(_cases()), ids=lambda v: v if isinstance(v, str) else " ".join(v)
)
def test_every_group_option_composes(root, overrides):
    cfg = _compose(root, overrides)
    OmegaConf.to_container(cfg, resolve=True)
    if root in SCHEMAS and not overrides[0].startswith("+"):
        validate(cfg, SCHEMAS[root])


def test_group_options_open_with_a_command():
    for path in CONF.rglob("*.yaml"):
        head = path.read_text().lstrip().splitlines()[:3]
        assert any(line.startswith("#") for line in head), (
            f"{path} should open with a comment showing its use"
        )


def test_schema_rejects_wrong_type_and_unknown_key():
    cfg = _compose("demo", ["demo.n_streams=many"])
    with pytest.raises(ValidationError, match="n_streams"):
        validate(cfg, SCHEMAS["demo"])
    cfg = _compose("demo")
    OmegaConf.set_struct(cfg, False)
    cfg.demo.n_streem = 3
    with pytest.raises(Exception, match="n_streem"):
        validate(cfg, SCHEMAS["demo"])


def test_eval_score_flags_are_the_scoring_schema():
    """``python -m eval.score``'s scoring flags are derived from ``ScoringConfig`` (the benchmark
    config's scoring keys): the same flags as before, parsed into the same settings a benchmark gives."""
    import argparse

    from benchmarks.config import BenchmarkConfig
    from benchmarks.runners import get_runner
    from benchmarks.scoring.options import add_scoring_flags
    from eval.score import parse_args, settings_from_args

    parser = argparse.ArgumentParser()
    add_scoring_flags(parser)
    flags = {s for a in parser._actions for s in a.option_strings} - {"-h", "--help"}
    assert flags == {
        "--content",
        "--label-fallback",
        "--alpha",
        "--tolerance",
        "--dataset",
        "--embedding-model",
        "--judge-backend",
        "--judge-url",
        "--judge-model",
        "--judge-key-env",
        "--judge-cache",
        "--judge-timeout",
    }
    args = parse_args(["--protocol", "p3i", "--gt", "g", "--pred", "p", "--label-fallback", "judge"])
    args_settings = settings_from_args(args)
    assert (args_settings.open_content, args_settings.alpha, args_settings.judge_timeout) == (
        "judge",
        0.05,
        60.0,
    )
    bench = BenchmarkConfig(open_content="judge")
    assert get_runner("p3i").settings(bench) == args_settings
    with pytest.raises(SystemExit):
        parse_args(["--protocol", "p3i", "--gt", "g", "--pred", "p", "--content", "nope"])
