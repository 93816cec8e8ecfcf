"""The streaming engine's decisions: at each step, per row, silence or a reply from the two
decision logits (``p = softmax(l_S, l_R)[R] >= threshold``, or drawn from that two-way
distribution at ``temperature`` with ``sample=True``, for RL), and the reply of every row that
fired decoded token by token until ``<|im_end|>`` or ``max_new_tokens``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from engine.render import TurnRenderer


def decision_probability(logits: torch.Tensor, silence_id: int, response_id: int) -> torch.Tensor:
    """P(</Response>) from the two decision logits (last dim = vocabulary)."""
    pair = torch.stack([logits[..., silence_id], logits[..., response_id]], dim=-1).float()
    return torch.softmax(pair, dim=-1)[..., 1]


class Decider:
    """Decisions and reply tokens under the engine's config (``threshold``, ``sample``,
    ``temperature``; ``seed`` seeds ``generator``, drawn from across the engine's runs)."""

    def __init__(self, renderer: TurnRenderer, cfg):
        self.renderer = renderer
        self.cfg = cfg  # the engine's EngineConfig, read at each call
        self.generator = torch.Generator().manual_seed(cfg.seed)

    def choose(
        self, pair: torch.Tensor
    ) -> tuple[list[bool], list[float], list[float], list[tuple[float, float]]]:
        """Per row, from its two decision logits (silence, response): fired, P(response), the
        log-prob of the chosen decision, and the two logits."""
        logits_pair = [tuple(x) for x in pair.tolist()]
        if self.cfg.sample:
            logp = torch.log_softmax(pair / self.cfg.temperature, dim=-1)
            fired_t = torch.multinomial(logp.exp(), 1, generator=self.generator)[:, 0].bool()
            chosen = logp.gather(1, fired_t.long()[:, None])[:, 0].tolist()
            p = torch.softmax(pair, dim=-1)[:, 1].tolist()
            return fired_t.tolist(), p, chosen, logits_pair
        fired, p, chosen = [], [], []
        for silence, response in logits_pair:  # a two-way softmax in plain floats
            d = silence - response
            p_resp = 1.0 / (1.0 + math.exp(d)) if d < 700 else 0.0
            fire = p_resp >= self.cfg.threshold
            top = max(silence, response)
            lse = top + math.log(math.exp(silence - top) + math.exp(response - top))
            fired.append(fire)
            p.append(p_resp)
            chosen.append((response if fire else silence) - lse)
        return fired, p, chosen, logits_pair

    def next_token(self, logits: torch.Tensor) -> tuple[int, float]:
        """A reply's next token (drawn, or the argmax) among the text tokens, and its log-prob."""
        logits = self.renderer.mask_text_logits(logits)
        if self.cfg.sample:
            logp = torch.log_softmax(logits / self.cfg.temperature, dim=-1)
            tok = int(torch.multinomial(logp.exp(), 1, generator=self.generator))
        else:
            logp = torch.log_softmax(logits, dim=-1)
            tok = int(logits.argmax())
        return tok, float(logp[tok])

    # hot path: one call per firing step; its forward per reply token is what costs
    def replies(
        self,
        forward: Callable[[list[list[int]]], torch.Tensor],
        rows: int,
        firing: list[int],
        feed: Callable[[int, list[int], list[bool], list[float]], None],
    ) -> tuple[dict[int, list[int]], dict[int, float]]:
        """Decode the reply of every row in ``firing`` (its response token already fed to the
        result, not yet to the cache), all rows in one ``forward`` of one token each per round:
        each row's reply tokens (without the response token), fed as they come, and the log-prob
        of ``<|im_end|>`` for the rows whose model closed its turn itself (the others hit
        ``max_new_tokens``)."""
        r = self.renderer
        texts: dict[int, list[int]] = {b: [] for b in firing}
        im_end_logprob: dict[int, float] = {}
        step_tokens = {b: [r.response_id] for b in firing}
        live = set(firing)
        for _ in range(self.cfg.max_new_tokens + 1):
            out = forward([step_tokens[b][-1:] if b in live else [] for b in range(rows)])
            for b in list(live):
                if len(texts[b]) == self.cfg.max_new_tokens:
                    live.discard(b)
                    continue
                tok, lp = self.next_token(out[b])
                if tok == r.im_end_id:
                    live.discard(b)
                    im_end_logprob[b] = lp
                    continue
                texts[b].append(tok)
                step_tokens[b].append(tok)
                feed(b, [tok], [True], [lp])
            if not live:
                break
        return texts, im_end_logprob
