"""One module per source; importing this package registers every builder (see ``registry``), and
:func:`get_source` looks one up. The registry itself imports no source: the sources import it."""

from data_builders.registry import SOURCES, SourceSpec
from data_builders.sources import (  # noqa: F401
    captaincook4d,
    ego4d_events,
    egoserve,
    estp,
    holoassist,
    jsonl,
    llava_video,
    magqa,
    nexar,
    object_tracks,
    ovo,
    proactivevideoqa,
    propermem,
    shot2story,
    streamingbench_proactive,
    toy,
    ucf_crime,
)


def get_source(name: str) -> SourceSpec:
    """The registered source ``name`` (every source module above has registered itself)."""
    if name not in SOURCES:
        raise KeyError(f"unknown source {name!r}; known: {', '.join(sorted(SOURCES))}")
    return SOURCES[name]
