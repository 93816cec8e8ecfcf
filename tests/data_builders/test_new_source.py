"""A new data source added by the steps of docs/design.md ("Adding a benchmark, a reward or a data
source"): its module ending in ``SPEC``, its line in the table, its ``conf/source/<name>.yaml``;
then ``data_builders build source=<name>`` composes and builds it like any other source."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from data_builders import sources
from data_builders.cli import run_build
from data_builders.record_io import load_streams
from data_builders.synthetic.toy import generate_toy
from infra.schema import compose

# A source nobody ships: a JSON list of {video, time, text}, one stream per item.
BLINK = '''
"""Toy source: one stream per item of a JSON list, its one target at the item's time."""

import json
import re
from dataclasses import dataclass

from data_builders.records import Stream, Target
from data_builders.toolkit import Pending, SourceSpec, clip_end_from, each_record, read_text, seconds


@dataclass
class BlinkSourceConfig:
    """Keys of ``source=blink``."""

    instruction: str = "Tell me when the light blinks."
    """The user's instruction, given at t=0."""


def build_blink(inputs, options):
    def parse(rid, item):
        time = seconds(item["time"], "time")

        def make(info):
            return [
                Stream.whole_video(
                    id=f"blink-{rid}",
                    source="blink",
                    task="event_monitoring",
                    video=item["video"],
                    clip_end=clip_end_from(info, None, rid),
                    instruction=options.instruction,
                    targets=[Target(time=time, content=item["text"])],
                    meta={},
                )
            ]

        yield Pending(str(inputs.annotations), rid, item["video"], make)

    items = json.loads(read_text(inputs.annotations))
    yield from each_record(((str(k), item) for k, item in enumerate(items)), inputs.annotations, parse)


SPEC = SourceSpec("blink", build=build_blink, config=BlinkSourceConfig)
'''
YAML = (
    "# @package _global_\n"
    "# python -m data_builders build source=blink annotations=blink.json videos=videos out=/tmp/blink\n"
    "instruction: Tell me when the light blinks.\n"
)


@pytest.fixture
def blink(tmp_path, monkeypatch):
    """The documented steps, in a temporary folder: ``blink.py`` in a folder searched as part of
    data_builders.sources, its line in the table (``SOURCES.add``, what the table's line does) and
    ``conf/source/blink.yaml`` in a Hydra search path; all undone afterwards."""
    folder = tmp_path / "sources"
    folder.mkdir()
    (folder / "blink.py").write_text(BLINK)
    (tmp_path / "conf" / "source").mkdir(parents=True)
    (tmp_path / "conf" / "source" / "blink.yaml").write_text(YAML)
    monkeypatch.setattr(sources, "__path__", [*sources.__path__, str(folder)])
    sources.SOURCES.add("blink", "data_builders.sources.blink:SPEC")
    yield tmp_path
    sources.SOURCES.remove("blink")
    sys.modules.pop("data_builders.sources.blink", None)
    if hasattr(sources, "blink"):
        delattr(sources, "blink")


def test_a_new_source_builds_from_its_yaml(blink, tmp_path, capsys):
    assert "blink" in sources.SOURCES.names() and "data_builders.sources.blink" not in sys.modules
    toy = generate_toy(tmp_path / "toy", n=2, seed=0, duration=12)
    items = [
        {"video": toy[0].video, "time": 3.0, "text": "It blinked."},
        {"video": toy[1].video, "time": "7.5", "text": "There, a blink."},
    ]
    (tmp_path / "blink.json").write_text(json.dumps(items))
    out = tmp_path / "built"
    cfg = compose(
        "build",
        [
            f"hydra.searchpath=[file://{blink / 'conf'}]",
            "source=blink",
            f"annotations={tmp_path / 'blink.json'}",
            f"videos={tmp_path / 'toy'}",
            f"out={out}",
            "instruction=Say when it blinks.",
        ],
    )
    assert run_build(cfg, "blink") == 0
    streams = sorted(load_streams(out), key=lambda s: s.id)
    assert [s.id for s in streams] == ["blink-0", "blink-1"]
    assert [[t.time for t in s.targets] for s in streams] == [[3.0], [7.5]]
    assert {s.source for s in streams} == {"blink"} and {s.instruction for s in streams} == {
        "Say when it blinks."
    }
    assert [s.clip_end for s in streams] == pytest.approx([12.0, 12.0], abs=0.6)
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["records"] == 2


def test_the_table_lists_every_module_that_defines_a_source():
    folder = Path(sources.__file__).parent
    defined = sorted(
        p.stem for p in folder.glob("*.py") if re.search(r"^SPEC = SourceSpec\(", p.read_text(), re.M)
    )
    assert sorted(sources.SOURCES.where(n).partition(":")[0] for n in sources.SOURCES) == [
        f"data_builders.sources.{m}" for m in defined
    ]
    assert len(defined) == 18 and "recipe_order" not in defined  # a helper module, not a source
    for name in sources.SOURCES:
        assert sources.get_source(name).name == name
