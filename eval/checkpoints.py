"""What a training run leaves for evaluation: complete checkpoints and the render config they were trained at.

A run directory (``train.output_dir`` / ``grpo.output_dir``) holds ``checkpoint-<step>/`` dirs, a
``final/`` dir and ``config.yaml``. A checkpoint is complete once it holds ``COMPLETE`` (written after
everything else), so a reader never picks one a killed job left half-written. Every checkpoint the
training stages write, ``final/`` and GRPO's ``best/`` included, also holds ``render.json``: the
``render`` block (``data_builders.config.RenderConfig``) it was trained with, which ``eval.run`` and
``eval.watch`` read back so a model is evaluated on the frames it learned from.

    python -m eval.run checkpoint=runs/sft_4b/final      # composes with render.* from final/render.json

A checkpoint's weights are identified by :func:`weights_fingerprint` (sha256 of its weight files):
``eval.run`` records it in an evaluation's ``config.yaml`` and ``eval.watch`` in its ledger, so new
weights at the same path (a retrain into the same run dir) are never answered with, or mixed into,
an evaluation of the old ones.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from data_builders.config import RenderConfig

log = logging.getLogger(__name__)
COMPLETE_MARKER = "COMPLETE"
RENDER_FILE = "render.json"
RENDER_KEYS = tuple(f.name for f in fields(RenderConfig))
#: The files of a model dir that decide its outputs: weights (full, sharded or a LoRA adapter) and
#: the architecture. Optimizer, scheduler, RNG and trainer state do not.
WEIGHT_FILES = ("*.safetensors", "*.safetensors.index.json", "config.json", "adapter_config.json")
_HASH_BLOCK = 1 << 24


def complete_checkpoints(run_dir: str | Path) -> list[Path]:
    """``checkpoint-<step>`` dirs holding the completion marker, oldest first."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return []
    found = []
    for p in run_dir.iterdir():
        m = re.fullmatch(r"checkpoint-(\d+)", p.name)
        if m and p.is_dir() and (p / COMPLETE_MARKER).exists():
            found.append((int(m.group(1)), p))
    return [p for _, p in sorted(found)]


def model_dir(path: str | Path) -> Path:
    """The model directory to load for ``path``: the path itself when it holds a model (a
    ``config.json``), else a run dir's ``final/``, else its newest complete checkpoint."""
    path = Path(path)
    if (path / "config.json").is_file():
        return path
    if (path / "final" / "config.json").is_file():
        return path / "final"
    done = complete_checkpoints(path)
    if done:
        return done[-1]
    if not path.exists():
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    raise FileNotFoundError(
        f"{path} holds no model (no config.json), no final/ and no complete checkpoint-<step>/"
    )


def run_dir_of(checkpoint: str | Path | None) -> Path | None:
    """The training run dir a checkpoint belongs to (the folder holding the run's ``config.yaml``:
    the checkpoint's parent, or the path itself when it is a run dir), or None."""
    if checkpoint is None:
        return None
    path = Path(checkpoint)
    for run in (path.parent, path):
        if (run / "config.yaml").is_file() and (run / "run_info.json").is_file():
            return run
    return None


def checkpoint_step(checkpoint: str | Path) -> int | None:
    """The training step a checkpoint was saved at: the Trainer's ``trainer_state.json``, else the
    ``checkpoint-<step>`` name, else (``final/``, ``best/``) the run's ``progress.json``; None if unknown."""
    path = Path(checkpoint)
    state = path / "trainer_state.json"
    if state.is_file():
        return int(json.loads(state.read_text()).get("global_step", 0))
    m = re.fullmatch(r"checkpoint-(\d+)", path.name)
    if m:
        return int(m.group(1))
    best = path / "best.json"
    if best.is_file():
        return int(json.loads(best.read_text())["step"])
    progress = path.parent / "progress.json"
    if progress.is_file():
        return int(json.loads(progress.read_text())["done"])
    return None


def weight_files(model: str | Path) -> dict[str, list[int]]:
    """``{name: [size, mtime_ns]}`` of a model dir's :data:`WEIGHT_FILES` (a stat, no reading)."""
    found = {p for pattern in WEIGHT_FILES for p in Path(model).glob(pattern) if p.is_file()}
    return {p.name: [(st := p.stat()).st_size, st.st_mtime_ns] for p in sorted(found)}


def weights_fingerprint(checkpoint: str | Path, known: dict | None = None) -> dict[str, Any]:
    """``{"sha256": hex, "files": {name: [size, mtime_ns]}}`` of the model that ``checkpoint`` loads
    (:func:`model_dir`; :func:`fingerprint_dir` of that dir)."""
    return fingerprint_dir(model_dir(checkpoint), known)


def fingerprint_dir(model: str | Path, known: dict | None = None) -> dict[str, Any]:
    """One sha256 over every weight file's name, size and bytes in ``model``, with the files' stat.
    It reads the whole of each file (0.9 GB/s on one core here: ~10 s for a 4B model, whose loading
    reads the same bytes), so any two models differ, a retrain with other data or seed included.
    ``known``, a fingerprint taken earlier, is returned as is while every file keeps its size and
    modification time (the trainer writes a file whole, which sets a new one), so a watcher that
    polls never re-reads an unchanged checkpoint."""
    model = Path(model)
    files = weight_files(model)
    if known is not None and known.get("files") == files and known.get("sha256"):
        return {"sha256": known["sha256"], "files": files}
    digest = hashlib.sha256()
    for name, (size, _) in files.items():
        digest.update(f"{name}\0{size}\0".encode())
        with (model / name).open("rb") as fh:
            while block := fh.read(_HASH_BLOCK):
                digest.update(block)
    return {"sha256": digest.hexdigest(), "files": files}


def write_render(checkpoint: str | Path, render: RenderConfig | Any) -> Path:
    """Save the render block a checkpoint was trained with (a dataclass or a config mapping)."""
    values = asdict(render) if isinstance(render, RenderConfig) else {k: render[k] for k in RENDER_KEYS}
    path = Path(checkpoint) / RENDER_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(values, indent=1, sort_keys=True) + "\n")
    return path


def saved_render(checkpoint: str | Path) -> dict[str, Any] | None:
    """The render block a checkpoint (or a run dir) was trained with: ``render.json`` in it, else the
    ``render`` block of its run's ``config.yaml`` (the dir itself or its parent); None if neither."""
    path = Path(checkpoint)
    if (path / RENDER_FILE).is_file():
        return json.loads((path / RENDER_FILE).read_text())
    for run in (path, path.parent):
        config = run / "config.yaml"
        if config.is_file():
            import yaml

            block = (yaml.safe_load(config.read_text()) or {}).get("render")
            if isinstance(block, dict):
                return {k: block[k] for k in RENDER_KEYS if k in block}
    return None


def _is_sweep(value: str) -> bool:
    return "," in value or value.startswith(("glob(", "range(", "choice(", "interval("))


def render_overrides(overrides: list[str], key: str = "checkpoint") -> list[str]:
    """``overrides`` plus ``render.<k>=<v>`` for the render block saved with the checkpoint (or run
    dir) named by ``<key>=PATH``, so the composed config (``--cfg job`` too) evaluates at the frame
    size the model was trained at. An explicit ``render=`` / ``render.<k>=`` override wins; a sweep
    over checkpoints is left alone (each evaluation warns if its frames differ from training)."""
    at = [i for i, o in enumerate(overrides) if "=" in o and o.split("=", 1)[0].lstrip("+~") == key]
    if not at:
        return overrides
    path = overrides[at[-1]].split("=", 1)[1]
    if _is_sweep(path) or path in ("null", "None", ""):
        return overrides
    saved = saved_render(path)
    if saved is None:
        return overrides
    explicit = [o for o in overrides if o.lstrip("+~").split("=", 1)[0].split(".")[0] == "render"]
    if explicit:
        log.warning("%s: using %s over the render the model was trained with (%s)", path, explicit, saved)
        return overrides
    added = [f"render.{k}={json.dumps(v)}" for k, v in sorted(saved.items())]
    # right after the checkpoint's own override: Hydra's parser reads the overrides as one group
    return overrides[: at[-1] + 1] + added + overrides[at[-1] + 1 :]


def check_render(checkpoint: str | Path | None, render: Any) -> None:
    """Warn when an evaluation's render block differs from the one the checkpoint was trained with."""
    saved = saved_render(checkpoint) if checkpoint else None
    if saved is None:
        return
    differs = {k: (render[k], v) for k, v in saved.items() if k in RENDER_KEYS and render[k] != v}
    if differs:
        log.warning(
            "%s was trained with render %s; evaluating with %s (render=... was overridden)",
            checkpoint,
            {k: v for k, (_, v) in differs.items()},
            {k: e for k, (e, _) in differs.items()},
        )
