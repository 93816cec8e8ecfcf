"""One module per source; importing this package registers every builder (see ``registry``)."""

from data_builders.sources import (  # noqa: F401
    captaincook4d,
    ego4d_events,
    egoserve,
    estp,
    holoassist,
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
