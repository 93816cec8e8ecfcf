"""Every builder config composes and matches its typed schema; typos fail at once."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from data_builders.cli import split_build_config
from data_builders.config import BuildConfig, FramesConfig, compose_build
from data_builders.mixture import MixtureConfig
from data_builders.sources import SOURCES, get_source
from infra.schema import compose, typed

CONF = Path(__file__).resolve().parents[2] / "conf"


def test_every_source_yaml_mirrors_its_options_dataclass():
    get_source("toy")
    names = sorted(p.stem for p in (CONF / "source").glob("*.yaml"))
    assert names == SOURCES.names()
    for name in names:
        first = (CONF / "source" / f"{name}.yaml").read_text().splitlines()[:2]
        assert first[0] == "# @package _global_" and first[1].startswith(
            f"# python -m data_builders build source={name}"
        )
        cfg = compose_build([f"source={name}", "out=/tmp/x"])
        base, options = split_build_config(cfg, name)
        assert options == get_source(name).config()  # yaml defaults == dataclass defaults, same keys
        assert base == BuildConfig(out="/tmp/x")


def test_typos_and_wrong_types_fail():
    with pytest.raises(Exception, match="nn"):
        compose_build(["source=toy", "nn=3"])
    cfg = compose_build(["source=toy", "n=abc"])
    with pytest.raises(ValueError, match="source=toy"):
        split_build_config(cfg, "toy")
    with pytest.raises(ValueError, match="has no option"):
        get_source("toy").make_config({"seeds": 1})


def test_frames_and_mixture_configs_compose():
    frames = compose("frames", ["records=/tmp/d"])
    mix = compose("mix", ["data=mix_p3i"])
    plain = OmegaConf.to_container(frames, resolve=True)
    c = typed(FramesConfig, plain, "frames")
    assert (c.records, c.steps_per_second, c.data) == ("/tmp/d", 1.0, None)
    assert c.render.max_pixels == 64 * 64  # model=tiny, the default of every stage: render=toy
    assert c.paths.frame_cache_dir == "./.cache/frames"  # the cache every stage reads
    m = typed(MixtureConfig, OmegaConf.to_container(mix.data), "data")
    assert {k: (s.weight, s.count) for k, s in m.sources.items()} == {
        "shot2story": (10000, 10000),
        "llava_video": (2000, 2000),
        "nexar": (600, 600),
        "ego4d_events": (768, 768),
    }
    assert sum(m.splits.values()) == 1.0
    for path in [
        CONF / "build.yaml",
        CONF / "frames.yaml",
        CONF / "mix.yaml",
        *sorted((CONF / "data").glob("*.yaml")),
    ]:
        assert path.read_text().startswith("# python -m data_builders "), path
    build = compose_build(["source=toy"])
    # every common key comes from the schema (build_schema), the source's options from its dataclass
    # (source_toy_schema, which conf/source/toy.yaml lists)
    assert {f.name for f in dataclasses.fields(BuildConfig)} | {"n", "duration"} <= set(build)
    assert (build.workers, build.shard_size, build.n) == (8, 10_000, 64)
