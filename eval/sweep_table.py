"""Compare the points of a sweep: one row per point, its swept values and its scores.

    python -m eval.sweep_table runs/grpo_sweep
    python -m eval.sweep_table runs/grpo_sweep --metric eval/with_negatives/prs_u
    python -m eval.sweep_table runs/eval/sft_4b_final/p3i        # an eval.run threshold sweep

A threshold sweep (``python -m eval.run ... threshold=0.3,0.5,0.7 -m``) is the folder its points'
``threshold_<t>/`` sit in (each point prints it on its ``-> <out>`` line): one row per threshold, with
the top-level figures of its ``metrics.json`` (what ``sweep.json`` there collects).

A point is a run folder of the sweep (``<sweep>/<point>/``, written by ``python -m train.grpo -m``):
its overrides come from ``.hydra/overrides.yaml`` (only the keys whose value differs between points
are shown: the swept ones), its scores from ``history.jsonl`` (``final``: the last held-out
evaluation, with its update; ``best``: the highest, ``best.json`` when ``keep_best`` kept it) and its
progress from ``progress.json``. Writes ``<sweep>/sweep.csv`` and ``<sweep>/sweep.md``, prints the
Markdown table, then the rows as one JSON object on the last line (``metric`` null for a threshold sweep).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from infra.files import atomic_writer, json_lines, write_text_atomic

DEFAULT_METRIC = "eval/with_negatives/prs_b"


def _overrides(point: Path) -> dict[str, str]:
    path = point / ".hydra" / "overrides.yaml"
    if not path.is_file():
        return {}
    return dict(o.split("=", 1) for o in yaml.safe_load(path.read_text()) or [] if "=" in o)


def _scores(point: Path, metric: str) -> dict[str, Any]:
    evals, rewards = [], []
    history = point / "history.jsonl"
    if history.is_file():
        for line in json_lines(history.read_text()):
            row = json.loads(line)
            if metric in row:
                evals.append((row["step"], row[metric]))
            if "reward/mean" in row:
                rewards.append(row["reward/mean"])
    out: dict[str, Any] = {"final": None, "final_update": None, "best": None, "best_update": None}
    if evals:
        out["final_update"], out["final"] = evals[-1]
        best = max(evals, key=lambda e: (e[1], -e[0]))  # ties: the earlier update
        out["best_update"], out["best"] = best
    kept = point / "best" / "best.json"
    if kept.is_file():  # the weights keep_best kept, when it kept them by this metric
        record = json.loads(kept.read_text())
        if f"eval/{record.get('metric', 'with_negatives/prs_b')}" == metric:
            out["best_update"], out["best"] = record["step"], record.get("value", record.get("prs_b"))
    out["reward_last"] = rewards[-1] if rewards else None
    progress = point / "progress.json"
    if progress.is_file():
        p = json.loads(progress.read_text())
        out["updates"] = f"{p['done']}/{p['planned']}"
    return out


def threshold_rows(sweep: Path) -> tuple[list[str], list[dict[str, Any]]]:
    """(columns, one row per finished threshold) of an ``eval.run`` threshold sweep folder; no row
    when it holds no ``threshold_<t>/metrics.json``."""
    rows = []
    for point in sweep.glob("threshold_*"):
        metrics = point / "metrics.json"
        if not (point.is_dir() and metrics.is_file()):
            continue
        figures = {k: v for k, v in json.loads(metrics.read_text()).items() if isinstance(v, (int, float))}
        rows.append({"point": point.name, "threshold": float(point.name.split("_", 1)[1]), **figures})
    rows.sort(key=lambda r: r["threshold"])
    names = sorted({k for r in rows for k in r} - {"point", "threshold"})
    return ["threshold", *names], rows


def sweep_rows(sweep: str | Path, metric: str = DEFAULT_METRIC) -> tuple[list[str], list[dict[str, Any]]]:
    """(swept keys, one row per point) of a sweep folder; raises when it holds no point."""
    sweep = Path(sweep)
    if not sweep.is_dir():
        raise FileNotFoundError(f"{sweep}: no such sweep folder")
    points = sorted(p for p in sweep.iterdir() if p.is_dir() and (p / ".hydra" / "overrides.yaml").is_file())
    if not points:
        raise FileNotFoundError(
            f"{sweep} holds no sweep point (folders with .hydra/overrides.yaml, or an eval.run "
            "threshold sweep's threshold_<t>/metrics.json)"
        )
    overrides = {p: _overrides(p) for p in points}
    keys = sorted({k for o in overrides.values() for k in o})
    swept = [k for k in keys if len({o.get(k) for o in overrides.values()}) > 1]
    rows = [
        {"point": p.name, **{k: overrides[p].get(k) for k in swept}, **_scores(p, metric)} for p in points
    ]
    return swept, rows


def markdown(columns: list[str], rows: list[dict[str, Any]]) -> str:
    def cell(v: Any) -> str:
        return "-" if v is None else f"{v:.2f}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def sweep_table(sweep: Path, metric: str) -> tuple[str | None, list[str], list[str], list[dict[str, Any]]]:
    """(the metric compared, None for a threshold sweep; the swept keys; the columns; the rows)."""
    columns, rows = threshold_rows(sweep) if sweep.is_dir() else ([], [])
    if rows:
        return None, ["threshold"], columns, rows
    swept, rows = sweep_rows(sweep, metric)
    return (
        metric,
        swept,
        [*swept, "final", "final_update", "best", "best_update", "reward_last", "updates"],
        rows,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eval.sweep_table", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "sweep",
        help="the sweep folder (hydra.sweep.dir, e.g. runs/grpo_sweep; or an eval.run threshold sweep's)",
    )
    parser.add_argument("--metric", default=DEFAULT_METRIC, help="the history.jsonl key compared")
    args = parser.parse_args(argv)
    sweep = Path(args.sweep)
    try:
        metric, swept, columns, rows = sweep_table(sweep, args.metric)
    except FileNotFoundError as exc:
        print(f"eval.sweep_table: {exc}", file=sys.stderr)
        return 2
    table = markdown(columns, rows)
    header = f"metric: {metric}" if metric else "eval.run threshold sweep: each threshold's metrics.json"
    write_text_atomic(sweep / "sweep.md", f"{header}\n\n{table}\n")
    with atomic_writer(sweep / "sweep.csv") as fh:
        writer = csv.DictWriter(fh, fieldnames=["point", *columns], extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    print(table)
    print(json.dumps({"metric": metric, "swept": swept, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
