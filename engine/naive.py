"""Naive causal streaming: re-run the whole conversation from scratch at every step.

This is the protocol as the papers' adapted baselines run it (O(T^2) in the number of steps): at
step ``k`` the model reads the instruction, frames ``0..k`` and its own past turns, and the
probability of ``</Response>`` against ``</Silence>`` at the decision position decides. It is the
reference the KV-cache engine is tested against, and a readable statement of the protocol.

The decision probability is the two-way softmax over the decision tokens' logits,
``p = exp(l_R) / (exp(l_R) + exp(l_S))``; the model fires when ``p >= threshold``. A fired turn's
text is decoded greedily until ``<|im_end|>`` (or ``max_new_tokens``).
"""

from __future__ import annotations

import numpy as np
import torch

from data_builders.records import Stream
from engine.decisions import decision_probability
from engine.render import TurnRenderer
from engine.streaming import StepDecision, StreamResult, evidence_turn


class NaiveStreamer:
    """Re-prefills the whole conversation at each step (reference implementation)."""

    def __init__(
        self, model, renderer: TurnRenderer, threshold: float = 0.5, max_new_tokens: int = 32, memory=None
    ):
        self.model = model
        self.memory = memory  # the engine's memory hook (engine.memory), same turns
        self.renderer = renderer
        self.threshold = threshold
        self.max_new_tokens = max_new_tokens

    @torch.no_grad()
    def _logits(self, ids: list[int], pixel_values: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
        input_ids = torch.tensor([ids])
        device = next(self.model.parameters()).device
        out = self.model(
            input_ids=input_ids.to(device),
            attention_mask=torch.ones_like(input_ids).to(device),
            mm_token_type_ids=(input_ids == self.renderer.image_pad_id).int().to(device),
            pixel_values=pixel_values.to(device),
            image_grid_thw=grid.to(device),
        )
        return out.logits[0, -1].float().cpu()

    def run(self, stream: Stream, frames: np.ndarray) -> StreamResult:
        r = self.renderer
        times, _ = r.step_plan(stream)
        times = times[: len(frames)]
        pixel_values, grid = r.encode_frames(frames)
        patches = grid.prod(-1).cumsum(0).tolist()
        history: list[int] = []
        result = StreamResult(stream.id)
        for k, t in enumerate(times):
            block = self.memory.evidence(stream, t, frame=frames[k]) if self.memory else None
            history += evidence_turn(r, block) if block else []
            history += r.user_turn(
                t - stream.clip_start, r.image_tokens(grid[k]), r.context_for_step(stream, k, 0)
            )
            history += r.assistant_open
            pv, g = pixel_values[: patches[k]], grid[: k + 1]
            logits = self._logits(history, pv, g)
            p = float(decision_probability(logits, r.silence_id, r.response_id))
            fired = p >= self.threshold
            answer = [r.response_id if fired else r.silence_id]
            if fired:
                for _ in range(self.max_new_tokens):
                    nxt = int(r.mask_text_logits(self._logits(history + answer, pv, g)).argmax())
                    if nxt == r.im_end_id:
                        break
                    answer.append(nxt)
            text = r.tokenizer.decode(answer, skip_special_tokens=False)
            history += answer + r.turn_end
            result.steps.append(
                StepDecision(
                    k, t, p, fired, text, (float(logits[r.silence_id]), float(logits[r.response_id]))
                )
            )
        return result
