"""Decision loss: the gamma=0 identity with the model's own cross-entropy, a hand-computed focal
value, class weights from known counts, dynamic weights, logged metrics."""

from __future__ import annotations

import math

import pytest
import torch

from data_builders.config import RenderConfig
from data_builders.frames import stream_frames
from data_builders.record_io import load_streams
from engine.render import TurnRenderer
from train.sft.data import WindowCollator
from train.sft.losses import (
    WEIGHT_MODES,
    class_weights,
    decision_loss,
    decision_metrics,
    loss_at_labels,
    selected_logits,
)


def test_class_weights_from_known_counts():
    # 15 silent steps, 5 responses: w = N / (C n_c) = 20 / 30, 20 / 10; count-weighted mean 1
    w = class_weights([15, 5])
    assert w.tolist() == pytest.approx([2 / 3, 2.0])
    assert float((w * torch.tensor([15.0, 5.0])).sum() / 20) == pytest.approx(1.0)
    # the toy training split: 19 silent + 1 response per positive, 20 silent per negative
    w = class_weights([7030, 270])
    assert w.tolist() == pytest.approx([7300 / (2 * 7030), 7300 / (2 * 270)])
    assert class_weights([3, 1], power=0.0).tolist() == [1.0, 1.0]
    half = class_weights([16, 4], power=0.5)  # w ~ n^-1/2: 1/4 vs 1/2, normalized over 20
    assert half.tolist() == pytest.approx([20 / (16 * 0.25 + 4 * 0.5) * 0.25, 20 / 6 * 0.5])
    assert class_weights([8, 0]).tolist() == [1.0, 0.0]


def test_dynamic_weights_follow_the_batch():
    classes = torch.tensor([0, 0, 0, 1])
    assert WEIGHT_MODES["dynamic"](None, classes, 1.0).tolist() == pytest.approx([4 / 6, 2.0])
    assert WEIGHT_MODES["none"](None, classes, 1.0).tolist() == [1.0, 1.0]
    with pytest.raises(ValueError, match="stats.json"):
        WEIGHT_MODES["static"](None, classes, 1.0)


def _two_position_example():
    """Vocabulary of 4 (ids 2 = silence, 3 = response); sequence of 3 tokens: position 0 predicts a
    silence decision at 1, position 1 predicts a response decision at 2. Position 2 has no target."""
    logits = torch.tensor([[[0.0, 0.0, 2.0, 0.0], [1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0]]])
    labels = torch.tensor([[-100, 2, 3]])
    decision = torch.tensor([[-1, 0, 1]])
    return logits, labels, decision


def test_hand_computed_focal_value():
    logits, labels, decision = _two_position_example()
    p_sil = math.exp(2) / (math.exp(2) + 3)  # softmax over the full vocabulary of 4
    p_res = math.e / (2 * math.e + 2)
    w = torch.tensor([0.5, 3.0])
    expected = (0.5 * (1 - p_sil) ** 2 * -math.log(p_sil) + 3.0 * (1 - p_res) ** 2 * -math.log(p_res)) / 2
    parts = decision_loss(logits, labels, decision, decision_ids=(2, 3), gamma=2.0, weights=w)
    assert float(parts.loss) == pytest.approx(expected, rel=1e-6)
    assert (parts.n_decisions, parts.n_text) == (2, 0)
    assert float(parts.decision_ce_sum) == pytest.approx(-math.log(p_sil) - math.log(p_res), rel=1e-6)
    # predicted classes from the two decision logits: silence (2 > 0) and response (1 >= 0)
    assert parts.confusion.tolist() == [[1, 0], [0, 1]]
    # part weights scale the decision part; n_items sets the divisor
    heavy = decision_loss(
        logits, labels, decision, decision_ids=(2, 3), gamma=2.0, weights=w, decision_weight=2.0, n_items=4
    )
    assert float(heavy.loss) == pytest.approx(expected * 2 * 2 / 4, rel=1e-6)


def test_text_tokens_keep_plain_cross_entropy():
    logits, labels, decision = _two_position_example()
    decision = torch.tensor([[-1, 0, -1]])  # the second labelled token is now response text
    parts = decision_loss(logits, labels, decision, decision_ids=(2, 3), gamma=5.0, weights=torch.ones(2))
    p_res = math.e / (2 * math.e + 2)
    assert float(parts.text_sum) == pytest.approx(-math.log(p_res), rel=1e-6)
    assert (parts.n_decisions, parts.n_text) == (1, 1)


def test_decision_without_label_is_an_error():
    logits, labels, decision = _two_position_example()
    with pytest.raises(ValueError, match="decision_mask and labels disagree"):
        decision_loss(logits, torch.tensor([[-100, -100, 3]]), decision, decision_ids=(2, 3))


def test_decision_metrics_from_confusion():
    m = decision_metrics(torch.tensor([[17, 2], [1, 0]]))
    assert m == pytest.approx(
        {"decision_accuracy": 17 / 20, "fire_rate": 2 / 20, "recall_silence": 17 / 19, "recall_response": 0.0}
    )


def _batch(processor, toy_dir):
    """Three rendered toy streams as one padded training batch, and the renderer."""
    renderer = TurnRenderer(processor, RenderConfig(max_pixels=64 * 64))
    streams = load_streams(toy_dir / "records.jsonl")[:3]
    items = []
    for s in streams:
        r = renderer.render(s, stream_frames(s, toy_dir / s.video, renderer.cfg))
        items.append(
            {k: getattr(r, k) for k in ("input_ids", "attention_mask", "labels", "decision_mask")}
            | {"mm_token_type_ids": r.mm_token_type_ids, "pixel_values": r.pixel_values}
            | {"image_grid_thw": r.image_grid_thw}
        )
    items[0]["input_ids"] = items[0]["input_ids"][:-3]  # unequal lengths: padding is exercised
    for k in ("attention_mask", "labels", "decision_mask", "mm_token_type_ids"):
        items[0][k] = items[0][k][:-3]
    batch = WindowCollator(processor.tokenizer.pad_token_id)(items)
    return batch, renderer


def test_gamma0_unweighted_equals_the_models_own_cross_entropy(tiny_model_and_processor, toy_dir):
    model, processor = tiny_model_and_processor
    batch, renderer = _batch(processor, toy_dir)
    labels, decision = batch.pop("labels"), batch.pop("decision_mask")
    with torch.no_grad():
        out = model(**batch, labels=labels)
    ids = (renderer.silence_id, renderer.response_id)
    plain = decision_loss(out.logits, labels, decision, decision_ids=ids, gamma=0.0, weights=None)
    assert float(plain.loss) == pytest.approx(float(out.loss), abs=1e-6)
    assert plain.n_decisions == int((decision >= 0).sum()) > 50
    focal = decision_loss(out.logits, labels, decision, decision_ids=ids, gamma=2.0, weights=None)
    assert float(focal.loss) < float(plain.loss)


def test_logits_at_the_labelled_positions_only_give_the_same_loss(tiny_model_and_processor, toy_dir):
    """The trainer's path (the LM head on the labelled positions alone) against the full-sequence
    logits: the same loss and parts, from N x V logits instead of B x T x V."""
    model, processor = tiny_model_and_processor
    batch, renderer = _batch(processor, toy_dir)
    labels, decision = batch.pop("labels"), batch.pop("decision_mask")
    ids = (renderer.silence_id, renderer.response_id)
    weights = class_weights([19, 1])
    with torch.no_grad():
        full = decision_loss(model(**batch).logits, labels, decision, decision_ids=ids, weights=weights)
        logits, targets, classes = selected_logits(model, batch, labels, decision)
        picked = selected_logits(model, batch, labels, decision, select=False)[0]
    n_labelled = int((labels[:, 1:] != -100).sum())
    assert logits.shape == (n_labelled, model.config.text_config.vocab_size)
    assert n_labelled < 0.25 * labels.numel()  # most positions need no logits
    assert torch.equal(targets, labels[:, 1:][labels[:, 1:] != -100])
    assert (logits - picked).abs().max() < 1e-5
    selected = loss_at_labels(logits, targets, classes, decision_ids=ids, weights=weights)
    assert float(selected.loss) == pytest.approx(float(full.loss), abs=1e-6)
    assert (selected.n_decisions, selected.n_text) == (full.n_decisions, full.n_text)
    assert torch.equal(selected.confusion, full.confusion)
