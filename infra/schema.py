"""Typed configs: a composed Hydra config merged into its dataclass schema, every value in bounds.

    cfg = validate(composed, SFTConfig)          # unknown key, wrong type, value out of bounds: raise
    options = typed(ToySourceConfig, {"n": 8}, "source=toy")

A schema field declared with :func:`bounded` carries its allowed range (``bounded(0.5, ge=0,
le=1)``); :func:`check_bounds` also refuses every NaN or infinite float, so ``threshold=nan``,
``limit=-1`` or ``alpha=-1`` fail at once, naming the option.

The schema holds every default. :func:`store_schema` registers a root's defaults as the Hydra config
``<root>_schema``, the first entry of ``conf/<root>.yaml``'s defaults list, so the YAML files say only
what differs and the composed config (``--cfg job``) still shows every key. :func:`compose` is the one
way code composes a root outside ``hydra.main``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import field, fields, is_dataclass
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf

#: ``${`` and the backslashes before it: what OmegaConf would read as an interpolation.
_INTERPOLATION = re.compile(r"(\\*)\$\{")


def literal(value: Any) -> Any:
    """``value`` (plain data: dicts, lists, scalars) with every string escaped so that OmegaConf keeps
    it as the text it is: ``${oc.env:KEY}`` stays those characters, never an environment value.

    >>> OmegaConf.create(literal({"a": "${oc.env:HOME}"})).a
    '${oc.env:HOME}'
    """
    if isinstance(value, str):
        return _INTERPOLATION.sub(lambda m: m.group(1) * 2 + "\\${", value)
    if isinstance(value, dict):
        return {k: literal(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [literal(v) for v in value]
    return value


def load_literal(path: str | Path) -> DictConfig:
    """A YAML file written by a run (a run folder's ``config.yaml``) read as data: plain YAML, every
    ``${...}`` in it kept as text (:func:`literal`), so reading someone else's folder resolves nothing.
    A file that is not a YAML mapping raises ``ValueError`` naming it."""
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not a readable YAML file: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a YAML mapping, got {type(data).__name__}")
    return OmegaConf.create(literal(data))


def bounded(
    default: Any, *, ge: float | None = None, gt: float | None = None, le: float | None = None
) -> Any:
    """A dataclass field whose value :func:`check_bounds` keeps within bounds (None always passes
    for an optional field)."""
    return field(default=default, metadata={"ge": ge, "gt": gt, "le": le})


class ConfigValueError(ValueError):
    """A config value out of its range: the message names the option and the allowed range."""


def check_bounds(node: Any, schema: type, prefix: str = "") -> None:
    """Every numeric value of a validated config within its schema's bounds (:func:`bounded`), and
    no float NaN or infinite: ``threshold=nan``, ``limit=-1`` or ``alpha=-1`` fail here, naming the
    option, before any work starts."""
    for f in fields(schema):
        value = node[f.name] if isinstance(node, DictConfig) else getattr(node, f.name)
        name = prefix + f.name
        if value is None:
            continue
        nested = type(value) if is_dataclass(value) else _schema_of(value)
        if nested is not None:
            check_bounds(value, nested, name + ".")
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigValueError(f"{name}={value}: must be a finite number")
        ge, gt, le = (f.metadata.get(k) for k in ("ge", "gt", "le"))
        if ge is not None and value < ge:
            raise ConfigValueError(f"{name}={value}: must be at least {ge}")
        if gt is not None and value <= gt:
            raise ConfigValueError(f"{name}={value}: must be more than {gt}")
        if le is not None and value > le:
            raise ConfigValueError(f"{name}={value}: must be at most {le}")


def _schema_of(node: Any) -> type | None:
    if not isinstance(node, DictConfig):
        return None
    t = node._metadata.object_type
    return t if t not in (None, dict) and is_dataclass(t) else None


def typed(schema: type, values: DictConfig | dict[str, Any], what: str) -> Any:
    """``values`` checked against the dataclass ``schema`` and returned as an instance of it.
    Unknown keys, wrong types and values out of bounds raise ``ValueError`` naming ``what`` and the key."""
    try:
        merged = OmegaConf.merge(OmegaConf.structured(schema), values)
        out = OmegaConf.to_object(merged)
    except Exception as exc:  # omegaconf raises several error types; normalize them
        known = ", ".join(f.name for f in fields(schema))
        raise ValueError(f"bad {what} config: {exc}\nknown keys: {known}") from None
    try:
        check_bounds(out, schema)
    except ConfigValueError as exc:
        raise ConfigValueError(f"bad {what} config: {exc}") from None
    return out


def validate(cfg: DictConfig, schema: type) -> DictConfig:
    """``cfg`` merged into ``schema`` (struct mode): unknown keys, wrong types and values out of
    bounds (:func:`check_bounds`) raise here. Plain ``dict`` fields of a schema (architecture,
    tokenizer, ...) accept any key."""
    base = OmegaConf.structured(schema)
    OmegaConf.set_struct(base, True)
    _open_free_form(base)
    plain = literal(OmegaConf.to_container(cfg, resolve=True))  # a resolved value is final: not read again
    plain.pop("hydra", None)
    merged = OmegaConf.merge(base, plain)
    check_bounds(merged, schema)
    return merged


def _open_free_form(node: DictConfig) -> None:
    for key in node.keys():
        child = node._get_node(key)
        if isinstance(child, DictConfig):
            if child._metadata.object_type in (None, dict):
                OmegaConf.set_struct(child, False)
            else:
                _open_free_form(child)


#: The repository's config folder (``conf/``): the roots and their groups.
CONF_DIR = Path(__file__).resolve().parents[1] / "conf"


def store_schema(root: str, schema: type, keys: Iterable[str] | None = None) -> None:
    """Register ``schema``'s defaults (only ``keys``, when given) as the Hydra config
    ``<root>_schema``: ``conf/<root>.yaml`` lists it first in its defaults, and its groups and its own
    lines override it. The values are plain (typing is :func:`validate`'s job, after composition), so a
    group or a source may add keys the schema checks later."""
    from hydra.core.config_store import ConfigStore

    node = OmegaConf.to_container(OmegaConf.structured(schema))
    if keys is not None:
        node = {k: node[k] for k in keys}
    ConfigStore.instance().store(name=f"{root}_schema", node=node)


def compose(
    root: str, overrides: Iterable[str] = (), schema: type | None = None, config_dir: str | Path = CONF_DIR
) -> DictConfig:
    """``conf/<root>.yaml`` composed with ``overrides`` (as ``python -m <entry> ARGS`` would) and,
    given ``schema``, validated against it (:func:`validate`). The root's schema must be stored
    (importing its schema module does that)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
        cfg = hydra_compose(config_name=root, overrides=list(overrides))
    return cfg if schema is None else validate(cfg, schema)
