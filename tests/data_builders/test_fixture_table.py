"""Every release fixture builds with default keys, and its numbers are the per-source table of docs/data.md.

``python tests/data_builders/test_fixture_table.py`` prints the table (Markdown).
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from data_builders.build import build_source

COLUMNS = ("records", "targets", "negatives", "errors", "dropped events", "skipped", "clamped", "repaired")

#: source -> the build's numbers (see COLUMNS); "errors" are records that made no stream.
EXPECTED = {
    "captaincook4d": (5, 22, 0, 0, 0, 0, 1, 1),
    "holoassist": (3, 7, 1, 0, 1, 0, 1, 1),
    "ucf_crime": (5, 4, 2, 0, 0, 0, 0, 0),
    "shot2story": (4, 7, 0, 0, 0, 0, 0, 0),
    "magqa": (2, 3, 0, 0, 0, 0, 1, 0),
    "llava_video": (5, 5, 0, 0, 0, 0, 0, 0),
    "ego4d_events": (10, 8, 3, 0, 0, 1, 0, 0),
    "egoserve": (3, 7, 0, 0, 1, 1, 1, 1),
    "nexar": (4, 3, 1, 0, 0, 0, 0, 1),
    "joyai": (7, 14, 1, 0, 0, 0, 0, 0),
}


def table(tmp: Path, materialize: Callable) -> dict[str, tuple[int, ...]]:
    """Build every release fixture (real tiny videos, default keys) and return its numbers."""
    rows = {}
    for source in EXPECTED:
        ann, videos = materialize(source, tmp / source, cache=tmp)
        report = build_source(source, tmp / source / "out", annotations=ann, videos=videos, workers=2)
        c = report.counts
        rows[source] = (
            len(report.records),
            sum(len(s.targets) for s in report.records),
            sum(s.is_negative for s in report.records),
            report.n_failed,
            c["dropped_events"],
            c["skipped_records"],
            c["clamped_targets"],
            c["repaired_inversions"],
        )
    return rows


def markdown(rows: dict[str, tuple[int, ...]]) -> str:
    head = "| source | " + " | ".join(COLUMNS) + " |"
    rule = "|---|" + "---:|" * len(COLUMNS)
    return "\n".join([head, rule, *(f"| {k} | " + " | ".join(map(str, v)) + " |" for k, v in rows.items())])


def test_every_release_fixture_builds_with_default_keys(tmp_path, materializer):
    assert table(tmp_path, materializer) == EXPECTED


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    from conftest import materialize

    with tempfile.TemporaryDirectory() as tmp:
        print(markdown(table(Path(tmp), materialize)))
