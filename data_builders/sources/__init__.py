"""One module per source, and the table of where each one lives.

Each module ``data_builders/sources/<name>.py`` defines its builder ``fn(inputs, options)``, its
config dataclass and ``SPEC = SourceSpec(name, build=fn, config=<Name>SourceConfig)``
(:class:`data_builders.toolkit.SourceSpec`); :data:`SOURCES` below lists each module, and
:func:`get_source` imports it on first use (adding a source: docs/design.md, "Adding a benchmark, a
reward or a data source"). The registry module imports no source: the sources import it.
"""

from __future__ import annotations

from data_builders.toolkit import SourceSpec
from infra.registry import Registry

#: Every data source: name -> the module and the ``SourceSpec`` that defines it.
SOURCES = Registry(
    "source",
    {
        "captaincook4d": "data_builders.sources.captaincook4d:SPEC",
        "ego4d_events": "data_builders.sources.ego4d_events:SPEC",
        "egoserve": "data_builders.sources.egoserve:SPEC",
        "estp": "data_builders.sources.estp:SPEC",
        "holoassist": "data_builders.sources.holoassist:SPEC",
        "joyai": "data_builders.sources.joyai:SPEC",
        "jsonl": "data_builders.sources.jsonl:SPEC",
        "llava_video": "data_builders.sources.llava_video:SPEC",
        "magqa": "data_builders.sources.magqa:SPEC",
        "nexar": "data_builders.sources.nexar:SPEC",
        "object_tracks": "data_builders.sources.object_tracks:SPEC",
        "ovo": "data_builders.sources.ovo:SPEC",
        "proactivevideoqa": "data_builders.sources.proactivevideoqa:SPEC",
        "propermem": "data_builders.sources.propermem:SPEC",
        "shot2story": "data_builders.sources.shot2story:SPEC",
        "streamingbench_proactive": "data_builders.sources.streamingbench_proactive:SPEC",
        "toy": "data_builders.sources.toy:SPEC",
        "ucf_crime": "data_builders.sources.ucf_crime:SPEC",
    },
)


def get_source(name: str) -> SourceSpec:
    """The source ``name`` (its module imported on first use; an unknown name fails with the known
    ones)."""
    return SOURCES.get(name)
