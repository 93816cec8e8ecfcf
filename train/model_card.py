"""The model card (``README.md``) and chat template of an exported model (``train.export``).

The card follows the hub's format: YAML front matter (``base_model``, ``pipeline_tag``,
``library_name``, ``tags``, ``datasets`` and a ``model-index`` with one result per evaluation of
these weights: its benchmark, protocol mode, split and figures), then how to run the model in plain
``transformers`` (:data:`STREAM_SNIPPET`, also in docs/evaluation.md), the training config and the
data mixture.

Nothing of the training machine is published: the config loses its ``paths`` group and every
folder or file of the machine (``data.dir``, ``sft.output_dir``, a local ``init``, ...) reads
``<local path>``. Text that came from a config or an evaluation (a ``run_name``, a source name) cannot
end the card's code blocks or bring HTML or links into the page: a code block's fence is longer than
any run of backticks inside it, and text outside code blocks is escaped (:func:`markdown_text`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

#: The turn format as a chat template: a user turn's text parts and images (each image one
#: ``<|vision_start|><|image_pad|><|vision_end|>``, expanded by the processor), an assistant turn's
#: text (``</Silence>`` or ``</Response> text``), and the assistant opening as the generation prompt.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string -%}{{ message['content'] }}"
    "{%- else -%}{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'image' -%}{{ '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{%- elif part['type'] == 'text' -%}{{ part['text'] }}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{{ '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)

#: A video streamed through an exported model in plain ``transformers``, with the decisions of
#: ``eval.run`` (KV cache reused step by step: ``cache``, formerly ``past_key_values``, M-RoPE positions from ``get_rope_index`` plus a
#: running offset, the decision from the two decision-token logits, greedy reply decoding).
STREAM_SNIPPET = """\
import json, math
import av, torch
from PIL import Image
from transformers import AutoModelForImageTextToText, AutoProcessor

MODEL = "exported-model"  # the folder train.export wrote (or huggingface_hub.snapshot_download(repo_id))
VIDEO = "video.mp4"
INSTRUCTION = "Tell me when the red square appears."
THRESHOLD = 0.5  # speak when P(</Response>) at the decision token is at least this

processor = AutoProcessor.from_pretrained(MODEL)
model = AutoModelForImageTextToText.from_pretrained(MODEL).eval()
tok = processor.tokenizer
silence, response, im_end = tok.convert_tokens_to_ids(["</Silence>", "</Response>", "<|im_end|>"])
banned = tok.convert_tokens_to_ids(
    [
        "<|image_pad|>",
        "<|video_pad|>",
        "<|vision_start|>",
        "<|vision_end|>",
        "<|im_start|>",
        "<|endoftext|>",
        "</Silence>",
        "</Response>",
    ]
)
max_pixels = json.load(open(f"{MODEL}/render.json"))["max_pixels"]  # the frame size it was trained at


def frames(path):  # (second, frame on screen then), one a second, resized as in training
    container = av.open(path)
    stream = container.streams.video[0]
    start, step, last = float((stream.start_time or 0) * stream.time_base), 0, None
    for frame in container.decode(stream):
        t = float(frame.time) - start
        while last is not None and t > step + 1e-6:
            yield step, last
            step += 1
        w, h = frame.width, frame.height
        s = min(1.0, math.sqrt(max_pixels / (w * h)))
        image = frame.to_image()
        last = image if s == 1.0 else image.resize((max(1, int(w * s)), max(1, int(h * s))), Image.BILINEAR)
    while last is not None and t + 1e-6 >= step:
        yield step, last
        step += 1


cache, offset, pending = None, 0, []  # KV cache, next M-RoPE position, last turn's closing tokens
with torch.no_grad():
    for second, image in frames(VIDEO):
        text = f"{INSTRUCTION}\\n<{second:.1f} seconds>" if second == 0 else f"<{second:.1f} seconds>"
        turn = [{"role": "user", "content": [{"type": "text", "text": text}, {"type": "image"}]}]
        prompt = processor.apply_chat_template(turn, add_generation_prompt=True)
        inputs = processor(text=[prompt], images=[image], return_tensors="pt")
        ids = torch.cat([torch.tensor([pending], dtype=torch.long), inputs.input_ids], dim=1)
        mm = (ids == processor.image_token_id).int()  # which tokens are the image's
        positions, _ = model.model.get_rope_index(ids, mm, image_grid_thw=inputs.image_grid_thw)
        positions = positions + offset
        offset = int(positions.max()) + 1
        out = model(
            input_ids=ids,
            pixel_values=inputs.pixel_values,
            image_grid_thw=inputs.image_grid_thw,
            mm_token_type_ids=mm,
            position_ids=positions,
            cache=cache,
            use_cache=True,
        )
        cache = out.cache
        p_response = torch.softmax(out.logits[0, -1, [silence, response]].double(), dim=-1)[1]
        if p_response < THRESHOLD:
            pending = [silence, im_end] + tok("\\n")["input_ids"]
            continue
        reply = [response]
        while True:  # greedy decoding of the reply, fed token by token into the same cache
            out = model(
                input_ids=torch.tensor([reply[-1:]]),
                position_ids=torch.full((3, 1, 1), offset),
                cache=cache,
                use_cache=True,
            )
            cache, offset = out.cache, offset + 1
            logits = out.logits[0, -1].clone()
            logits[banned] = -float("inf")
            if len(reply) > 32 or int(logits.argmax()) == im_end:
                break
            reply.append(int(logits.argmax()))
        pending = [im_end] + tok("\\n")["input_ids"]
        print(json.dumps({"time": float(second), "text": tok.decode(reply[1:]).strip()}))
"""


#: What a published folder or file of the training machine reads as.
LOCAL_PATH = "<local path>"
#: Suffixes of the files a config names (records, videos, weights, configs).
_FILE_SUFFIXES = frozenset({".jsonl", ".json", ".yaml", ".yml", ".parquet", ".csv", ".txt", ".mp4", ".pt"})
_MD_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "|": "\\|", "`": "\\`", "[": "\\[", "]": "\\]"}


def markdown_text(value: Any) -> str:
    """``value`` as text for a line or a table cell of the card: one line, with no HTML, code span,
    link or cell break of its own (``<``, ``>``, ``&``, backticks, brackets and ``|`` escaped)."""
    text = " ".join(str(value).split())
    return "".join(_MD_ESCAPES.get(c, c) for c in text)


def code_block(text: str, lang: str = "") -> str:
    """``text`` as a fenced code block whose fence no line of ``text`` can close."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{lang}\n{text}{'' if text.endswith(chr(10)) else chr(10)}{fence}"


def is_local_path(value: str, key: str = "") -> bool:
    """Whether a config value names a folder or file of the machine (a hub id ``org/name`` does not)."""
    if key in ("dir", "root", "records") or key.endswith("_dir"):
        return True
    if value.startswith(("/", "~", "./", "../", "$")) or value.count("/") > 1:
        return True
    return "/" in value and (Path(value).suffix in _FILE_SUFFIXES or Path(value).exists())


def public_config(value: Any, key: str = "") -> Any:
    """The run's config without the training machine's folders: no ``paths`` group, and every
    local folder or file :data:`LOCAL_PATH`."""
    if isinstance(value, dict):
        return {k: public_config(v, str(k)) for k, v in value.items() if k != "paths"}
    if isinstance(value, list):
        return [public_config(v, key) for v in value]
    if isinstance(value, str) and value and is_local_path(value, key):
        return LOCAL_PATH
    return value


def _public_records(records: str) -> str:
    """An evaluation's records as the card shows them: a file's name, not where it lay."""
    return Path(records).name if is_local_path(records) else records


def _flat_figures(metrics: dict) -> dict[str, float]:
    return {
        k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
    }


def evaluations_of(weights: str | None, roots: list[Path]) -> list[dict[str, Any]]:
    """The evaluations of the weights with sha256 ``weights`` under ``roots``: every ``metrics.json``
    whose ``config.yaml`` beside it records those weights (an evaluation of other weights at the same
    path is left out), with its benchmark, protocol mode, records and figures."""
    found, seen = [], set()
    for root in roots:
        for metrics_file in sorted(root.rglob("metrics.json")) if root.is_dir() else []:
            config = metrics_file.parent / "config.yaml"
            if not config.is_file() or metrics_file.resolve() in seen:
                continue
            cfg = yaml.safe_load(config.read_text(encoding="utf-8")) or {}
            if weights is None or cfg.get("weights") != weights:
                continue
            seen.add(metrics_file.resolve())
            bench = cfg.get("benchmark") or {}
            found.append(
                {
                    "benchmark": bench.get("name"),
                    "protocol_mode": bench.get("protocol_mode", "streaming"),
                    "records": str(
                        cfg.get("records") or f"{(cfg.get('data') or {}).get('name')}/{cfg.get('split')}"
                    ),
                    "threshold": cfg.get("threshold"),
                    "figures": _flat_figures(json.loads(metrics_file.read_text(encoding="utf-8"))),
                }
            )
    return found


def _run_config(run_dir: Path | None) -> dict[str, Any]:
    if run_dir is None or not (run_dir / "config.yaml").is_file():
        return {}
    return yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8")) or {}


def base_model(config: dict[str, Any]) -> str | None:
    """The hub id the run started from: GRPO's ``init`` or ``model.path`` when it is one
    (``org/name``, not a local folder); a local start (an earlier run's checkpoint, e.g. the SFT
    ``final/`` a GRPO run improves) is followed to its own run's config."""
    from engine.checkpoints import run_dir_of

    init = config.get("init") if config.get("init") not in (None, "random") else None
    path = str(init or (config.get("model") or {}).get("path") or "")
    if path and Path(path).exists():
        run = run_dir_of(path)
        return base_model(_run_config(run)) if run is not None else None
    return path if path.count("/") == 1 and not path.startswith((".", "/")) else None


def mixture_sources(config: dict[str, Any]) -> dict[str, dict]:
    """The sources the run trained on: the ``mixture.json`` of its ``data.dir`` (what the mixture
    took of each), else the data group's list."""
    data = config.get("data") or {}
    summary = Path(str(data.get("dir"))) / "mixture.json"
    if data.get("dir") and summary.is_file():
        return json.loads(summary.read_text(encoding="utf-8")).get("sources") or {}
    return data.get("sources") or {}


def front_matter(config: dict[str, Any], evaluations: list[dict], name: str) -> dict[str, Any]:
    """The card's YAML front matter (hub metadata and the model-index)."""
    stage = "grpo" if "grpo" in config else "sft"
    sources = sorted(mixture_sources(config))
    meta: dict[str, Any] = {}
    if base_model(config):
        meta["base_model"] = base_model(config)
    meta |= {
        "pipeline_tag": "image-text-to-text",
        "library_name": "transformers",
        "tags": ["video", "streaming", "proactive-assistant", "qwen3_vl", stage],
        "datasets": sources,
    }
    results = [
        {
            "task": {"type": "image-text-to-text", "name": "Proactive streaming response"},
            "dataset": {
                "name": f"{e['benchmark']} ({e['protocol_mode']})",
                "type": e["benchmark"],
                "config": e["protocol_mode"],
                "split": _public_records(e["records"]),
            },
            "metrics": [
                {
                    "type": k,
                    "name": k,
                    "value": v,
                    "args": {"protocol_mode": e["protocol_mode"], "threshold": e["threshold"]},
                }
                for k, v in e["figures"].items()
            ],
        }
        for e in evaluations
    ]
    if results:
        meta["model-index"] = [{"name": name, "results": results}]
    return meta


def _mixture(config: dict[str, Any]) -> str:
    data = config.get("data") or {}
    listed = data.get("sources") or {}
    rows = ["| source | weight | records |", "|---|---|---|"]
    for k, v in sorted(mixture_sources(config).items()):
        cells = [k, (listed.get(k) or {}).get("weight", ""), v.get("taken", v.get("count"))]
        rows.append("| " + " | ".join(map(markdown_text, cells)) + " |")
    name, splits = markdown_text(data.get("name")), markdown_text(data.get("splits"))
    return f"Mixture {name}, split by video {splits}:\n\n" + "\n".join(rows)


def model_card(run_dir: Path | None, evaluations: list[dict], name: str) -> str:
    """The whole ``README.md`` of an exported model."""
    config = _run_config(run_dir)
    meta = front_matter(config, evaluations, name)
    stage = "GRPO" if "grpo" in config else "SFT"
    table = ["| benchmark | protocol mode | records | threshold | figures |", "|---|---|---|---|---|"]
    for e in evaluations:
        figures = ", ".join(f"{k} {v:.2f}" for k, v in e["figures"].items())
        cells = [e["benchmark"], e["protocol_mode"], _public_records(e["records"]), e["threshold"], figures]
        table.append("| " + " | ".join(map(markdown_text, cells)) + " |")
    parts = [
        "---\n" + yaml.safe_dump(meta, sort_keys=False) + "---",
        f"# {markdown_text(name)}",
        "A proactive streaming video assistant (Qwen3-VL): it watches a video one frame a second and at "
        "every second either stays silent (`</Silence>`) or speaks (`</Response> text`). Trained with "
        f"{stage}{' from ' + markdown_text(meta['base_model']) if 'base_model' in meta else ''}.",
        "## How to run it\n\nPlain `transformers` (and PyAV for the video): each second's frame and "
        "timestamp go in as a user turn, the KV cache is reused from step to step with M-RoPE "
        "positions from `get_rope_index` plus a running offset, the decision is read from the "
        "logits of the two decision tokens, and a reply is decoded greedily. Each reply prints as "
        "one JSON line.\n\n```python\n" + STREAM_SNIPPET + "```",
        "## Evaluation\n\n"
        + ("\n".join(table) if evaluations else "No evaluation of these weights was found."),
        "## Training\n\n"
        + _mixture(config)
        + "\n\nThe run's config (folders of the training machine read "
        + f"`{LOCAL_PATH}`):\n\n"
        + code_block(yaml.safe_dump(public_config(config), sort_keys=False), "yaml"),
    ]
    return "\n\n".join(parts) + "\n"
