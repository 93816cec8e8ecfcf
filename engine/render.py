"""Turn renderer: a stream record + its frames -> the multi-turn token sequence the model sees.

Turn format (docs/design.md), one user turn and one assistant turn per decision step::

    <|im_start|>user\\n[history][instruction\\n]<12.0 seconds><|vision_start|><|image_pad|>*N<|vision_end|><|im_end|>\\n
    <|im_start|>assistant\\n</Silence><|im_end|>\\n                       (or)
    <|im_start|>assistant\\n</Response> [category] text<|im_end|>\\n

- The timestamp is the time elapsed since the clip start, one decimal, in seconds, in every window
  of a stream too (``stream_steps.step_windows``: SFT and GRPO windows keep the clip clock, as at
  evaluation).
- The instruction goes in the user turn of the step it is given at (``instruction_time``, default
  the first step); a training window that starts later repeats it (and the history) in its first turn.
- The frame of a step is the one on screen at that step's time (see ``data_builders.video``).
- A target lands on the first step at or after its time (``stream_steps.target_step``): the model can
  only speak once it has seen the evidence. Targets landing on the same step are joined into one
  response.
- ``labels`` are the assistant tokens only (decision token, response text, ``<|im_end|>``); the
  newline after ``<|im_end|>`` and every user token are -100.
- ``decision_mask`` has one entry per token: -1 everywhere except at each step's decision token,
  where it holds the class (0 = ``</Silence>``, 1 = ``</Response>``). The logits that predict it
  sit one position earlier (``decision_positions - 1``).

Each piece is tokenized on its own, in the order above, so the streaming engine builds exactly the
same ids step by step as the renderer does for a whole window. The turn markers are the only special
tokens: every text piece (instruction, later turns, history, response text, category, timestamp) is
tokenized with special-token strings split into ordinary tokens (:meth:`TurnRenderer.encode`), so a
``<|im_end|>``, ``<|image_pad|>`` or ``</Silence>`` written in a record or typed in the demo stays
text and cannot end a turn or add an image placeholder.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from data_builders.config import RenderConfig
from data_builders.records import Stream, Target
from data_builders.stream_steps import step_times, target_step
from data_builders.turn_grammar import RESPONSE, SILENCE

SILENCE_CLASS, RESPONSE_CLASS = 0, 1
#: Texts whose token ids ``TurnRenderer.encode`` keeps (timestamps, instructions, turn markers).
ENCODE_CACHE_SIZE = 65536


@dataclass
class Rendered:
    """One rendered window. Tensors are 1-D over tokens unless noted."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    labels: torch.Tensor
    decision_mask: torch.Tensor
    mm_token_type_ids: torch.Tensor
    pixel_values: torch.Tensor  # (sum of patches, C * T * P * P)
    image_grid_thw: torch.Tensor  # (frames, 3)
    step_times: list[float]  # record-axis time of each step in the window
    decision_positions: list[int]  # index of each step's decision token
    stream_id: str = ""
    first_step: int = 0

    def as_model_inputs(self) -> dict[str, torch.Tensor]:
        """Batch-of-one tensors for ``model(**inputs)``."""
        return {
            "input_ids": self.input_ids[None],
            "attention_mask": self.attention_mask[None],
            "mm_token_type_ids": self.mm_token_type_ids[None],
            "pixel_values": self.pixel_values,
            "image_grid_thw": self.image_grid_thw,
        }


def timestamp_text(elapsed: float) -> str:
    """The timestamp of a user turn: seconds since the clip start, one decimal.

    >>> timestamp_text(12.0)
    '<12.0 seconds>'
    """
    return f"<{elapsed:.1f} seconds>"


class TurnRenderer:
    """Builds token ids for turns; shared by the training collator and the streaming engine."""

    def __init__(self, processor, cfg: RenderConfig | None = None, steps_per_second: float = 1.0):
        self.processor = processor
        self.tokenizer = processor.tokenizer
        self.cfg = cfg or RenderConfig()
        self._encoded: dict[str, list[int]] = {}
        #: Decision steps per second of video: the data's in training, the benchmark's in evaluation.
        self.steps_per_second = float(steps_per_second)
        if not self.steps_per_second > 0:
            raise ValueError(f"steps_per_second must be positive, got {steps_per_second}")
        tok = self.tokenizer
        self.silence_id = tok.convert_tokens_to_ids(SILENCE)
        self.response_id = tok.convert_tokens_to_ids(RESPONSE)
        self.im_start_id = tok.convert_tokens_to_ids("<|im_start|>")
        self.im_end_id = tok.convert_tokens_to_ids("<|im_end|>")
        self.image_pad_id = tok.convert_tokens_to_ids("<|image_pad|>")
        for name, i in [("</Silence>", self.silence_id), ("</Response>", self.response_id)]:
            if i is None or i == tok.unk_token_id:
                raise ValueError(f"tokenizer has no {name} token: build the model with engine.model")
        self.merge = processor.image_processor.merge_size
        self._user_open = self._markup("<|im_start|>user\n")
        self._vision_open = self._markup("<|vision_start|>")
        self._vision_close_turn_end = self._markup("<|vision_end|><|im_end|>\n")
        self.assistant_open = self._markup("<|im_start|>assistant\n")
        banned = [
            "<|image_pad|>",
            "<|video_pad|>",
            "<|vision_start|>",
            "<|vision_end|>",
            "<|im_start|>",
            "<|endoftext|>",
            SILENCE,
            RESPONSE,
        ]
        #: Tokens a response text may not contain (vision placeholders, turn and decision markers):
        #: the engine masks them when decoding and the GRPO loss uses the same masked distribution.
        self.banned_text_ids = sorted({i for i in tok.convert_tokens_to_ids(banned) if i is not None})
        #: Tokens no text piece may tokenize to: the markers of the turn grammar.
        self._control_ids = frozenset(self.banned_text_ids) | {self.im_end_id}
        self.turn_end = [self.im_end_id] + self.encode("\n")

    def mask_text_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """Logits for response-text decoding: the banned tokens set to -inf (last dim = vocab)."""
        logits = logits.clone()
        logits[..., self.banned_text_ids] = float("-inf")
        return logits

    def warm(self, texts: list[str]) -> None:
        """Encode the texts not memoized yet in one batched tokenizer call (the streaming engine warms
        a stream's timestamps before its first step, so no step waits on the tokenizer)."""
        missing = list(dict.fromkeys(t for t in texts if t not in self._encoded))
        if not missing:
            return
        if len(self._encoded) + len(missing) > ENCODE_CACHE_SIZE:
            self._encoded.clear()
        self._encoded.update(zip(missing, self._text_ids(missing), strict=True))

    def encode(self, text: str) -> list[int]:
        """Token ids of the text ``text`` (no special tokens added; a special token's string in it
        split into ordinary tokens), memoized: the streaming engine encodes the same timestamps and
        instructions at every step of every stream."""
        return list(self._memo(text))

    def _memo(self, text: str) -> list[int]:
        """The memoized ids of ``text`` themselves (read them, never change them)."""
        ids = self._encoded.get(text)
        if ids is None:
            if len(self._encoded) >= ENCODE_CACHE_SIZE:
                self._encoded.clear()
            ids = self._encoded[text] = self._text_ids([text])[0]
        return ids

    def _text_ids(self, texts: list[str]) -> list[list[int]]:
        """Ids of text pieces, special-token strings split; a piece that still holds a marker of the
        turn grammar (a tokenizer that cannot split them) raises ``ValueError`` naming it."""
        batch = self.tokenizer(texts, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        for text, ids in zip(texts, batch, strict=True):
            if not self._control_ids.isdisjoint(ids):
                raise ValueError(
                    f"the text {text[:80]!r} tokenizes to a marker of the turn format; this tokenizer "
                    "cannot keep special-token strings as text"
                )
        return batch

    def _markup(self, text: str) -> list[int]:
        """Ids of the turn format's own markup (its special tokens kept special)."""
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def answer_ids(self, text: str) -> list[int]:
        """Ids of an assistant turn's text (:meth:`assistant_text`): the decision token, then the
        response as text."""
        if text.startswith(RESPONSE):
            return [self.response_id, *self._memo(text[len(RESPONSE) :])]
        if text != SILENCE:
            raise ValueError(f"an assistant turn starts with {SILENCE} or {RESPONSE}, got {text[:40]!r}")
        return [self.silence_id]

    # -- pieces -------------------------------------------------------------------------------

    def image_tokens(self, grid_thw: torch.Tensor | Sequence[int]) -> int:
        """Placeholder tokens of one frame: grid_t * grid_h * grid_w / merge_size^2."""
        t, h, w = (int(x) for x in grid_thw)
        return t * h * w // (self.merge**2)

    def user_turn(self, elapsed: float, n_image_tokens: int, context: str | None = None) -> list[int]:
        """Ids of one user turn; ``context`` (history / instruction) precedes the timestamp."""
        head = self._user_open + self._memo(context + "\n") if context else self._user_open
        pads = [self.image_pad_id] * n_image_tokens
        return (
            head
            + self._memo(timestamp_text(elapsed))
            + self._vision_open
            + pads
            + self._vision_close_turn_end
        )

    def assistant_text(self, texts: list[str] | None, category: str | None = None) -> str:
        if not texts:
            return SILENCE
        tag = f"[{category}] " if category else ""
        return f"{RESPONSE} {tag}{' '.join(texts)}"

    def history_text(self, stream: Stream) -> str | None:
        """The personal history as text lines ``[t s] text``, most recent lines within the budget."""
        if not stream.history:
            return None
        lines, used = [], 0
        for entry in sorted(stream.history, key=lambda h: h.time, reverse=True):
            line = f"[{entry.time:.0f} s] {entry.text}"
            cost = len(self.encode(line)) + 1
            if used + cost > self.cfg.history_budget_tokens:
                break
            lines.append(line)
            used += cost
        return "Personal history:\n" + "\n".join(reversed(lines))

    def encode_frames(self, frames: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """(pixel_values, image_grid_thw) of frames given as (N, H, W, 3) uint8, one image per frame."""
        out = self.processor.image_processor(images=list(frames), return_tensors="pt")
        return out["pixel_values"], out["image_grid_thw"]

    # -- streams ------------------------------------------------------------------------------

    def step_plan(self, stream: Stream) -> tuple[list[float], list[str]]:
        """Step times and the assistant text at every step of the whole stream."""
        times = step_times(stream, self.steps_per_second)
        texts: dict[int, list[str]] = {}
        cats: dict[int, str | None] = {}
        for target in stream.targets:
            k = target_step(stream, target, self.steps_per_second)
            texts.setdefault(k, []).append(target.content)
            cats.setdefault(k, target.category)
        return times, [self.assistant_text(texts.get(k), cats.get(k)) for k in range(len(times))]

    def instruction_step(self, stream: Stream) -> int:
        if stream.instruction_time is None:
            return 0
        return target_step(stream, Target(time=stream.instruction_time, content=""), self.steps_per_second)

    def context_for_step(
        self, stream: Stream, step: int, window_start: int, instruction: bool = True
    ) -> str | None:
        """History and instruction text carried by the user turn of ``step`` (without the
        instruction when ``instruction`` is false: ``engine.probes`` asks its own questions)."""
        parts = []
        if step == window_start:
            history = self.history_text(stream)
            if history:
                parts.append(history)
        if instruction and step == max(self.instruction_step(stream), window_start):
            parts.append(stream.instruction)
        if instruction:
            parts += [text for k, text in self.later_turns(stream) if step == max(k, window_start)]
        return "\n".join(parts) if parts else None

    def context_steps(self, stream: Stream, window_start: int, instruction: bool = True) -> set[int]:
        """The steps at which :meth:`context_for_step` can return text (it returns ``None`` at every
        other): the window's start, the instruction's step and the later turns' steps."""
        steps = {window_start}
        if instruction:
            steps.add(max(self.instruction_step(stream), window_start))
            steps.update(max(k, window_start) for k, _ in self.later_turns(stream))
        return steps

    def later_turns(self, stream: Stream) -> list[tuple[int, str]]:
        """``(step, text)`` of the user's turns after the instruction, ``meta["user_turns"]`` (each
        ``{"time", "content"}`` on the record axis: a later question, a subtitle), on the step each
        lands on (the first at or after its time; one before a window's start is given at the
        start, as the instruction is). A turn equal to the instruction at its time is the
        instruction itself and is not repeated."""
        turns = stream.meta.get("user_turns") or []
        if not isinstance(turns, list):
            raise ValueError(
                f"stream {stream.id}: meta user_turns must be a list, got {type(turns).__name__}"
            )
        out = []
        for i, turn in enumerate(turns):
            time, text = (turn.get("time"), turn.get("content")) if isinstance(turn, dict) else (None, None)
            if isinstance(time, bool) or not isinstance(time, (int, float)) or not isinstance(text, str):
                raise ValueError(
                    f"stream {stream.id}: meta user_turns[{i}] must be {{'time': seconds, 'content': text}}, "
                    f"got {turn!r}"
                )
            if (
                text == stream.instruction
                and stream.instruction_time is not None
                and abs(time - stream.instruction_time) < 1e-6
            ):
                continue
            out.append(
                (target_step(stream, Target(time=float(time), content=""), self.steps_per_second), text)
            )
        return out

    def render(self, stream: Stream, frames: np.ndarray, window: tuple[int, int] | None = None) -> Rendered:
        """Render steps ``window = [start, end)`` (default: all) of a stream. ``frames`` holds one
        frame per step of the window (``frames[i]`` is step ``start + i``)."""
        times, texts = self.step_plan(stream)
        start, end = window or (0, len(times))
        if len(frames) != end - start:
            raise ValueError(f"stream {stream.id}: {len(frames)} frames for {end - start} steps")
        pixel_values, grid = self.encode_frames(frames)
        ids: list[int] = []
        labels: list[int] = []
        decision: list[int] = []
        positions: list[int] = []
        for i, k in enumerate(range(start, end)):
            user = self.user_turn(
                times[k] - stream.clip_start,
                self.image_tokens(grid[i]),
                self.context_for_step(stream, k, start),
            )
            ids += user
            labels += [-100] * len(user)
            decision += [-1] * len(user)
            ids += self.assistant_open
            labels += [-100] * len(self.assistant_open)
            decision += [-1] * len(self.assistant_open)
            answer = self.answer_ids(texts[k]) + [self.im_end_id]
            positions.append(len(ids))
            ids += answer + self.turn_end[1:]
            labels += answer + [-100] * (len(self.turn_end) - 1)
            cls = RESPONSE_CLASS if answer[0] == self.response_id else SILENCE_CLASS
            decision += [cls] + [-1] * (len(answer) - 1 + len(self.turn_end) - 1)
        input_ids = torch.tensor(ids, dtype=torch.long)
        return Rendered(
            input_ids=input_ids,
            attention_mask=torch.ones_like(input_ids),
            labels=torch.tensor(labels, dtype=torch.long),
            decision_mask=torch.tensor(decision, dtype=torch.long),
            mm_token_type_ids=(input_ids == self.image_pad_id).to(torch.int32),
            pixel_values=pixel_values,
            image_grid_thw=grid,
            step_times=times[start:end],
            decision_positions=positions,
            stream_id=stream.id,
            first_step=start,
        )
