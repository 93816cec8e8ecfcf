"""A checkpoint -> a plain Hugging Face model folder with a model card.

    python -m train.export checkpoint=runs/sft/final out=exports/sft
    python -m train.export checkpoint=runs/grpo/best out=exports/grpo push_to_hub=true repo_id=me/my-model

Writes the weights (safetensors; a ZeRO checkpoint consolidated through ``train.safe_load``, a LoRA
adapter merged), the processor with the turn format's chat template, ``generation_config.json``,
``render.json`` and the model card (``train.model_card``), and prints one JSON object. What the
folder holds, how it loads and how ``push_to_hub`` sends it: ``docs/training.md``.

``out`` is new or empty, or with ``replace=true`` an earlier export of this command; the export is
written beside it and swapped in whole (``train.export_folder``). ``auto_map`` and what else names
code to fetch is removed from the saved configs (:func:`strip_remote_code`).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hydra
import torch
from omegaconf import DictConfig

from data_builders.config import PathsConfig
from engine.checkpoints import (
    CheckpointError,
    check_loaded_weights,
    check_model_files,
    model_dir,
    run_dir_of,
    saved_render,
    weights_fingerprint,
    write_render,
)
from infra.entry import run_command
from infra.files import FolderWriteError
from infra.schema import CONF_DIR, store_schema, validate
from train.export_folder import MARKER, ExportError, check_out, write_export, write_marker
from train.model_card import CHAT_TEMPLATE, evaluations_of, model_card
from train.safe_load import UnsafeCheckpoint, deepspeed_globals, load_weights_only

ADAPTER_CONFIG = "adapter_config.json"
#: Keys of a saved config that name code for ``trust_remote_code`` to fetch and run; never exported.
REMOTE_CODE_KEYS = ("auto_map", "custom_pipelines")
NO_TOKEN = "push_to_hub=true needs a token: set HF_TOKEN in the environment"


@dataclass
class ExportConfig:
    """``python -m train.export`` (``conf/export.yaml``)."""

    checkpoint: str | None = None
    """``final/``, ``best/``, ``checkpoint-<step>/`` or a run dir (its ``final/``)."""
    out: str | None = None
    """The folder to write: new or empty (or, with ``replace``, an earlier export); never the
    checkpoint, a run dir, or a folder inside or around one."""
    replace: bool = False
    """Replace an earlier export at ``out``: only a folder this command wrote (its
    ``.train_export.json`` lists every file in it), swapped in whole."""
    push_to_hub: bool = False
    """Upload ``out`` to ``repo_id`` (needs ``HF_TOKEN`` in the environment)."""
    repo_id: str | None = None
    """The hub repository (``user/name``) of ``push_to_hub``."""
    private: bool = True
    """Create the hub repository private."""
    evaluations: list[str] = field(default_factory=list)
    """Evaluation folders to report besides those found under ``paths.runs_dir/eval`` (only those of
    these weights are kept: their ``config.yaml`` records the weights' sha256)."""
    paths: PathsConfig = field(default_factory=PathsConfig)


store_schema("export", ExportConfig)


def source_kind(path: Path) -> tuple[str, Path]:
    """(``lora`` | ``full`` | ``zero``, the folder to read) of a checkpoint path."""
    if (path / ADAPTER_CONFIG).is_file():
        return "lora", path
    if (path / "config.json").is_file() and not any(path.glob("*.safetensors")):
        if (path / "latest").is_file() or any(path.glob("global_step*")):
            return "zero", path
    return "full", model_dir(path)


@contextlib.contextmanager
def _weights_only_torch_load():
    """``torch.load`` as :func:`train.safe_load.load_weights_only` with DeepSpeed's data classes, for
    DeepSpeed's consolidation, which reads its shards with ``weights_only=False``."""
    real, allowed = torch.load, deepspeed_globals()

    def load(f, map_location=None, **_):
        torch.load = real  # the restricted loader calls torch's own
        try:
            return load_weights_only(f, map_location, allowed)
        finally:
            torch.load = load

    torch.load = load
    try:
        yield
    finally:
        torch.load = real


def load_model(path: Path) -> tuple[Any, Path]:
    """The checkpoint's model, whole (merged, consolidated), and the folder its processor is in."""
    from transformers import AutoConfig, AutoModelForImageTextToText

    kind, folder = source_kind(path)
    if kind == "lora":
        from peft import PeftModel

        base_path = json.loads((folder / ADAPTER_CONFIG).read_text()).get("base_model_name_or_path")
        if not base_path or not Path(base_path).is_dir():
            raise ExportError(
                f"{folder / ADAPTER_CONFIG}: its base model {base_path!r} is not a local folder"
            )
        base, report = AutoModelForImageTextToText.from_pretrained(base_path, output_loading_info=True)
        check_loaded_weights(base_path, report)
        return PeftModel.from_pretrained(base, str(folder)).merge_and_unload(), folder
    if kind == "zero":
        from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

        model = AutoModelForImageTextToText.from_config(AutoConfig.from_pretrained(folder))
        with _weights_only_torch_load():
            state = get_fp32_state_dict_from_zero_checkpoint(str(folder))
        missing, unexpected = model.load_state_dict(state, strict=False)
        missing = [k for k in missing if k not in _tied(model)]
        check_loaded_weights(folder, {"missing_keys": missing, "unexpected_keys": unexpected})
        return model, folder
    check_model_files(folder)
    model, report = AutoModelForImageTextToText.from_pretrained(str(folder), output_loading_info=True)
    check_loaded_weights(folder, report)
    return model, folder


def _tied(model) -> set[str]:
    """Names of tied weights (saved once, under the tensor they share)."""
    keys = getattr(model, "all_tied_weights_keys", None) or getattr(model, "_tied_weights_keys", None) or {}
    return set(keys)


def save_folder(model, processor, out: Path, render: dict | None) -> None:
    """Weights (safetensors), processor with the chat template, generation config, render.json."""
    from transformers import GenerationConfig

    tok = processor.tokenizer
    processor.chat_template = CHAT_TEMPLATE
    model.config.use_cache = True
    model.generation_config = GenerationConfig(
        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tok.pad_token_id,
        do_sample=False,
        max_new_tokens=32,
    )
    model.save_pretrained(out, safe_serialization=True)
    processor.save_pretrained(out)
    if render is not None:
        write_render(out, render)
    unsafe = sorted(p.name for p in out.iterdir() if p.suffix in (".bin", ".pt", ".pth", ".pkl"))
    if unsafe:
        raise ExportError(f"{out}: wrote pickled files {unsafe}; only safetensors weights are exported")


def _drop_remote_code(config: dict) -> list[str]:
    """Remove :data:`REMOTE_CODE_KEYS` from a saved config and its ``*_config`` parts; the keys removed."""
    found = [k for k in REMOTE_CODE_KEYS if config.pop(k, None) is not None]
    for key, part in config.items():
        if key.endswith("_config") and isinstance(part, dict):
            found += _drop_remote_code(part)
    return found


def strip_remote_code(folder: Path) -> dict[str, list[str]]:
    """Remove what names code to fetch (``auto_map``, ...) from the configs saved in ``folder``
    (a checkpoint's ``auto_map`` would otherwise reach the export and, with
    ``trust_remote_code=True``, run the code it names); {file: keys removed}."""
    removed = {}
    for path in sorted(folder.glob("*.json")):
        if path.name in ("tokenizer.json", "vocab.json"):  # vocabularies: any key is a token
            continue
        config = json.loads(path.read_text(encoding="utf-8"))
        keys = _drop_remote_code(config) if isinstance(config, dict) else []
        if keys:
            path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
            removed[path.name] = sorted(set(keys))
    return removed


def _write(model, processor, folder: Path, render: dict | None, card: str, weights: str | None) -> None:
    """The whole export into ``folder`` (a staging folder), its marker last."""
    save_folder(model, processor, folder, render)
    (folder / "README.md").write_text(card, encoding="utf-8")
    removed = strip_remote_code(folder)
    if removed:
        where = "; ".join(f"{k} from {name}" for name, keys in removed.items() for k in keys)
        print(
            f"train.export: removed {where}: the export names no code to fetch (trust_remote_code)",
            file=sys.stderr,
        )
    write_marker(folder, weights)


def export(cfg: ExportConfig) -> dict[str, Any]:
    """Write the folder and its card (and upload it); returns the printed summary."""
    from transformers import AutoProcessor

    if not cfg.checkpoint or not cfg.out:
        raise ExportError("checkpoint=DIR and out=DIR are required")
    if cfg.push_to_hub and not cfg.repo_id:
        raise ExportError("push_to_hub=true needs repo_id=<user>/<name>")
    if cfg.push_to_hub and not os.environ.get("HF_TOKEN"):
        raise ExportError(NO_TOKEN)
    src, out = Path(cfg.checkpoint), Path(cfg.out)
    if not src.exists():
        raise ExportError(f"checkpoint {src} does not exist")
    check_out(src, out, cfg.replace)
    model, folder = load_model(src)
    processor = AutoProcessor.from_pretrained(str(folder))
    weights = weights_fingerprint(folder)["sha256"] if (folder / "config.json").is_file() else None
    found = evaluations_of(weights, [Path(cfg.paths.runs_dir) / "eval", *map(Path, cfg.evaluations)])
    render = saved_render(folder) or saved_render(src)
    card = model_card(run_dir_of(folder) or run_dir_of(src), found, cfg.repo_id or out.name)
    write_export(out, lambda staging: _write(model, processor, staging, render, card, weights))
    summary = {"out": str(out), "files": sorted(p.name for p in out.iterdir()), "evaluations": len(found)}
    if cfg.push_to_hub:
        summary["url"] = push(out, cfg.repo_id, cfg.private)
    return summary


def push(folder: Path, repo_id: str, private: bool) -> str:
    """Upload ``folder`` to the hub repository ``repo_id`` (created if needed); the token comes from
    ``HF_TOKEN`` and is never printed."""
    from huggingface_hub import HfApi

    token = os.environ.get("HF_TOKEN")
    if not token:
        raise ExportError(NO_TOKEN)
    api = HfApi(token=token)
    api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
    api.upload_folder(repo_id=repo_id, folder_path=str(folder), repo_type="model", ignore_patterns=[MARKER])
    return f"https://huggingface.co/{repo_id}"


@hydra.main(config_path=str(CONF_DIR), config_name="export", version_base="1.3")
def _main(cfg: DictConfig) -> None:
    """``train.export ... -m`` (or with another Hydra flag): Hydra composed the config."""
    try:
        cfg = validate(cfg, ExportConfig)
    except ValueError as exc:
        print(f"train.export: {exc}", file=sys.stderr)
        sys.exit(2)
    _command(cfg)


def _command(cfg: DictConfig, _checked: object = None) -> None:
    """The export of a validated config; its summary as one JSON line."""
    from omegaconf import OmegaConf

    try:
        summary = export(OmegaConf.to_object(cfg))
    except (ExportError, CheckpointError, UnsafeCheckpoint, FileNotFoundError, FolderWriteError) as exc:
        print(f"train.export: {exc}", file=sys.stderr)
        sys.exit(2)
    print(json.dumps(summary, sort_keys=True))


def main() -> None:
    """The command line, composed and validated once (a mistyped key: one line, exit 2)."""
    run_command("train.export", "export", ExportConfig, _command, _main)


if __name__ == "__main__":
    main()
