"""Reply tokens drawn where the logits are (engine.decisions.draw_tokens): the softmax's distribution,
log-probs equal to log_softmax at the drawn token, banned tokens never drawn."""

from __future__ import annotations

import pytest
import torch
from scipy.stats import chi2

from engine.decisions import Decider, draw_tokens
from engine.streaming import EngineConfig

#: Chance that a correct sampler fails one chi-square check (each draw set is one test).
ALPHA = 1e-4
DRAWS = 40_000
LOGITS = torch.tensor([2.0, 1.0, 0.5, 0.0, -0.5, -1.0, -2.0, 1.5])


def _chi_square(tokens: torch.Tensor, probs: torch.Tensor) -> float:
    """Pearson's statistic of the drawn tokens' counts against ``probs`` (every cell expected at
    least 5 times: ``DRAWS * min(probs)`` here is over 100)."""
    counts = torch.bincount(tokens, minlength=len(probs)).double()
    expected = probs.double() * len(tokens)
    return float(((counts - expected) ** 2 / expected).sum())


@pytest.mark.parametrize("temperature", [1.0, 0.7, 2.0])
@pytest.mark.parametrize("seed", [0, 1])
def test_draws_follow_the_softmax(temperature, seed):
    """40,000 rows of the same 8 logits, one draw each: the counts pass a chi-square test against
    ``softmax(logits / T)`` at level 1e-4 (7 degrees of freedom: the threshold is the chi-square
    quantile, 25.7), and fail it against the softmax at another temperature."""
    generator = torch.Generator().manual_seed(seed)
    tokens, logp = draw_tokens(LOGITS.expand(DRAWS, -1), temperature, generator)
    threshold = chi2.ppf(1 - ALPHA, df=len(LOGITS) - 1)
    assert _chi_square(tokens, torch.softmax(LOGITS / temperature, -1)) < threshold
    other = torch.softmax(LOGITS / (temperature * 1.3), -1)
    assert _chi_square(tokens, other) > threshold  # the test tells a wrong distribution apart
    expected = torch.log_softmax(LOGITS / temperature, -1)[tokens]
    assert torch.equal(logp, expected)


def test_greedy_takes_the_argmax_with_its_log_prob():
    logits = torch.tensor([[0.1, 3.0, -1.0], [5.0, 4.0, 4.5]])
    tokens, logp = draw_tokens(logits, 1.0, None)
    assert tokens.tolist() == [1, 0]
    assert torch.equal(logp, torch.log_softmax(logits, -1)[[0, 1], [1, 0]])


def test_rows_draw_independently_and_the_seed_repeats_them():
    """Two rows of the same logits draw different sequences; a fresh generator of the same seed
    draws the same tokens again."""
    logits = LOGITS.expand(2, -1)
    draws = [[draw_tokens(logits, 1.0, g)[0].tolist() for _ in range(50)] for g in _generators(7, 2)]
    assert draws[0] == draws[1]
    first, second = zip(*draws[0])
    assert first != second


def _generators(seed: int, n: int) -> list[torch.Generator]:
    return [torch.Generator().manual_seed(seed) for _ in range(n)]


class _Renderer:
    """The one attribute of ``TurnRenderer`` that ``Decider.next_tokens`` reads."""

    banned_text_ids = [0, 7]


def test_reply_tokens_skip_the_banned_ones_and_return_log_softmax_of_the_rest():
    """The engine's reply draw: banned tokens (here 0 and 7, the two likeliest) never come out;
    the log-prob is log_softmax over the allowed tokens at the temperature."""
    decider = Decider(_Renderer(), EngineConfig(sample=True, temperature=1.5, seed=3))
    assert decider.token_generator.device == torch.device("cpu")
    logits = LOGITS.expand(4000, -1)
    drawn = decider.next_tokens(logits)
    allowed = LOGITS.clone()
    allowed[[0, 7]] = float("-inf")
    logp = torch.log_softmax(allowed / 1.5, -1)
    assert {t for t, _ in drawn} == {1, 2, 3, 4, 5, 6}
    assert all(lp == float(logp[t]) for t, lp in drawn)
    probs = logp.exp()[1:7] / logp.exp()[1:7].sum()
    tokens = torch.tensor([t - 1 for t, _ in drawn])
    assert _chi_square(tokens, probs) < chi2.ppf(1 - ALPHA, df=5)
