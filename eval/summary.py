"""What an evaluation's numbers mean at a glance: its headline metric with the clips behind it, and
the same metric of an earlier evaluation of the same records (``eval.run``'s summary lines, the
viewer's header).

- The headline is the protocol runner's (:attr:`benchmarks.protocols.base.ProtocolRunner.headline`,
  a path into the metrics): P3I's is ``with_negatives/prs_b``, PRS-B with each negative counted in
  its task, so a run on clips without targets still moves it.
- The counts are of the evaluated records: clips, those with targets, negatives (none).
- An earlier evaluation is a folder with ``metrics.json`` and a ``gt.jsonl`` equal byte for byte to
  this one's (``eval.run`` writes the scored records' ground truth there), under
  ``<runs>/eval/*/<benchmark>/`` (or ``<benchmark>@<settings>/``, ``eval.run``'s folder of other
  settings) or beside this folder; the newest such is the ``before``.
"""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.runners import get_runner
from data_builders.records import Stream


def lookup(metrics: dict, path: str) -> float | None:
    """The number at ``path`` (``"a/b"``) of a nested metrics dict, or None."""
    node = metrics
    for part in path.split("/"):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node if isinstance(node, int | float) and not isinstance(node, bool) else None


def headline(protocol: str, metrics: dict) -> dict | None:
    """``{"key", "value", "words"}`` of the protocol's headline metric, or None (none named, or
    absent from these metrics)."""
    runner = get_runner(protocol)
    if runner.headline is None or (value := lookup(metrics, runner.headline)) is None:
        return None
    return {"key": runner.headline, "value": value, "words": runner.headline_words}


def lead_with(metrics: dict, path: str | None) -> dict:
    """``metrics`` reordered so that the headline's path comes first at every level (the JSON line
    then starts with it); the same keys and values.

    >>> list(lead_with({"a": 1, "w": {"u": 2, "b": 3}}, "w/b")), list(lead_with({"a": 1}, None))
    (['w', 'a'], ['a'])
    """
    if not path:
        return metrics
    first, _, rest = path.partition("/")
    if first not in metrics:
        return metrics
    value = metrics[first]
    value = lead_with(value, rest) if rest and isinstance(value, dict) else value
    return {first: value, **{k: v for k, v in metrics.items() if k != first}}


def counts(streams: list[Stream]) -> dict[str, int]:
    """The evaluated clips, those with targets and the negatives (no targets)."""
    with_targets = sum(1 for s in streams if s.targets)
    return {"clips": len(streams), "with_targets": with_targets, "negatives": len(streams) - with_targets}


def clips_words(c: dict[str, int]) -> str:
    """``74 clips: 51 with targets, 23 negatives``."""
    return f"{c['clips']} clips: {c['with_targets']} with targets, {c['negatives']} negatives"


def summary_line(name: str, bench: str, protocol: str, metrics: dict, streams: list[Stream]) -> str:
    """``tiny-untrained on p3i: with_negatives/prs_b 30.6 (PRS-B, ...) over 74 clips: 51 with
    targets, 23 negatives``; without a headline, the clips alone."""
    head = headline(protocol, metrics)
    what = f"{head['key']} {head['value']:.1f} ({head['words']}) over " if head else ""
    return f"{name} on {bench}: {what}{clips_words(counts(streams))}"


def earlier(out: Path, runs_dir: Path) -> Path | None:
    """The newest other evaluation folder of the same records as ``out`` (its ``gt.jsonl`` equal to
    ``out``'s), under ``<runs_dir>/eval/*/<benchmark>[@<settings>]/`` or beside ``out``; None if there
    is none."""
    mine = out / "gt.jsonl"
    if not mine.is_file():
        return None
    gt = mine.read_bytes()
    bench = out.name.split("@", 1)[0]  # eval.run's folders of other settings: <benchmark>@<settings>
    evals = Path(runs_dir, "eval")
    found = {*evals.glob(f"*/{bench}/metrics.json"), *evals.glob(f"*/{bench}@*/metrics.json")}
    found |= set(out.parent.glob("*/metrics.json"))
    same = [
        m.parent
        for m in found
        if m.parent.resolve() != out.resolve()
        and (m.parent / "gt.jsonl").is_file()
        and (m.parent / "gt.jsonl").read_bytes() == gt
    ]
    return max(same, key=lambda d: ((d / "metrics.json").stat().st_mtime, str(d)), default=None)


def compare_line(out: Path, runs_dir: Path, protocol: str, metrics: dict, name: str) -> str | None:
    """``before -> after, the same 74 records, with_negatives/prs_b: tiny-untrained 30.6 ->
    toy_sft_final 83.7 (+53.1)`` against :func:`earlier`'s folder, or None (none, or no headline)."""
    head = headline(protocol, metrics)
    other = earlier(out, runs_dir) if head else None
    if other is None:
        return None
    try:
        before = lookup(json.loads((other / "metrics.json").read_text()), head["key"])
    except (OSError, ValueError):
        return None
    if before is None:
        return None
    n = sum(1 for line in (out / "gt.jsonl").read_text().splitlines() if line.strip())
    label = other.parent.name if other.parent.parent.name == "eval" else other.name
    return (
        f"before -> after, the same {n} records, {head['key']}: {label} {before:.1f} -> "
        f"{name} {head['value']:.1f} ({head['value'] - before:+.1f}; {other})"
    )
