"""``train.safe_load`` beyond the resumes of ``test_deepspeed_resume.py``: a DeepSpeed config that
would read checkpoints past the guarded checkpoint engine is refused, not left unguarded."""

from __future__ import annotations

import pytest

from train.safe_load import guard_deepspeed_loads


class _Engine:
    """The two things :func:`guard_deepspeed_loads` reads of a DeepSpeed engine."""

    def __init__(self, universal: bool):
        self.universal = universal
        self.checkpoint_engine = object()

    def load_universal_checkpoint(self) -> bool:
        return self.universal


def test_a_universal_checkpoint_config_is_refused():
    with pytest.raises(ValueError, match=r"checkpoint.load_universal=true: .* weights_only=False"):
        guard_deepspeed_loads(_Engine(universal=True))


def test_guarding_twice_wraps_the_engine_once():
    engine = _Engine(universal=False)
    inner = engine.checkpoint_engine
    guard_deepspeed_loads(guard_deepspeed_loads(engine))
    assert engine.checkpoint_engine.inner is inner
