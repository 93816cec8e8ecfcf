"""Statistics of a set of stream records, written as ``stats.json`` next to every build and mixture.

The SFT loss weights come from the per-task decision counts: one ``</Response>`` step per distinct
target step, every other step ``</Silence>`` (see :func:`stream_steps.decision_counts`). Clip lengths are
in seconds. Everything is rounded and key-sorted so the file is byte-reproducible.

>>> from data_builders.records import Stream, Target
>>> s = Stream(id="a", source="toy", task="crime_alert", video="a.mp4", clip_start=0.0, clip_end=20.0,
...            instruction="", targets=[Target(time=7.0, content="Warning", label="Warning")])
>>> compute_stats([s])["tasks"]["crime_alert"]["response"]
1
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from typing import Any

from data_builders.records import Stream
from data_builders.stream_steps import decision_counts, step_times

#: Clip-length histogram edges in seconds (last bin is open).
LENGTH_BINS = (0, 10, 30, 60, 120, 300, 600, 1800)


def _quantile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolation quantile of sorted values."""
    if len(sorted_values) == 1:
        return sorted_values[0]
    pos = q * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def length_distribution(lengths: list[float]) -> dict[str, Any]:
    """min / max / mean / p10 / p50 / p90 (seconds, 3 decimals) and a histogram over LENGTH_BINS."""
    if not lengths:
        return {"n": 0}
    values = sorted(lengths)
    hist: Counter[str] = Counter()
    for v in values:
        edges = [e for e in LENGTH_BINS if e <= v]
        lo = edges[-1] if edges else 0
        nxt = [e for e in LENGTH_BINS if e > v]
        hist[f"{lo}-{nxt[0]}" if nxt else f"{lo}+"] += 1
    return {
        "n": len(values),
        "min": round(values[0], 3),
        "max": round(values[-1], 3),
        "mean": round(statistics.fmean(values), 3),
        "p10": round(_quantile(values, 0.1), 3),
        "p50": round(_quantile(values, 0.5), 3),
        "p90": round(_quantile(values, 0.9), 3),
        "histogram": {k: hist[k] for k in sorted(hist, key=lambda k: float(k.split("-")[0].rstrip("+")))},
    }


def compute_stats(
    streams: list[Stream], steps_per_second: float = 1.0, conversion: dict[str, int] | None = None
) -> dict[str, Any]:
    """Records, negatives, targets, steps and silence/response decisions per task and overall,
    records per source, and the clip-length distribution (seconds). A build also passes its
    ``conversion`` counts (targets clamped to the clip end, inversions repaired, events dropped,
    records skipped, and each source's own counts such as transcriptions left out), written as is."""
    per_task: dict[str, dict[str, int]] = defaultdict(lambda: Counter())
    per_source: Counter[str] = Counter()
    lengths: list[float] = []
    for s in streams:
        silence, response = decision_counts(s, steps_per_second)
        row = per_task[s.task]
        row["records"] += 1
        row["negatives"] += int(s.is_negative)
        row["targets"] += len(s.targets)
        row["steps"] += len(step_times(s, steps_per_second))
        row["silence"] += silence
        row["response"] += response
        per_source[s.source] += 1
        lengths.append(s.duration)
    tasks = {}
    for task in sorted(per_task):
        row = dict(per_task[task])
        steps = row["steps"]
        row["response_share"] = round(row["response"] / steps, 6) if steps else 0.0
        tasks[task] = {k: row[k] for k in sorted(row)}
    total_silence = sum(t["silence"] for t in tasks.values())
    total_response = sum(t["response"] for t in tasks.values())
    out = {
        "records": len(streams),
        "negatives": sum(t["negatives"] for t in tasks.values()),
        "targets": sum(t["targets"] for t in tasks.values()),
        "steps_per_second": steps_per_second,
        "decisions": {"silence": total_silence, "response": total_response},
        "sources": {k: per_source[k] for k in sorted(per_source)},
        "tasks": tasks,
        "clip_seconds": length_distribution(lengths),
    }
    if conversion is not None:
        out["conversion"] = {k: int(conversion[k]) for k in sorted(conversion)}
    return out
