"""Typed configs: a composed Hydra config merged into its dataclass schema, every value in bounds.

    cfg = validate(composed, SFTConfig)          # unknown key, wrong type, value out of bounds: raise
    options = typed(ToyOptions, {"n": 8}, "source=toy")

A schema field declared with :func:`bounded` carries its allowed range (``bounded(0.5, ge=0,
le=1)``); :func:`check_bounds` also refuses every NaN or infinite float, so ``threshold=nan``,
``limit=-1`` or ``alpha=-1`` fail at once, naming the option.
"""

from __future__ import annotations

import math
from dataclasses import field, fields, is_dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf


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
    plain = OmegaConf.to_container(cfg, resolve=True)
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
