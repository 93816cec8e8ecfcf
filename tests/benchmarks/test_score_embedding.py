"""The embedding content scorer with the locally installed MiniLM model (one small test)."""

from __future__ import annotations

from benchmarks.scoring import get_content_scorer
from engine.memory.embedders import default_model_path
from metrics.content import TargetText


def test_embedding_scorer_ranks_paraphrase_above_unrelated():
    assert (default_model_path() / "model.safetensors").exists()
    scorer = get_content_scorer("embedding")
    target = TargetText("Careful, the pan is hot.")
    same = scorer("Careful, the pan is hot.", target)
    para = scorer("Watch out, that pan is very hot!", target)
    other = scorer("The train leaves at nine tomorrow.", target)
    assert abs(same - 1.0) < 1e-5
    assert 0.5 < para < same
    assert 0.0 <= other < 0.3 < para
