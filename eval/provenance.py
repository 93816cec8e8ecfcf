"""What decides an evaluation's predictions, defined once: the prediction log, the ranks' manifests
and ``eval.watch``'s ledger all compare this, never a list of their own.

    decides(cfg, weights)        # the config keys that decide a prediction, with the weights' sha256
    digest(decides(cfg, weights))  # one sha256 of it
    config_sha12(cfg)            # its first 12 hex digits, weights and checkpoint aside: a folder label
    first_difference(a, b)       # ("threshold", 0.5, 0.05): what a refusal names
    record_fingerprint(stream)   # sha256 of one record: a prediction line belongs to it

Every key of an ``eval.run`` config decides, except :data:`NOT_DECISIVE` (where results go, how they
are logged, how records are batched: batch composition moves logits by ~1e-7, below the sweep's
margin). So a key added to the schema decides until it is listed here: an unknown key errs on the
side of redoing work, never of mixing results. The weights are the sha256 of the checkpoint's weight
files (``engine.checkpoints.weights_fingerprint``), None without a checkpoint.

A record's fingerprint covers the whole record (video, clip, instruction, history, targets, meta):
a record rebuilt in place under the same id (a new instruction or target) has another one, so its
old prediction is neither resumed nor scored against the new targets.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from omegaconf import OmegaConf

from data_builders.records import Stream

#: Config keys that do not change a record's prediction.
NOT_DECISIVE = (
    "out_dir",
    "step",
    "logger",
    "timelines",
    "view",
    "sweep_mode",
    "batch_size",
    "paths",
    "weights",
)
#: The line field holding the record's fingerprint (:func:`record_fingerprint`).
RECORD_FIELD = "record_sha256"


def _plain(cfg: Any) -> dict[str, Any]:
    return dict(cfg) if isinstance(cfg, dict) else OmegaConf.to_container(cfg, resolve=True)


def decides(cfg: Any, weights: str | None) -> dict[str, Any]:
    """The part of an ``eval.run`` config (a DictConfig or its plain dict) that decides the
    predictions, threshold included, with the weights' sha256 as ``weights``."""
    plain = _plain(cfg)
    return {k: v for k, v in plain.items() if k not in NOT_DECISIVE} | {"weights": weights}


def digest(value: Any) -> str:
    """sha256 of ``value`` as canonical JSON (sorted keys)."""
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def first_difference(a: Any, b: Any, key: str = "") -> tuple[str, Any, Any] | None:
    """The first dotted key (sorted order) where ``a`` and ``b`` differ, with both values; None when
    they are equal. A key one side lacks shows as ``<absent>``."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            sub = f"{key}.{k}" if key else str(k)
            if k not in a or k not in b:
                return sub, a.get(k, "<absent>"), b.get(k, "<absent>")
            found = first_difference(a[k], b[k], sub)
            if found is not None:
                return found
        return None
    return None if a == b else (key or "<whole>", a, b)


def describe_difference(a: Any, b: Any, here: str, there: str) -> str:
    """``threshold: 0.05 (here) vs 0.5 (there)``, for a refusal; ``""`` when equal."""
    found = first_difference(a, b)
    if found is None:
        return ""
    key, mine, theirs = found
    return f"{key}: {json.dumps(mine, default=str)[:120]} ({here}) vs {json.dumps(theirs, default=str)[:120]} ({there})"


def config_sha12(cfg: Any, skip: tuple[str, ...] = ()) -> str:
    """sha256[:12] of what decides an evaluation but its weights, its checkpoint and ``skip`` (a
    sweep's ``threshold``): one label for one config, whatever checkpoint it evaluates."""
    plain = decides(cfg, None)
    return digest({k: v for k, v in plain.items() if k not in ("checkpoint", *skip)})[:12]


def record_fingerprint(stream: Stream) -> str:
    """sha256 of one record, whole (see the module docstring)."""
    return digest(stream.to_dict())
