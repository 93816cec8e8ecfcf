"""A training stage started from a checkpoint (GRPO ``init=``, SFT ``model.path=``) trains on the
frames that checkpoint was trained at and on exactly its weights, or stops naming the checkpoint."""

from __future__ import annotations

import json
import logging
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from data_builders.config import RenderConfig
from data_builders.mixture import build_toy_mixture
from engine.checkpoints import saved_render, write_render
from train.grpo.run import compose_config, run
from train.sft.run import compose_config as sft_config
from train.sft.run import train

#: A frame budget of its own: the toy videos' 64 x 64 frames become 32 x 32 (the toy budget is 4096).
TRAINED_AT = 1024
#: conf/debug/tiny.yaml with shorter windows and rollouts, no checkpoints, two threads (init is the test's).
GRPO_TINY = [
    "debug=tiny",
    "grpo.window_steps=6",
    "grpo.max_new_tokens=2",
    "grpo.save_every=0",
    "grpo.num_threads=2",
]


@pytest.fixture(scope="module")
def toy_mixture(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("init_data")
    return build_toy_mixture(root / "built", root / "toy", n=8, seed=0)


def sft_like(tiny_checkpoint: Path, dest: Path, max_pixels: int = TRAINED_AT) -> Path:
    """A checkpoint as ``train.sft`` leaves it: weights, processor and the render block it was trained at."""
    shutil.copytree(tiny_checkpoint, dest)
    write_render(dest, RenderConfig(max_pixels=max_pixels))
    return dest


def grpo_cfg(init: Path, data: Path, tmp: Path, *extra: str):
    return compose_config(
        [
            f"init={init}",
            f"data.dir={data}",
            f"paths.root_dir={tmp}",
            f"grpo.output_dir={tmp / 'grpo'}",
            *GRPO_TINY,
            *extra,
        ]
    )


def frame_sizes(frame_cache: Path) -> set[tuple[int, int]]:
    """(height, width) of every frame the run decoded (the frame cache holds one .npy per clip)."""
    return {np.load(f, mmap_mode="r").shape[1:3] for f in frame_cache.rglob("*.npy")}


def test_grpo_trains_on_the_frames_of_its_init_checkpoint(tiny_checkpoint, toy_mixture, tmp_path):
    """The README's ``python -m train.grpo init=runs/sft/final ...`` (model group: tiny, render=toy)
    from a checkpoint trained at 1024 pixels: GRPO decodes 32 x 32 frames, not the toy group's
    64 x 64, and stamps the init's render block into its own checkpoint."""
    init = sft_like(tiny_checkpoint, tmp_path / "sft" / "final")
    cfg = grpo_cfg(init, toy_mixture, tmp_path)
    assert cfg.render.max_pixels == TRAINED_AT
    final = run(cfg, tmp_path / "grpo")
    assert frame_sizes(Path(cfg.paths.frame_cache_dir)) == {(32, 32)}
    assert saved_render(final) == saved_render(init) == json.loads((final / "render.json").read_text())
    assert (
        yaml.safe_load((tmp_path / "grpo" / "config.yaml").read_text())["render"]["max_pixels"] == TRAINED_AT
    )


def test_an_explicit_render_override_wins_over_the_init_checkpoint_and_is_logged(
    tiny_checkpoint, toy_mixture, tmp_path, caplog
):
    init = sft_like(tiny_checkpoint, tmp_path / "sft" / "final")
    with caplog.at_level(logging.WARNING):
        cfg = grpo_cfg(init, toy_mixture, tmp_path, "render.max_pixels=2304")
        assert cfg.render.max_pixels == 2304
        final = run(cfg, tmp_path / "grpo")
    assert frame_sizes(Path(cfg.paths.frame_cache_dir)) == {(48, 48)}
    assert saved_render(final)["max_pixels"] == 2304
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(
        str(init) in m and "render.max_pixels=2304" in m and f"'max_pixels': {TRAINED_AT}" in m
        for m in warned
    ), warned


@pytest.mark.parametrize("stage", ["grpo", "sft"])
def test_a_start_checkpoint_with_tensors_removed_is_refused(
    stage, tiny_checkpoint, toy_mixture, tmp_path, drop_tensors
):
    """GRPO ``init=`` and SFT ``model.path=`` load through the loader ``eval.run`` uses: 11 tensors
    missing stop the stage naming the folder and the first missing key, before any step."""
    init = sft_like(tiny_checkpoint, tmp_path / "sft" / "final", max_pixels=4096)
    first = drop_tensors(init)[0]
    expect = re.escape(f"{init}: its weights do not fit its config.json: 11 missing ({first},")
    with pytest.raises(ValueError, match=expect):
        if stage == "grpo":
            run(grpo_cfg(init, toy_mixture, tmp_path), tmp_path / "grpo")
        else:
            train(
                sft_config(
                    [
                        "model.kind=pretrained",
                        f"model.path={init}",
                        f"data.dir={toy_mixture}",
                        f"paths.root_dir={tmp_path}",
                        f"sft.output_dir={tmp_path / 'sft2'}",
                        "sft.max_steps=1",
                    ]
                )
            )
    run_dir = tmp_path / ("grpo" if stage == "grpo" else "sft2")
    assert not (run_dir / "final").exists() and not list(run_dir.glob("checkpoint-*"))


def test_a_damaged_init_stops_grpo_before_it_writes_anything(tiny_checkpoint, toy_mixture, tmp_path):
    """A truncated ``model.safetensors`` (a copy cut short) is named with the reason before the run
    writes its config or loads a model."""
    init = sft_like(tiny_checkpoint, tmp_path / "sft" / "final", max_pixels=4096)
    weights = init / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100_000])
    with pytest.raises(ValueError, match=re.escape(f"{weights}: truncated: its header describes ")):
        run(grpo_cfg(init, toy_mixture, tmp_path), tmp_path / "grpo")
    assert not (tmp_path / "grpo" / "config.yaml").exists()
