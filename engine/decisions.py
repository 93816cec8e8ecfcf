"""The streaming engine's decisions: at each step, per row, silence or a reply from the two
decision logits (``p = softmax(l_S, l_R)[R] >= threshold``, or drawn from that two-way
distribution at ``temperature`` with ``sample=True``, for RL), and the reply of every row that
fired decoded token by token until ``<|im_end|>`` or ``max_new_tokens``.

Reply tokens are drawn where the logits are (:func:`draw_tokens`): a race of exponential clocks,
``argmax(log_softmax(logits / T) - log E)`` with ``E ~ Exponential(1)`` from a generator on the
logits' device, whose winner is distributed as the softmax (the Gumbel-max trick); greedy decoding
takes the argmax. Each round of a reply reads back one token id and its log-prob per row, not the
vocabulary's logits (151,936 floats a row in Qwen3-VL).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from engine.render import TurnRenderer


def draw_tokens(
    logits: torch.Tensor, temperature: float, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per row of ``logits`` (rows x vocabulary, on any device) and its log-prob, both on
    that device: drawn from ``softmax(logits / temperature)`` with ``generator`` (on the same
    device), or the argmax of ``log_softmax(logits)`` when ``generator`` is ``None``. Tokens at
    ``-inf`` are never drawn. The log-prob is ``log_softmax`` at the token, at ``temperature``
    when drawing."""
    if generator is None:
        logp = torch.log_softmax(logits.float(), dim=-1)
        tokens = logits.argmax(dim=-1)  # the logits' (their log_softmax may round two apart into a tie)
    else:
        logp = torch.log_softmax(logits.float() / temperature, dim=-1)
        clocks = torch.empty_like(logp).exponential_(generator=generator)
        # a clock at exactly 0 (possible in float32) would win whatever its token's probability
        tokens = (logp - clocks.clamp_min_(torch.finfo(clocks.dtype).tiny).log_()).argmax(dim=-1)
    return tokens, logp.gather(-1, tokens[:, None])[:, 0]


def decision_probability(logits: torch.Tensor, silence_id: int, response_id: int) -> torch.Tensor:
    """P(</Response>) from the two decision logits (last dim = vocabulary)."""
    pair = torch.stack([logits[..., silence_id], logits[..., response_id]], dim=-1).float()
    return torch.softmax(pair, dim=-1)[..., 1]


#: Mixed into ``seed`` for the reply tokens' generator, so that it is not the decisions' stream
#: (on the CPU both would be the same Mersenne twister from the same seed).
TOKEN_SEED_MIX = 0x9E3779B97F4A7C15


class Decider:
    """Decisions and reply tokens under the engine's config (``threshold``, ``sample``,
    ``temperature``; ``seed`` seeds the decisions' ``generator`` on the host and the reply tokens'
    ``token_generator`` on ``device``, both drawn from across the engine's runs)."""

    def __init__(self, renderer: TurnRenderer, cfg, device: torch.device | str = "cpu"):
        self.renderer = renderer
        self.cfg = cfg  # the engine's EngineConfig, read at each call
        self.generator = torch.Generator().manual_seed(cfg.seed)
        self.token_generator = torch.Generator(device).manual_seed((cfg.seed ^ TOKEN_SEED_MIX) % 2**64)
        self._banned: dict[torch.device, torch.Tensor] = {}

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

    def next_tokens(self, logits: torch.Tensor) -> list[tuple[int, float]]:
        """Each row's next reply token among the text tokens (drawn with ``token_generator``, or
        the argmax) and its log-prob, from logits on the device (rows x vocabulary): one read back
        for every row."""
        banned = self._banned.get(logits.device)
        if banned is None:
            banned = self._banned[logits.device] = torch.tensor(
                self.renderer.banned_text_ids, device=logits.device
            )
        masked = logits.index_fill(-1, banned, float("-inf"))
        generator = self.token_generator if self.cfg.sample else None
        tokens, logp = draw_tokens(masked, self.cfg.temperature, generator)
        ids, lps = torch.stack([tokens.double(), logp.double()]).tolist()
        return [(int(t), lp) for t, lp in zip(ids, lps, strict=True)]

    def next_token(self, logits: torch.Tensor) -> tuple[int, float]:
        """:meth:`next_tokens` of one row of logits (the vocabulary's)."""
        return self.next_tokens(logits[None])[0]

    # hot path: one call per firing step; its forward per reply token is what costs
    def replies(
        self,
        forward: Callable[[list[list[int]]], torch.Tensor],  # logits on the device
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
            drawn = self.next_tokens(out)  # every row's: a row's draw never depends on another's logits
            for b in list(live):
                if len(texts[b]) == self.cfg.max_new_tokens:
                    live.discard(b)
                    continue
                tok, lp = drawn[b]
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
