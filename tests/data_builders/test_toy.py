"""Toy source: deterministic records whose frames show each event exactly at its target time."""

from __future__ import annotations

import numpy as np

from data_builders.record_io import load_streams
from data_builders.stream_steps import target_step
from data_builders.synthetic.toy import COLOURS, PROCEDURE, generate_toy
from data_builders.video import read_frames


def _colour_pixels(frame: np.ndarray, colour: str) -> int:
    return int((np.abs(frame.astype(int) - COLOURS[colour]).sum(-1) < 60).sum())


def test_records_are_deterministic_and_independent_of_n(tmp_path):
    a = generate_toy(tmp_path / "a", n=8, seed=3)
    b = generate_toy(tmp_path / "b", n=12, seed=3)
    assert [s.to_dict() for s in a] == [s.to_dict() for s in b[:8]]
    assert (tmp_path / "a/videos/toy_00005.mp4").read_bytes() == (
        tmp_path / "b/videos/toy_00005.mp4"
    ).read_bytes()
    assert {s.task for s in a} == {
        "event_monitoring",
        "object_monitoring",
        "accident_warning",
        "event_intervention",
    }


def test_events_appear_exactly_at_target_steps(toy_dir):
    streams = load_streams(toy_dir / "records.jsonl")
    checked = 0
    for s in streams:
        frames = read_frames(toy_dir / s.video, fps=1.0, end=s.clip_end)
        assert len(frames) == 20
        if s.task == "event_monitoring":
            red = [_colour_pixels(f, "red") > 20 for f in frames]
            if s.targets:
                k = target_step(s, s.targets[0])
                assert red == [i >= k for i in range(20)], s.id
            else:
                assert not any(red)
            checked += 1
        if s.task == "object_monitoring" and s.targets:
            k = target_step(s, s.targets[0])
            blue = [_colour_pixels(f, "blue") > 20 for f in frames]
            assert blue == [i < k for i in range(20)], s.id
            checked += 1
    assert checked >= 3


def test_intervention_blocks_fill_one_grid_cell_each(tmp_path):
    """Placement i fills cell (i // 2, i % 2) of the 2 x 2 grid (one 32 x 32 merged visual token of
    the tiny model at 64 x 64), from its placement second on; the wrong one shows the used colour."""
    streams = [s for s in generate_toy(tmp_path, n=24, seed=0) if s.task == "event_intervention"]
    positives = [s for s in streams if s.targets]
    assert positives and len(positives) < len(streams)
    for s in streams:
        frames = read_frames(tmp_path / s.video, fps=1.0, end=s.clip_end)
        size = frames[0].shape[0]
        colours = list(PROCEDURE)
        if s.targets:
            expected, used = (
                s.targets[0].content.removeprefix("Wrong block: place ").rstrip(".").split(" instead of ")
            )
            colours[PROCEDURE.index(expected)] = used
        for i, colour in enumerate(colours):
            row, col = divmod(i, 2)
            cells = [
                f[row * size // 2 : (row + 1) * size // 2, col * size // 2 : (col + 1) * size // 2]
                for f in frames
            ]
            shown = [_colour_pixels(c, colour) > 100 for c in cells]
            assert shown[-1] and not shown[0], (s.id, i)
            first = shown.index(True)
            assert all(shown[first:]), (s.id, i)
            if s.targets and colour != PROCEDURE[i]:
                assert first == target_step(s, s.targets[0]), s.id
