"""Model assembly: one function from the ``model`` config to (model, processor).

``model=tiny`` builds a tiny Qwen3-VL from ``Qwen3VLConfig`` with a byte-level BPE tokenizer trained
in-process and a ``Qwen3VLProcessor`` built from parts, and saves it as an ordinary Hugging Face
checkpoint directory (so everything downstream loads it like a real one, offline).
``model=qwen3_vl_2b|qwen3_vl_4b|qwen3_vl_8b`` load the real checkpoints by hub id or local path;
their configs also carry the true architecture, so ``model.random_init=true`` builds the real
architecture with random weights (GPU benchmarks, no download).

Either way ``</Silence>`` and ``</Response>`` become special tokens, the embeddings are resized to
fit them, and the vision tower can be frozen. A checkpoint's weights must fit its ``config.json``
exactly: missing, unexpected or mismatched tensors stop the load (``engine.checkpoints``), for
``eval.run``, GRPO's ``init=`` and SFT's ``model.path`` alike.

``python -m eval.model`` prints what a config builds (:func:`describe`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from data_builders.turn_grammar import RESPONSE, SILENCE
from engine.checkpoints import check_loaded_weights, check_model_files
from infra.files import waiting_lock, write_text_atomic

log = logging.getLogger(__name__)
#: The file a tiny checkpoint folder holds its config's fingerprint in, written last when it is built.
TINY_STAMP = "tiny_fingerprint.txt"

#: Chat and vision markers of the Qwen3-VL vocabulary that the tiny tokenizer must also have.
CHAT_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
DECISION_TOKENS = [SILENCE, RESPONSE]


def _tokenizer_corpus() -> list[str]:
    """Text the tiny tokenizer is trained on: the turn format, numbers, and the project's own
    instructions and answers, so that toy streams tokenize into few tokens."""
    from data_builders.synthetic.toy import INSTRUCTIONS, PROCEDURE

    lines = list(INSTRUCTIONS.values())
    lines += [f"<{t:.1f} seconds>" for t in range(0, 600)]
    lines += [f"Wrong block: place {a} instead of {b}." for a in PROCEDURE for b in PROCEDURE if a != b]
    lines += [
        "The red square appeared.",
        "Warning: the blue square left the scene.",
        "Warning: the two squares are about to collide.",
        "Warning",
        "user",
        "assistant",
        "Tell me when something happens. Warn me before an accident. What should I do next?",
        "The quick brown fox jumps over the lazy dog. 0123456789 [safety] [tool_use]",
    ]
    return lines * 4


def build_tokenizer(vocab_size: int = 512):
    """A byte-level BPE tokenizer trained in-process, with the chat, vision and decision tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=CHAT_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(_tokenizer_corpus(), trainer=trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        model_max_length=1_000_000,
    )
    return tok


def add_decision_tokens(tokenizer) -> list[int]:
    """Register ``</Silence>`` / ``</Response>`` as special tokens; returns their ids."""
    missing = [t for t in DECISION_TOKENS if t not in tokenizer.get_vocab()]
    if missing:
        existing = list(getattr(tokenizer, "extra_special_tokens", None) or [])
        if isinstance(existing, Mapping):
            existing = list(existing.values())
        tokenizer.add_special_tokens(
            {"extra_special_tokens": existing + missing}, replace_extra_special_tokens=True
        )
    return [tokenizer.convert_tokens_to_ids(t) for t in DECISION_TOKENS]


def build_processor(tokenizer, image_processor_cfg: Mapping[str, Any]):
    from transformers import Qwen2VLImageProcessor, Qwen3VLProcessor, Qwen3VLVideoProcessor

    image_processor = Qwen2VLImageProcessor(**dict(image_processor_cfg))
    video_processor = Qwen3VLVideoProcessor(**dict(image_processor_cfg))
    return Qwen3VLProcessor(
        image_processor=image_processor, tokenizer=tokenizer, video_processor=video_processor
    )


def qwen3_vl_config(architecture: Mapping[str, Any], tokenizer=None):
    """A ``Qwen3VLConfig`` from the ``architecture`` block of a model config, with the special-token
    ids of ``tokenizer`` (when given) so the model finds the image placeholders."""
    from transformers import Qwen3VLConfig

    arch = json.loads(json.dumps(dict(architecture)))  # plain dicts (from OmegaConf too)
    if tokenizer is not None:
        ids = {
            name: tokenizer.convert_tokens_to_ids(tok)
            for name, tok in [
                ("image_token_id", "<|image_pad|>"),
                ("video_token_id", "<|video_pad|>"),
                ("vision_start_token_id", "<|vision_start|>"),
                ("vision_end_token_id", "<|vision_end|>"),
            ]
        }
        arch.update(ids)
        text = arch.setdefault("text_config", {})
        text.setdefault("vocab_size", len(tokenizer))
        text["pad_token_id"] = tokenizer.pad_token_id
        text["eos_token_id"] = tokenizer.eos_token_id
    return Qwen3VLConfig(**arch)


def _fingerprint(cfg: Mapping[str, Any]) -> str:
    keys = ("architecture", "tokenizer", "image_processor", "seed")
    blob = json.dumps({k: _plain(cfg.get(k)) for k in keys}, sort_keys=True)
    return hashlib.sha1(blob.encode()).hexdigest()[:12]


def _plain(value: Any) -> Any:
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(value, (DictConfig, ListConfig)):
            return OmegaConf.to_container(value, resolve=True)
    except ImportError:  # pragma: no cover - hydra is a dependency
        pass
    return value


def build_tiny_checkpoint(cfg: Mapping[str, Any], out_dir: str | Path) -> Path:
    """Build the tiny Qwen3-VL (seeded random weights), its tokenizer and processor, and save them
    as a Hugging Face checkpoint directory (safetensors). Reuses ``out_dir`` when it holds a
    checkpoint built from the same config.

    Safe when several processes ask for the same directory at once (the points of a sweep, the ranks
    of a job): one builds while the others wait on a lock beside it, and the files are written in a
    temporary folder and renamed into place one by one, the fingerprint last, so no reader ever
    sees a cut file."""
    cfg = _plain(cfg)
    out_dir = Path(out_dir)
    fp = _fingerprint(cfg)
    if _holds_tiny(out_dir, fp):
        return out_dir
    with waiting_lock(out_dir.parent / f".{out_dir.name}.lock"):
        if _holds_tiny(out_dir, fp):  # built by the process that held the lock before
            return out_dir
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / TINY_STAMP).unlink(missing_ok=True)  # an older build's files are replaced below
        with tempfile.TemporaryDirectory(prefix=f".{out_dir.name}.", dir=out_dir.parent) as tmp:
            _save_tiny(cfg, Path(tmp))
            for file in sorted(Path(tmp).iterdir()):
                os.replace(file, out_dir / file.name)
        write_text_atomic(out_dir / TINY_STAMP, fp + "\n")
    return out_dir


def _holds_tiny(out_dir: Path, fp: str) -> bool:
    stamp = out_dir / TINY_STAMP
    return stamp.exists() and stamp.read_text().strip() == fp and (out_dir / "model.safetensors").exists()


def _save_tiny(cfg: Mapping[str, Any], out_dir: Path) -> None:
    from transformers import Qwen3VLForConditionalGeneration

    tokenizer = build_tokenizer(int(cfg["tokenizer"]["vocab_size"]))
    add_decision_tokens(tokenizer)
    processor = build_processor(tokenizer, cfg["image_processor"])
    config = qwen3_vl_config(cfg["architecture"], tokenizer)
    config.text_config.vocab_size = len(tokenizer)
    torch.manual_seed(int(cfg.get("seed", 0)))
    model = Qwen3VLForConditionalGeneration(config)
    model.save_pretrained(out_dir, safe_serialization=True)
    processor.save_pretrained(out_dir)


def freeze_vision_tower(model: torch.nn.Module, train_merger: bool = True) -> None:
    """Freeze the vision encoder's blocks and patch embedding; keep the merger(s) trainable (the
    recipe trains the aligner) unless ``train_merger`` is false."""
    visual = model.model.visual
    for name, param in visual.named_parameters():
        is_merger = name.startswith("merger") or name.startswith("deepstack_merger")
        param.requires_grad_(train_merger and is_merger)


def vision_tower_parameters(model: torch.nn.Module) -> dict[str, torch.nn.Parameter]:
    """The frozen-by-default part of the vision encoder (everything but the mergers)."""
    return {
        n: p
        for n, p in model.model.visual.named_parameters()
        if not (n.startswith("merger") or n.startswith("deepstack_merger"))
    }


#: Seconds the hub gets to answer before a hub id's load is refused (instead of retrying for minutes).
HUB_TIMEOUT_S = 5.0


class HubUnreachable(ValueError):
    """A hub id to load, no way to the hub, and no copy of it in the local cache."""


def _hub_down() -> str | None:
    """Why the hub cannot be asked now (offline mode, or no answer from ``HF_ENDPOINT`` within
    :data:`HUB_TIMEOUT_S`), or None when it answers."""
    import httpx
    from huggingface_hub import constants

    if constants.is_offline_mode():
        return "offline mode (HF_HUB_OFFLINE=1)"
    try:
        with httpx.Client(timeout=HUB_TIMEOUT_S, follow_redirects=False) as client:
            client.head(constants.ENDPOINT)  # any answer, 404 included, is a hub that can be asked
    except (httpx.HTTPError, OSError) as exc:
        return f"no network: {constants.ENDPOINT} did not answer ({type(exc).__name__})"
    return None


def hub_options(path: str) -> dict[str, Any]:
    """``from_pretrained`` options for a model ``path`` that is no local folder (a hub id): none when
    the hub answers; ``local_files_only`` when it does not but the cache holds the model; else
    :class:`HubUnreachable`, one line naming the id and ``model.path=DIR`` (never minutes of retries)."""
    from huggingface_hub import try_to_load_from_cache

    why = _hub_down()
    if why is None:
        return {}
    if isinstance(try_to_load_from_cache(path, "config.json"), str):
        return {"local_files_only": True}
    raise HubUnreachable(
        f"model.path={path} is no local folder, so it is a hub id to download, and the hub cannot be "
        f"reached ({why}) nor is it in the cache: pass model.path=DIR (a local checkpoint folder), "
        "or run once with network"
    )


def load_model_and_processor(cfg: Mapping[str, Any], cache_dir: str | Path | None = None):
    """(model, processor) from a ``model`` config (see ``conf/model/``).

    - ``kind: tiny``: build (or reuse) the tiny checkpoint under ``path`` (or ``cache_dir/tiny-<hash>``),
      then load it like any other checkpoint.
    - ``kind: pretrained``: ``path`` is a hub id or a local directory; with ``random_init: true``
      the ``architecture`` block is built with random weights and the tiny tokenizer instead.
    """
    from transformers import AutoModelForImageTextToText, AutoProcessor, Qwen3VLForConditionalGeneration

    cfg = _plain(cfg)
    dtype = getattr(torch, str(cfg.get("dtype", "float32")))
    trust = bool(cfg.get("trust_remote_code", False))
    attn = cfg.get("attn_implementation", "sdpa")
    path = cfg.get("path")
    if cfg["kind"] == "tiny":
        if path is None:
            if cache_dir is None:
                raise ValueError("model.kind=tiny needs model.path or a cache_dir to build the checkpoint in")
            path = tiny_checkpoint_dir(cfg, cache_dir)
        path = build_tiny_checkpoint(cfg, path)
    if cfg["kind"] == "pretrained" and cfg.get("random_init", False):
        tokenizer = build_tokenizer(int(cfg.get("tokenizer", {}).get("vocab_size", 512)))
        add_decision_tokens(tokenizer)
        processor = build_processor(tokenizer, cfg["image_processor"])
        config = qwen3_vl_config(cfg["architecture"], tokenizer)
        config.text_config.vocab_size = max(config.text_config.vocab_size, len(tokenizer))
        with torch.device(cfg.get("init_device", "cpu")):
            model = Qwen3VLForConditionalGeneration._from_config(
                config, dtype=dtype, attn_implementation=attn
            )
    else:
        if path is None:
            raise ValueError(
                f"model {cfg.get('name')!r}: set model.path to a hub id or a local checkpoint dir"
            )
        if Path(path).is_dir():  # a local checkpoint (else a hub id): its files checked first
            check_model_files(path)
        hub = {} if Path(path).is_dir() else hub_options(str(path))
        processor = AutoProcessor.from_pretrained(str(path), trust_remote_code=trust, **hub)
        # mismatched shapes are reported, not raised, so that every kind of misfit is refused alike
        model, report = AutoModelForImageTextToText.from_pretrained(
            str(path),
            **hub,
            dtype=dtype,
            trust_remote_code=trust,
            attn_implementation=attn,
            output_loading_info=True,
            ignore_mismatched_sizes=True,
        )
        check_loaded_weights(path, report)
        ids = add_decision_tokens(processor.tokenizer)
        if max(ids) >= model.get_input_embeddings().weight.shape[0]:
            model.resize_token_embeddings(len(processor.tokenizer), mean_resizing=False)
    if cfg.get("freeze_vision", True):
        freeze_vision_tower(model, train_merger=bool(cfg.get("train_merger", True)))
    return model, processor


def count_parameters(model: torch.nn.Module) -> dict[str, int]:
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return {"total": total, "trainable": trainable}


def tiny_checkpoint_dir(cfg: Mapping[str, Any], cache_dir: str | Path) -> Path:
    """Where a tiny model without ``path`` keeps its built checkpoint: ``<cache_dir>/tiny-<config hash>``."""
    return Path(cache_dir) / f"tiny-{_fingerprint(cfg)}"


def plain_model_config(cfg: Mapping[str, Any], cache_dir: str | Path) -> dict[str, Any]:
    """The model block as a plain dict, a tiny model's ``path`` filled in (:func:`tiny_checkpoint_dir`)."""
    out = _plain(cfg)
    if out["kind"] == "tiny" and out.get("path") is None:
        out["path"] = str(tiny_checkpoint_dir(out, cache_dir))
    return out


def describe(model: torch.nn.Module, processor, cfg: Mapping[str, Any]) -> dict[str, Any]:
    """What a loaded model is: its name and checkpoint, parameter counts (the vision tower's apart),
    dtype, the language model's and the vision tower's sizes, and the tokenizer's length."""
    text, vision = model.config.text_config, model.config.vision_config
    counts = count_parameters(model)
    return {
        "name": cfg.get("name"),
        "path": None if cfg.get("path") is None or cfg.get("random_init") else str(cfg.get("path")),
        "random_init": bool(cfg.get("random_init", False)),
        "parameters": counts["total"],
        "trainable": counts["trainable"],
        "vision_parameters": sum(p.numel() for p in model.model.visual.parameters()),
        "dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
        "text": {
            "layers": text.num_hidden_layers,
            "hidden_size": text.hidden_size,
            "attention_heads": text.num_attention_heads,
            "kv_heads": text.num_key_value_heads,
            "vocab_size": text.vocab_size,
        },
        "vision": {
            "layers": vision.depth,
            "hidden_size": vision.hidden_size,
            "out_hidden_size": vision.out_hidden_size,
            "patch_size": vision.patch_size,
        },
        "tokenizer_size": len(processor.tokenizer),
    }
