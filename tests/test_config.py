"""Config composition: every root and every group option composes; schemas catch typos and types."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from omegaconf.errors import ValidationError

from data_builders.schema import validate
from train.config import SCHEMAS

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
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name=root, overrides=overrides or [], return_hydra_config=False)


def _entry(path: Path) -> str | None:
    """The module an option's or root's header command runs (``# python -m train.grpo ...``)."""
    for line in path.read_text().splitlines()[:4]:
        if line.startswith("# python -m "):
            return line.split()[3]
    return None


def _cases():
    for group in GROUPS:
        for path in sorted((CONF / group).rglob("*.yaml")):
            option = path.stem
            users = [r for r in ROOTS if group in _defaults(r)]
            if group == "experiment":  # an experiment belongs to the root whose command it names
                users = [r for r in users if _entry(CONF / f"{r}.yaml") == _entry(path)]
            if users:
                yield from ((r, [f"{group}={option}"]) for r in users)
            else:
                yield ROOTS[0], [f"+{group}={option}"]


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
