"""The ``toy`` source: seeded synthetic clips with exact event times, for offline demos and tests.

``python -m data_builders build source=toy out=/tmp/toy n=32 seed=0``

It reads no annotations: :func:`data_builders.synthetic.toy.generate_toy` writes the mp4s under
``out/videos/`` and returns their records, which the driver then checks like any other source.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from data_builders.synthetic.toy import generate_toy
from data_builders.toolkit import BuildInputs, Pending, SourceSpec, check_options


@dataclass
class ToySourceConfig:
    """Keys of ``source=toy`` (see ``generate_toy``)."""

    n: int = 64
    """Number of clips."""
    seed: int = 0
    """Seed of the clip scripts; record i depends only on (seed, i)."""
    duration: int = 20
    """Clip length in whole seconds (at least 12)."""
    size: int = 64
    """Frame side in pixels."""
    video_fps: int = 2
    """Frame rate of the written mp4s."""
    negative_share: float = 0.25
    """Share of clips in which nothing happens."""

    def __post_init__(self) -> None:
        check_options(self, at_least_one=["n", "size", "video_fps"])
        if self.duration < 12:
            raise ValueError(f"option duration must be at least 12 (whole seconds), got {self.duration!r}")
        if not 0 <= self.negative_share <= 1:
            raise ValueError(
                f"option negative_share must be a share between 0 and 1, got {self.negative_share!r}"
            )


def build_toy(inputs: BuildInputs, options: ToySourceConfig) -> Iterator[Pending]:
    """Generate the clips into ``inputs.out`` and hand each record to the driver as it is."""
    streams = generate_toy(
        inputs.out,
        n=options.n,
        seed=options.seed,
        duration=options.duration,
        size=options.size,
        video_fps=options.video_fps,
        negative_share=options.negative_share,
    )
    for s in streams:
        yield Pending(
            source_file="generate_toy",
            record=s.id,
            video=s.video,
            make=lambda info, s=s: [s],
            needs_info=False,
        )


SPEC = SourceSpec("toy", build=build_toy, config=ToySourceConfig, needs_annotations=False)
