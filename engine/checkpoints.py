"""What a training run leaves for evaluation: complete checkpoints and the render config they were trained at.

A run directory (``sft.output_dir`` / ``grpo.output_dir``) holds ``checkpoint-<step>/`` dirs, a
``final/`` dir and ``config.yaml``. A checkpoint is complete once it holds ``COMPLETE`` (written after
everything else), so a reader never picks one a killed job left half-written. Every checkpoint the
training stages write, ``final/`` and GRPO's ``best/`` included, also holds ``render.json``: the
``render`` block (``data_builders.config.RenderConfig``) it was trained with, which ``eval.run`` and
``eval.watch`` read back so a model is evaluated on the frames it learned from.

    python -m eval.run checkpoint=runs/sft_4b/final      # composes with render.* from final/render.json
    python -m train.grpo init=runs/sft_4b/final          # GRPO trains on those frames too

A checkpoint's files are data: :func:`check_checkpoint` parses every one a run reads (``config.json``,
the safetensors headers, ``render.json``, ``trainer_state.json``) before the first step, and
:func:`check_loaded_weights` refuses weights that do not fit the config; both raise
:class:`CheckpointError`, naming the file and the reason. ``render.json`` is read with plain JSON and
checked against ``RenderConfig``: a ``${...}`` in it is refused, never resolved.

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
from typing import Any, get_type_hints

from data_builders.config import RenderConfig
from infra.schema import ConfigValueError, check_bounds

log = logging.getLogger(__name__)
COMPLETE_MARKER = "COMPLETE"
CHECKPOINT_PATTERN = re.compile(r"checkpoint-(\d+)")
RENDER_FILE = "render.json"
RENDER_KEYS = tuple(f.name for f in fields(RenderConfig))
#: The files of a model dir that decide its outputs: weights (full, sharded or a LoRA adapter) and
#: the architecture. Optimizer, scheduler, RNG and trainer state do not.
WEIGHT_FILES = ("*.safetensors", "*.safetensors.index.json", "config.json", "adapter_config.json")
_HASH_BLOCK = 1 << 24
RENDER_TYPES = get_type_hints(RenderConfig)
WEIGHTS_FILE = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"
#: Keys of a load report :func:`check_loaded_weights` names at most, per kind.
SHOWN_KEYS = 5


class CheckpointError(ValueError):
    """A checkpoint file (or folder) that cannot be used as it is: the message names it and the reason."""

    def __init__(self, path: str | Path, reason: str):
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{path}: {reason}")


def read_json(path: str | Path) -> Any:
    """A checkpoint's JSON file, parsed as plain data; a damaged one raises :class:`CheckpointError`."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(path, f"not valid JSON ({exc})") from None
    except OSError as exc:
        raise CheckpointError(path, f"cannot be read ({exc.strerror or exc})") from None


def checkpoint_name(step: int) -> str:
    """The directory name of the checkpoint a run saves at ``step``.

    >>> checkpoint_name(40), named_step(Path("runs/x") / checkpoint_name(40)), named_step("runs/x/final")
    ('checkpoint-40', 40, None)
    """
    return f"checkpoint-{step}"


def named_step(path: str | Path) -> int | None:
    """The ``<step>`` of a ``checkpoint-<step>`` dir's name; None for any other name."""
    m = CHECKPOINT_PATTERN.fullmatch(Path(path).name)
    return int(m.group(1)) if m else None


def complete_checkpoints(run_dir: str | Path) -> list[Path]:
    """``checkpoint-<step>`` dirs holding the completion marker, oldest first."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return []
    found = [(named_step(p), p) for p in run_dir.iterdir() if named_step(p) is not None]
    return [p for _, p in sorted(found) if p.is_dir() and (p / COMPLETE_MARKER).exists()]


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
        return _step_in(state, "global_step", default=0)
    step = named_step(path)
    if step is not None:
        return step
    best = path / "best.json"
    if best.is_file():
        return _step_in(best, "step")
    progress = path.parent / "progress.json"
    if progress.is_file():
        return _step_in(progress, "done")
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


def _step_in(path: Path, key: str, default: int | None = None) -> int:
    data = read_json(path)
    value = data.get(key, default) if isinstance(data, dict) else None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CheckpointError(path, f"{key} must be a step count (an integer of at least 0), got {value!r}")
    return value


def write_render(checkpoint: str | Path, render: RenderConfig | Any) -> Path:
    """Save the render block a checkpoint was trained with (a dataclass or a config mapping)."""
    values = asdict(render) if isinstance(render, RenderConfig) else {k: render[k] for k in RENDER_KEYS}
    path = Path(checkpoint) / RENDER_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(values, indent=1, sort_keys=True) + "\n")
    return path


def saved_render(checkpoint: str | Path) -> dict[str, Any] | None:
    """The render block a checkpoint (or a run dir) was trained with: ``render.json`` in it, else the
    ``render`` block of its run's ``config.yaml`` (the dir itself or its parent); None if neither.
    Read as data and checked (:func:`render_values`): a damaged file raises :class:`CheckpointError`."""
    path = Path(checkpoint)
    if (path / RENDER_FILE).is_file():
        return _before_formats(render_values(read_json(path / RENDER_FILE), path / RENDER_FILE))
    for run in (path, path.parent):
        config = run / "config.yaml"
        if config.is_file():
            import yaml

            try:
                loaded = yaml.safe_load(config.read_text(encoding="utf-8")) or {}
            except (UnicodeDecodeError, yaml.YAMLError) as exc:
                raise CheckpointError(config, f"not valid YAML ({exc})") from None
            block = loaded.get("render") if isinstance(loaded, dict) else None
            if isinstance(block, dict):
                return _before_formats(
                    render_values({k: block[k] for k in RENDER_KEYS if k in block}, config)
                )
    return None


def _before_formats(values: dict[str, Any]) -> dict[str, Any]:
    """A render block saved before ``frame_format`` existed was trained on raw frame-cache entries."""
    return {"frame_format": "raw"} | values


def render_values(values: Any, source: str | Path) -> dict[str, Any]:
    """``values`` (a saved render block, read from ``source``) checked against ``RenderConfig``:
    known keys, each of its field's type and within bounds. A string holding ``${`` is refused: the
    block becomes config overrides, and an interpolation there would be resolved (an environment
    variable's value copied into the evaluation's config, its W&B run and its logs)."""
    if not isinstance(values, dict):
        raise CheckpointError(
            source, f"expected a JSON object of {', '.join(RENDER_KEYS)}, got {type(values).__name__}"
        )
    unknown = sorted(set(values) - set(RENDER_KEYS))
    if unknown:
        raise CheckpointError(
            source, f"unknown render key(s) {', '.join(map(str, unknown))}; known: {', '.join(RENDER_KEYS)}"
        )
    for key, value in values.items():
        want = RENDER_TYPES[key]
        if isinstance(value, str) and "${" in value:
            raise CheckpointError(
                source,
                f"{key} is an interpolation ('${{...}}'); a checkpoint's render block is read as data, never resolved",
            )
        if isinstance(value, bool) or not isinstance(value, want):
            raise CheckpointError(
                source, f"{key} must be {want.__name__}, got {type(value).__name__} {value!r}"
            )
    from data_builders.frame_codec import parse_frame_format
    from data_builders.video import BACKENDS

    if values.get("video_backend", BACKENDS[0]) not in BACKENDS:
        raise CheckpointError(
            source, f"video_backend {values['video_backend']!r} is not one of {', '.join(BACKENDS)}"
        )
    try:
        parse_frame_format(values.get("frame_format", "raw"))
    except ValueError as exc:
        raise CheckpointError(source, str(exc)) from None
    try:
        check_bounds(RenderConfig(**values), RenderConfig)
    except ConfigValueError as exc:
        raise CheckpointError(source, str(exc)) from None
    return dict(values)


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
    explicit = render_given(overrides)
    if explicit:
        log.warning("%s: using %s over the render the model was trained with (%s)", path, explicit, saved)
        return overrides
    added = [f"render.{k}={json.dumps(v)}" for k, v in sorted(saved.items())]
    # right after the checkpoint's own override: Hydra's parser reads the overrides as one group
    return overrides[: at[-1] + 1] + added + overrides[at[-1] + 1 :]


def render_given(overrides: list[str]) -> list[str]:
    """The overrides of ``overrides`` that set the render block (``render=...``, ``render.<k>=...``)."""
    return [o for o in overrides if o.lstrip("+~").split("=", 1)[0].split(".")[0] == "render"]


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


def check_checkpoint(checkpoint: str | Path) -> Path:
    """Every file of ``checkpoint`` (a checkpoint or a run dir) that a run reads, checked before its
    first step: ``config.json`` and ``render.json`` parse, each safetensors file's header is whole
    and covers the file, ``trainer_state.json`` holds a step. Returns the model dir (:func:`model_dir`);
    a damaged file raises :class:`CheckpointError` naming it, so nothing is streamed or trained first."""
    path = Path(checkpoint)
    model = model_dir(path)
    check_model_files(model)
    for folder in dict.fromkeys((path, model)):  # a run dir: its config.yaml and its final/
        saved_render(folder)
        checkpoint_step(folder)
    return model


def check_model_files(model: str | Path) -> None:
    """A local model dir's ``config.json`` (a JSON object) and safetensors weights (one file or an
    index and its shards, each header whole), before ``from_pretrained`` reads them."""
    model = Path(model)
    config = read_json(model / "config.json")
    if not isinstance(config, dict):
        raise CheckpointError(model / "config.json", f"expected a JSON object, got {type(config).__name__}")
    if (model / WEIGHTS_INDEX).is_file():
        index = read_json(model / WEIGHTS_INDEX)
        shards = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(shards, dict) or not shards:
            raise CheckpointError(model / WEIGHTS_INDEX, "no weight_map of tensor names to shard files")
        for shard in sorted(set(map(str, shards.values()))):
            if not (model / shard).is_file():
                raise CheckpointError(model / shard, f"missing (listed in {WEIGHTS_INDEX})")
            safetensors_header(model / shard)
    elif (model / WEIGHTS_FILE).is_file():
        safetensors_header(model / WEIGHTS_FILE)
    else:
        raise CheckpointError(
            model, f"no {WEIGHTS_FILE} (nor {WEIGHTS_INDEX}): only safetensors weights are loaded"
        )


def safetensors_header(path: str | Path) -> dict[str, Any]:
    """The header of a safetensors file (tensor name -> dtype, shape, data offsets), checked to be
    whole: an 8-byte length, that much JSON, and tensor data reaching no further than the file."""
    path = Path(path)
    size = path.stat().st_size
    with path.open("rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            raise CheckpointError(path, f"{size} bytes: too short for a safetensors header")
        length = int.from_bytes(head, "little")
        if length > size - 8:
            raise CheckpointError(
                path,
                f"header length {length} runs past the end of the file ({size} bytes): not safetensors, or cut short",
            )
        raw = fh.read(length)
    try:
        header = json.loads(raw)
        end = max(
            (int(t["data_offsets"][1]) for name, t in header.items() if name != "__metadata__"), default=0
        )
    except (UnicodeDecodeError, ValueError, TypeError, KeyError, IndexError, AttributeError):
        raise CheckpointError(
            path, "the safetensors header is not a JSON map of tensors with data_offsets"
        ) from None
    if 8 + length + end > size:
        raise CheckpointError(
            path, f"truncated: its header describes {8 + length + end} bytes, the file holds {size}"
        )
    return header


def check_loaded_weights(path: str | Path, info: dict[str, Any]) -> None:
    """Refuse a load whose report (``from_pretrained(..., output_loading_info=True)``) has missing,
    unexpected or mismatched keys: the model would run with those weights filled at random (or the
    checkpoint's ignored). The message names the folder, the counts and the first keys of each kind."""
    problems = []
    for kind in ("missing", "unexpected"):
        keys = sorted(info.get(f"{kind}_keys") or ())
        if keys:
            problems.append(f"{len(keys)} {kind} ({_first(keys)})")
    mismatched = sorted(info.get("mismatched_keys") or ())
    if mismatched:
        shown = [f"{k}: checkpoint {tuple(a)} vs model {tuple(b)}" for k, a, b in mismatched]
        problems.append(f"{len(mismatched)} mismatched ({_first(shown)})")
    problems += [str(m) for m in info.get("error_msgs") or ()]
    if problems:
        raise CheckpointError(
            path,
            "its weights do not fit its config.json: "
            + "; ".join(problems)
            + " (a checkpoint of another model or size, or a damaged one; nothing is filled at random)",
        )


def _first(items: list[str]) -> str:
    more = len(items) - SHOWN_KEYS
    return ", ".join(items[:SHOWN_KEYS]) + (f", ... {more} more" if more > 0 else "")
