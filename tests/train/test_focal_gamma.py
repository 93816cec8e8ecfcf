"""The focal loss's default gamma is written once (issue 59): the SFT schema's default, the trainer's
and the loss functions' all read ``train.sft.config.FOCAL_GAMMA``."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

SFT = Path(__file__).resolve().parents[2] / "train" / "sft"


def _gamma_defaults() -> list[tuple[str, str]]:
    """(file:line, the default's source text) of every default given to a ``gamma`` in train/sft/:
    a parameter's default and a dataclass field's."""
    found = []
    for path in sorted(SFT.glob("*.py")):
        text = path.read_text()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = node.args
                pairs = list(zip(args.args[::-1], args.defaults[::-1], strict=False))
                pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d]
                found += [
                    (f"{path.name}:{d.lineno}", ast.get_source_segment(text, d))
                    for a, d in pairs
                    if a.arg == "gamma"
                ]
            elif (
                isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) == "gamma" and node.value
            ):
                found.append((f"{path.name}:{node.lineno}", ast.get_source_segment(text, node.value)))
    return found


def test_every_focal_gamma_default_reads_the_one_constant():
    found = _gamma_defaults()
    assert len(found) >= 4  # the schema, the trainer, decision_loss, loss_at_labels
    written = [(where, src) for where, src in found if "FOCAL_GAMMA" not in src]
    assert written == []


def test_the_schema_the_trainer_and_the_loss_agree_on_the_default():
    from train.sft.config import FOCAL_GAMMA, LossConfig
    from train.sft.losses import decision_loss, loss_at_labels
    from train.sft.trainer import DecisionTrainer

    defaults = {
        "schema": LossConfig().gamma,
        "trainer": inspect.signature(DecisionTrainer.__init__).parameters["gamma"].default,
        "decision_loss": inspect.signature(decision_loss).parameters["gamma"].default,
        "loss_at_labels": inspect.signature(loss_at_labels).parameters["gamma"].default,
    }
    assert defaults == dict.fromkeys(defaults, FOCAL_GAMMA) and FOCAL_GAMMA == 2.0
