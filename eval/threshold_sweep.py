"""Decision-threshold sweeps: ``python -m eval.run checkpoint=DIR threshold=0.3,0.5,0.7 -m``.

Each point writes ``<out>/threshold_<t>/{predictions,metrics}.jsonl|json``; after each point
``<out>/sweep.json`` collects the top-level metrics (PRS per threshold for P3I) of every finished point.

Why one pass cannot serve every threshold exactly: the stream is causal and the model conditions on
its own past turns. A step where the decision differs (``p`` lies between two thresholds) feeds a
different assistant turn, so every later probability differs. What is exact, and what is not:

- ``sweep_mode=exact`` (default). A point first looks at the other points of the sweep (same
  config but the threshold). A record whose recorded pass makes, at this threshold, the same
  decision at every step (``p_k >= t`` exactly where the pass fired, with every ``p_k`` at least
  ``MARGIN`` away from ``t``) has, by induction over the steps, the same inputs, the same
  probabilities and the same greedy texts: that pass *is* this threshold's run, and it is reused
  as is. Only the other records go through the engine. For a model whose probabilities sit far from
  the thresholds (e.g. an untrained one, or a sharp trained one) most records are reused.
- ``sweep_mode=reuse`` (approximate, one pass). Records without an exact pass are re-thresholded
  from the lowest-threshold pass at or below ``t``: fires where the recorded ``p_k >= t``, with the
  text that pass decoded at that step (it fired there too, since ``p_k >= t >= t0``). After the first
  step where the decisions differ, the recorded probabilities were conditioned on turns this
  threshold would not have produced, so the result approximates the true run. Lines carry
  ``"reused": "approximate"``. Without a pass at or below ``t`` the records run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from data_builders.records import Stream
from data_builders.stream_steps import step_times
from eval.provenance import RECORD_FIELD, decides, record_fingerprint
from eval.store import PredictionLog
from infra.files import write_text_atomic
from infra.schema import load_literal

#: Probabilities closer than this to the threshold are not trusted to decide the same way twice
#: (batch composition moves logits by ~1e-7).
MARGIN = 1e-6


def point_dir(base: Path, threshold: float) -> Path:
    return base / f"threshold_{threshold:g}"


def fingerprint(cfg: Any) -> dict[str, Any]:
    """What decides a point's predictions but its threshold (``eval.provenance.decides``): points with
    the same fingerprint differ only in the threshold, and their weights are the same."""
    plain = cfg if isinstance(cfg, dict) else OmegaConf.to_container(cfg, resolve=True)
    return {k: v for k, v in decides(plain, plain.get("weights")).items() if k != "threshold"}


def sibling_passes(base: Path, own: Path, cfg: Any) -> list[tuple[float, dict[str, dict]]]:
    """(threshold, rows by id) of the other points under ``base`` run with the same decisive config."""
    mine = fingerprint(cfg)
    out = []
    for d in sorted(base.glob("threshold_*")):
        if d.resolve() == own.resolve() or not (d / "config.yaml").exists():
            continue
        other = OmegaConf.to_container(load_literal(d / "config.yaml"), resolve=True)
        if fingerprint(other) != mine:
            continue
        rows = {r["id"]: r for r in PredictionLog(d / "predictions.jsonl").rows()}
        out.append((float(other["threshold"]), rows))
    return sorted(out, key=lambda p: p[0])


def _same_decisions(row: dict, threshold: float) -> bool:
    return all(
        abs(p - threshold) > MARGIN and (p >= threshold) == bool(f)
        for p, f in zip(row["p_response"], row["fired"], strict=True)
    )


def reuse_rows(
    streams: list[Stream],
    passes: list[tuple[float, dict[str, dict]]],
    threshold: float,
    mode: str,
    steps_per_second: float,
) -> dict[str, dict]:
    """Prediction lines for the streams that need no engine run at ``threshold`` (see the docstring)."""
    if mode not in ("exact", "reuse"):
        raise ValueError(f"sweep_mode must be exact or reuse, got {mode!r}")
    out: dict[str, dict] = {}
    for s in streams:
        own = record_fingerprint(s)  # a pass made for other contents of the record is no pass of it
        mine = [(t0, rows) for t0, rows in passes if rows.get(s.id, {}).get(RECORD_FIELD) == own]
        exact = next((rows[s.id] for _, rows in mine if _same_decisions(rows[s.id], threshold)), None)
        if exact is not None:
            out[s.id] = {**exact, "reused": "exact"}
            continue
        if mode == "exact":
            continue
        lower = [rows[s.id] for t0, rows in mine if t0 <= threshold]
        if not lower:
            continue
        src = lower[0]
        times = step_times(s, steps_per_second)
        by_time = {r["time"]: r for r in src["replies"]}
        fired = [int(p >= threshold) for p in src["p_response"]]
        replies = [by_time[times[k]] for k, f in enumerate(fired) if f and times[k] in by_time]
        out[s.id] = {**src, "replies": replies, "fired": fired, "reused": "approximate"}
    return out


def write_summary(base: Path) -> dict[str, Any]:
    """``<base>/sweep.json``: the top-level numeric metrics of every finished point, by threshold."""
    points = {}
    for d in sorted(base.glob("threshold_*")):
        if (d / "metrics.json").exists():
            m = json.loads((d / "metrics.json").read_text())
            t = float(load_literal(d / "config.yaml").threshold)
            points[f"{t:g}"] = {k: v for k, v in m.items() if isinstance(v, (int, float))}
    summary = {"thresholds": dict(sorted(points.items(), key=lambda kv: float(kv[0])))}
    write_text_atomic(base / "sweep.json", json.dumps(summary, indent=2) + "\n")  # whole or not at all
    return summary
