"""Defaults live in the typed schema only: a root YAML (``conf/*.yaml``) or a group option
(``conf/<group>/*.yaml``) says only what differs from its schema's default.

A key whose value restates the schema default is a second copy of one fact: the two drift apart
the day one is edited. Interpolations (``${paths.runs_dir}/${run_name}``) are wiring the schema
cannot hold and never equal a default, so they are not counted. Experiment and debug options are
override files of a root (what they restate is the point of the override) and are not checked. A
source's options (``conf/source/<name>.yaml``, at the top of the build config) are checked against
its config dataclass, which ``data_builders.config`` stores as the option's defaults.
"""

from __future__ import annotations

from dataclasses import MISSING, fields, is_dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchmarks.config import BenchmarkConfig
from data_builders.config import BuildConfig, PathsConfig, RenderConfig
from data_builders.mixture import MixtureConfig
from data_builders.sources import SOURCES
from engine.config import ModelConfig
from engine.memory.config import MemoryConfig
from infra.tracking import LoggerConfig
from pipeline.config import SCHEMAS
from train.grpo.config import RewardConfig

CONF = Path(__file__).resolve().parents[1] / "conf"
#: Root name -> schema (``build.yaml``'s common keys; the source adds its own).
ROOT_SCHEMAS: dict[str, type] = {**SCHEMAS, "build": BuildConfig}
#: Group folder -> the schema of its options.
GROUP_SCHEMAS: dict[str, type] = {
    "paths": PathsConfig,
    "model": ModelConfig,
    "data": MixtureConfig,
    "logger": LoggerConfig,
    "render": RenderConfig,
    "benchmark": BenchmarkConfig,
    "memory": MemoryConfig,
    "reward": RewardConfig,
}
NOT_CONFIG = {"defaults", "hydra"}


def _default(f: Any) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return MISSING


def _same(value: Any, default: Any) -> bool:
    if isinstance(value, bool) != isinstance(default, bool):
        return False
    return value == default and type(value) in (type(default), int, float) or value is default is None


def restated(node: dict, schema: type, prefix: str = "") -> list[str]:
    """The dotted keys of ``node`` whose value is the default of their ``schema`` field (nested
    dataclass blocks are walked; a free-form dict or a list counts only as a whole)."""
    out: list[str] = []
    by_name = {f.name: f for f in fields(schema)}
    for key, value in node.items():
        f = by_name.get(key)
        if f is None or key in NOT_CONFIG:
            continue  # unknown keys fail validation (tests/test_config.py)
        default = _default(f)
        if is_dataclass(default) and isinstance(value, dict):
            out += restated(value, type(default), f"{prefix}{key}.")
        elif default is not MISSING and _same(value, default):
            out.append(f"{prefix}{key}")
    return out


def _files() -> list[tuple[Path, type]]:
    files = [(CONF / f"{root}.yaml", schema) for root, schema in ROOT_SCHEMAS.items()]
    for group, schema in GROUP_SCHEMAS.items():
        files += [(path, schema) for path in sorted((CONF / group).glob("*.yaml"))]
    files += [(path, SOURCES.get(path.stem).config) for path in sorted((CONF / "source").glob("*.yaml"))]
    return files


def all_restated() -> dict[str, list[str]]:
    """Every checked file (relative to ``conf/``) -> its restated keys."""
    found = {}
    for path, schema in _files():
        keys = restated(yaml.safe_load(path.read_text()) or {}, schema)
        if keys:
            found[str(path.relative_to(CONF))] = keys
    return found


def test_every_root_and_group_file_is_checked():
    names = {str(p.relative_to(CONF)) for p, _ in _files()}
    assert {"sft.yaml", "grpo.yaml", "eval.yaml", "watch.yaml", "build.yaml", "model/tiny.yaml"} <= names
    assert {"source/toy.yaml", "source/jsonl.yaml"} <= names
    assert len(names) == len(set(CONF.glob("*.yaml"))) + sum(
        len(list((CONF / g).glob("*.yaml"))) for g in (*GROUP_SCHEMAS, "source")
    )


def test_the_counter_finds_a_restated_key():
    assert restated({"sft": {"seed": 0, "learning_rate": 1e-3}, "run_name": "x"}, SCHEMAS["sft"]) == [
        "sft.seed"
    ]
    assert restated({"grpo": {"eval_split": "val", "bf16": "auto", "beta": 0.1}}, SCHEMAS["grpo"]) == [
        "grpo.eval_split",
        "grpo.bf16",
    ]
    assert restated({"dtype": "bfloat16", "freeze_vision": True, "seed": False}, ModelConfig) == [
        "freeze_vision"
    ]


@pytest.mark.parametrize("path", sorted({str(p.relative_to(CONF)) for p, _ in _files()}))
def test_no_yaml_key_restates_a_schema_default(path):
    keys = all_restated().get(path, [])
    assert not keys, f"conf/{path} restates {len(keys)} schema default(s), drop them: {', '.join(keys)}"
