"""Branched probes: one pass answers every probe as a fresh run on the cut video does."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from data_builders.config import RenderConfig
from data_builders.frames import stream_frames
from data_builders.records import HistoryEntry, RecordError
from data_builders.synthetic.toy import generate_toy
from engine.kv_window import KVWindow
from engine.probes import Probe, answer_probes
from engine.render import TurnRenderer
from engine.streaming import EngineConfig

# unsorted, two on step 7, the first step and the last (the toy streams have 40 steps)
PROBES = [
    Probe(39, "What happens now?", "last"),
    Probe(7, "Is the ball red?", "seven-a"),
    Probe(0, "What is on screen?", "first"),
    Probe(7, "How many objects?", "seven-b"),
    Probe(20, "Where is it?", "middle"),
    Probe(13, "Did it move?", "thirteen"),
]


@pytest.fixture(scope="module")
def setup(tiny_model_and_processor, tmp_path_factory):
    model, processor = tiny_model_and_processor
    out = tmp_path_factory.mktemp("toy-probes")
    [stream] = generate_toy(out, n=1, seed=1, duration=40)
    renderer = TurnRenderer(processor, RenderConfig(max_pixels=64 * 64))
    frames = stream_frames(stream, out / stream.video, renderer.cfg)
    with_history = dataclasses.replace(
        stream, history=[HistoryEntry(2.0, "the user left the keys on the table")]
    )
    return model, renderer, stream, with_history, frames


def _max_diff(a, b) -> float:
    return max(float((x.logits - y.logits).abs().max()) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("history", [False, True])
def test_branched_answers_equal_reruns_on_the_cut_video(setup, history):
    model, renderer, stream, with_history, frames = setup
    s = with_history if history else stream
    branched = answer_probes(model, renderer, s, frames, PROBES, max_new_tokens=6)
    rerun = answer_probes(model, renderer, s, frames, PROBES, max_new_tokens=6, mode="rerun")
    assert [a.probe for a in branched] == [a.probe for a in rerun] == PROBES  # the input order
    assert [a.time for a in branched] == [float(p.step) for p in PROBES]  # 1 step/s from 0 s
    assert [a.text for a in branched] == [a.text for a in rerun]
    assert sum(bool(a.text) for a in branched) >= 3  # the model says something: the texts can differ
    for a, b in zip(branched, rerun):
        assert a.logits.dtype == torch.float32
        assert a.logits.shape == b.logits.shape and a.logits.shape[1] == model.lm_head.out_features
        assert 2 <= len(a.logits) <= 1 + 6  # the decision, then one row per generated token
        assert abs(a.p_response - b.p_response) < 1e-5
    assert _max_diff(branched, rerun) < 1e-4
    # probes on one step see the same video and differ by their question alone
    seven = {a.probe.key: a.logits[0] for a in branched if a.probe.step == 7}
    assert float((seven["seven-a"] - seven["seven-b"]).abs().max()) > 1e-3


def test_a_branch_is_a_full_forward_of_the_cut_conversation(setup):
    """Independent of the cache: the probe's logits equal the model's forward over the whole
    conversation up to the probe (silent turns, the question turn, the forced answer)."""
    model, renderer, _, stream, frames = setup
    r = renderer
    probe = Probe(20, "Where is it?")
    [answer] = answer_probes(model, r, stream, frames, [probe, Probe(9, "Is it there?")], max_new_tokens=6)[
        :1
    ]
    pixel_values, grid = r.encode_frames(frames[:21])
    ids: list[int] = []
    for k in range(21):
        context = r.context_for_step(stream, k, 0, instruction=False)
        if k == 20:
            context = f"{context}\n{probe.prompt}" if context else probe.prompt
        ids += r.user_turn(float(k), r.image_tokens(grid[k]), context)
        ids += r.assistant_open
        if k < 20:
            ids += [r.silence_id] + r.turn_end
    decision = len(ids) - 1
    generated = [int(r.mask_text_logits(row).argmax()) for row in answer.logits[1:]]
    ids += [r.response_id] + generated
    input_ids = torch.tensor([ids])
    with torch.no_grad():
        out = model(
            input_ids=input_ids,
            attention_mask=torch.ones_like(input_ids),
            mm_token_type_ids=(input_ids == r.image_pad_id).int(),
            pixel_values=pixel_values,
            image_grid_thw=grid,
        )
    full = out.logits[0, decision : decision + len(answer.logits)].float()
    assert len(generated) >= 1 and float((full - answer.logits).abs().max()) < 1e-4


def test_a_branch_left_in_the_cache_changes_every_later_answer(setup, monkeypatch):
    """Why the rewind matters. Without it, every probe after the first (in step order) sees the
    earlier branches, and its answer moves. With the cache cropped but the M-RoPE offset not put
    back, the later tokens' positions are shifted: M-RoPE is relative, so a shift of every
    position alike changes nothing ("seven-a" follows a branch taken from the empty cache of step
    0, which shifted the whole stream after it), but a shift against cached tokens does."""
    model, renderer, stream, _, frames = setup
    exact = answer_probes(model, renderer, stream, frames, PROBES, max_new_tokens=6)

    def crop_only(self, mark):
        self.cache.crop(mark.columns - self.cache.get_seq_length())
        self.mask_len = mark.mask_len

    for rewind, unmoved in ((lambda self, mark: None, {"first"}), (crop_only, {"first", "seven-a"})):
        monkeypatch.setattr(KVWindow, "rewind", rewind)
        wrong = answer_probes(model, renderer, stream, frames, PROBES, max_new_tokens=6)
        for a, w in zip(exact, wrong, strict=True):
            moved = float((w.logits[0] - a.logits[0]).abs().max())
            assert moved < 1e-6 if a.probe.key in unmoved else moved > 1e-3, (a.probe.key, moved)


def test_instruction_history_and_pair_only_logits(setup):
    model, renderer, stream, with_history, frames = setup
    history = renderer.history_text(with_history)
    assert renderer.context_for_step(with_history, 0, 0, instruction=False) == history
    assert renderer.context_for_step(with_history, 0, 0) == f"{history}\n{stream.instruction}"
    assert renderer.context_for_step(with_history, 1, 0, instruction=False) is None
    probes = PROBES[1:4]  # steps 7, 0, 7: the pass stops at step 7
    full = answer_probes(model, renderer, stream, frames, probes, max_new_tokens=3)
    pair = answer_probes(model, renderer, stream, frames, probes, max_new_tokens=3, full_logits=False)
    instructed = answer_probes(model, renderer, stream, frames, probes, max_new_tokens=3, instruction=True)
    for a, b, c in zip(full, pair, instructed):
        assert b.logits.shape == (1, 2) and a.text == b.text
        assert torch.allclose(
            b.logits[0], a.logits[0, [renderer.silence_id, renderer.response_id]], atol=1e-5
        )
        assert abs(a.p_response - b.p_response) < 1e-5
        assert float((a.logits[0] - c.logits[0]).abs().max()) > 1e-3  # the instruction is in view


def test_bad_probes_name_the_stream_and_the_probe(setup):
    model, renderer, stream, _, frames = setup
    cases = [
        (Probe(40, "Late?", "q"), "step 40 is out of range: the stream has 40 steps"),
        (Probe(-1, "Early?", "q"), "step -1 is out of range"),
        (Probe(3, "", "q"), "empty prompt"),
        (Probe(3, "  \n", "q"), "empty prompt"),
        (Probe(2.0, "Float?", "q"), "step must be an integer"),
    ]
    for bad, reason in cases:
        with pytest.raises(RecordError, match=reason) as err:
            answer_probes(model, renderer, stream, frames, [Probe(1, "Fine?"), bad])
        assert isinstance(err.value, ValueError)
        assert f"record {stream.id}" in str(err.value) and "probe 1 (key 'q')" in str(err.value)
    with pytest.raises(ValueError, match="frame_window"):
        answer_probes(model, renderer, stream, frames, PROBES, cfg=EngineConfig(frame_window=8))
    with pytest.raises(ValueError, match="mode"):
        answer_probes(model, renderer, stream, frames, PROBES, mode="poll")
    assert answer_probes(model, renderer, stream, frames, []) == []
