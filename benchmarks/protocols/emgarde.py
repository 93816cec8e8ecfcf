"""Em-Garde's online figures on its own result files: OVO-Bench's forward F1, StreamingBench's recall.

    python -m eval.score --protocol ovo --mode online_emgarde --gt ovo_bench_new.json --pred ovo_bench_results.jsonl
    python -m eval.score --protocol streamingbench_proactive --mode online_emgarde \\
        --gt questions_proactive.json --pred streamingbench_results.jsonl

Followed: ``air-embodied-brain/Em-Garde/eval/ovo_bench/ovo_bench_eval_online.py`` and
``Em-Garde/eval/streamingbench/streamingbench_eval_online.py`` (the metrics are :mod:`metrics.ovo`'s and
:mod:`metrics.streamingbench_proactive`'s ``online_*`` functions). The prediction file is the JSON Lines
those scripts write, one line per question::

    {"id": k, "detections": [t, ...], "checked_detections": [{"time": t, "response": text}, ...],
     "gt_timestamp": ..., ...}        or, where its run failed,        {"id": k, "error": "..."}

``id`` is the question's place in the release (counted from 0): OVO-Bench, among the REC, SSR and
CRR items in file order; StreamingBench, among every segment's questions in file order. Times are
seconds on the video's clock, at the time of the newest frame the detector saw (Em-Garde reads the
frame at ``t`` for the step ``t``: the same clock as this project's reply times). Which list is
scored (``--detections``): ``detections`` (every trigger), ``checked_detections`` (the triggers that
got a reply, Em-Garde's ``--should-respond`` runs) or ``auto``, ``checked_detections`` when any line
holds one, else ``detections``; the result says which (``detections_scored``).

The ground truth comes from the release (``--gt``); a line's ``gt_timestamp`` and ``task``, where
given, must agree with it. Counted and named on stderr, never dropped silently: failed lines
(``failed``: OVO-Bench leaves them out of the means, as Em-Garde does; StreamingBench counts them
in the denominator, as Em-Garde does), release questions without a line (``missing``, likewise) and
detections outside the window Em-Garde's harness watches (``outside_window``, left out: its harness
cannot make them). A line for no question of the release, a second line for one question, a time
that is no number and a ground truth other than the release's are :class:`RecordError`\\ s naming the
file, the line and the reason.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from data_builders.record_io import iter_jsonl
from data_builders.records import RecordError
from data_builders.sources.ovo import Item
from data_builders.sources.ovo import read_release as read_ovo_release
from data_builders.sources.streamingbench_proactive import ReleaseQuestion, entry_questions, read_question
from data_builders.toolkit import load_json, seconds
from metrics.ovo import FORWARD_TASKS, online_f1, online_question, online_truth_times, online_window
from metrics.streamingbench_proactive import LAST_POLL_AFTER_GT_S, online_hits, online_rates

OVO_DEFINITION = "air-embodied-brain/Em-Garde/eval/ovo_bench/ovo_bench_eval_online.py"
SB_DEFINITION = "air-embodied-brain/Em-Garde/eval/streamingbench/streamingbench_eval_online.py"
#: ``--detections`` values.
DETECTION_LISTS = ("auto", "detections", "checked_detections")
_EPS = 1e-6


def _times(line: dict, key: str) -> list[float]:
    """The times of one line's ``detections`` or ``checked_detections``, in the order written."""
    value = line.get(key, [])
    if not isinstance(value, list):
        raise RecordError(f"expected a list, got {type(value).__name__}", field=key)
    if key == "detections":
        return [seconds(t, f"{key}[{i}]") for i, t in enumerate(value)]
    out = []
    for i, d in enumerate(value):
        if not isinstance(d, dict) or d.get("time") is None:
            raise RecordError("expected an object with a time", field=f"{key}[{i}]")
        out.append(seconds(d["time"], f"{key}[{i}].time"))
    return out


def read_lines(path: Path, n_questions: int) -> dict[int, dict]:
    """Each line of an Em-Garde result file by its ``id`` (checked to name a question)."""
    if path.is_dir():
        raise RecordError("expected Em-Garde's result file (JSON Lines), got a folder", file=path)
    out: dict[int, dict] = {}
    seen: dict[int, int] = {}
    for lineno, line in iter_jsonl(path):
        where = f"line {lineno}"
        if not isinstance(line, dict):
            raise RecordError(f"expected a JSON object, got {type(line).__name__}", file=path, record=where)
        qid = line.get("id")
        if isinstance(qid, bool) or not isinstance(qid, int) or not 0 <= qid < n_questions:
            raise RecordError(
                f"field 'id': expected a question's place in the release, 0 to {n_questions - 1}, got {qid!r}",
                file=path,
                record=where,
            )
        if qid in seen:
            raise RecordError(
                f"a second line for id {qid} (first on line {seen[qid]})", file=path, record=where
            )
        seen[qid] = lineno
        out[qid] = {**line, "_line": lineno}
    return out


def detection_list(lines: dict[int, dict], choice: str) -> str:
    """The list ``--detections`` scores (``auto``: ``checked_detections`` when any line holds one)."""
    if choice not in DETECTION_LISTS:
        raise RecordError(f"--detections must be one of {', '.join(DETECTION_LISTS)}, got {choice!r}")
    if choice != "auto":
        return choice
    return (
        "checked_detections"
        if any(line.get("checked_detections") for line in lines.values())
        else "detections"
    )


def _in_window(times: list[float], window: tuple[float, float]) -> tuple[list[float], int]:
    lo, hi = window
    kept = [t for t in times if lo - _EPS <= t <= hi + _EPS]
    return kept, len(times) - len(kept)


def _check_truth(line: dict, truth: Any) -> None:
    given = line.get("gt_timestamp")
    if given is None:
        return
    same = (
        [float(x) for x in given] == [float(x) for x in truth]
        if isinstance(given, list) and isinstance(truth, list)
        else not isinstance(given, list)
        and not isinstance(truth, list)
        and abs(float(given) - float(truth)) < _EPS
    )
    if not same:
        raise RecordError(
            f"field 'gt_timestamp': {given!r} here but {truth!r} from the release (a file of another release?)"
        )


def _report(name: str, counts: dict[str, int], examples: dict[str, list[str]]) -> None:
    for key, n in counts.items():
        if n:
            shown = "; ".join(examples.get(key, [])[:3])
            print(f"eval.score: {name}: {key} = {n}" + (f" (e.g. {shown})" if shown else ""), file=sys.stderr)


def ovo_forward_items(gt: Path) -> list[Item]:
    """The release's REC, SSR and CRR items in file order (Em-Garde's ids count them from 0)."""
    return [item for item in read_ovo_release(gt) if item.task in FORWARD_TASKS]


def _ovo_question(item: Item, line: dict, which: str) -> tuple[tuple[float, float], int, dict]:
    """(recall, precision), detections outside the window and the per-sample row of one line."""
    try:
        truth = online_truth_times(item.task, item.raw)
    except (KeyError, TypeError, ValueError) as exc:
        raise RecordError(f"the release item has no usable ground-truth times ({exc!r})") from None
    if line.get("task", item.task) != item.task:
        raise RecordError(f"field 'task': {line['task']!r} here but {item.task!r} in the release")
    _check_truth(line, truth)
    window = online_window(item.task, item.ask_time, item.probes[-1].time)
    times, outside = _in_window(_times(line, which), window)
    try:
        recall, precision = online_question(truth, times)
    except ValueError as exc:
        raise RecordError(str(exc)) from None
    row = {"id": line["id"], "release_id": item.id, "task": item.task, "truth": truth, "detections": times}
    return (recall, precision), outside, {**row, "recall": recall, "precision": precision}


def score_ovo_online(gt: Path, pred: Path, options: argparse.Namespace) -> tuple[dict, list[dict]]:
    """``eval.score --protocol ovo --mode online_emgarde``: Em-Garde's forward F1 of a result file."""
    items = ovo_forward_items(gt)
    if not items:
        raise RecordError("the release holds no REC, SSR or CRR item", file=gt)
    lines = read_lines(pred, len(items))
    which = detection_list(lines, getattr(options, "detections", "auto"))
    per_task: dict[str, list[tuple[float, float]]] = {}
    counts = {"failed": 0, "missing": 0, "outside_window": 0}
    examples: dict[str, list[str]] = {"failed": [], "missing": []}
    rows = []
    for k, item in enumerate(items):
        line = lines.get(k)
        if line is None or "error" in line:
            key = "missing" if line is None else "failed"
            counts[key] += 1
            examples[key].append(f"id {k} (release id {item.id!r}, {item.task})")
            continue
        try:
            scores, outside, row = _ovo_question(item, line, which)
        except RecordError as err:
            raise err.located(file=pred, record=f"line {line['_line']} (id {k})") from None
        per_task.setdefault(item.task, []).append(scores)
        counts["outside_window"] += outside
        rows.append(row)
    _report("ovo online_emgarde", counts, examples)
    result = {**online_f1(per_task), "questions": len(items), "scored": len(rows), **counts}
    return {**result, "detections_scored": which}, rows


def sb_questions(gt: Path) -> list[ReleaseQuestion]:
    """Every question of a StreamingBench release file, segment by segment (Em-Garde's ids count them
    from 0)."""
    data = load_json(gt)
    if not isinstance(data, list):
        raise RecordError(f"expected a list of video segments, got {type(data).__name__}", file=gt)
    out = []
    for i, entry in enumerate(data):
        where = f"[{i}]"
        try:
            for k, raw in enumerate(entry_questions(entry)):
                where = f"[{i}].questions[{k}]"
                out.append(read_question(entry, raw, where))
        except RecordError as err:
            raise err.located(file=gt, record=where) from None
    return out


def score_sb_online(gt: Path, pred: Path, options: argparse.Namespace) -> tuple[dict, list[dict]]:
    """``eval.score --protocol streamingbench_proactive --mode online_emgarde``: Em-Garde's
    Recall@2s / Accuracy@2s / Recall@1s / Accuracy@1s of a result file."""
    questions = sb_questions(gt)
    if not questions:
        raise RecordError("the release holds no question", file=gt)
    lines = read_lines(pred, len(questions))
    which = detection_list(lines, getattr(options, "detections", "auto"))
    counts = {"failed": 0, "missing": 0, "outside_window": 0}
    examples: dict[str, list[str]] = {"failed": [], "missing": []}
    hits, rows = [], []
    for k, q in enumerate(questions):
        line = lines.get(k)
        if line is None or "error" in line:
            key = "missing" if line is None else "failed"
            counts[key] += 1
            examples[key].append(f"id {k} ({q.where})")
            continue
        try:
            _check_truth(line, q.ground_truth)
            window = (q.time_stamp + 1.0, q.ground_truth + float(LAST_POLL_AFTER_GT_S))
            times, outside = _in_window(_times(line, which), window)
        except RecordError as err:
            raise err.located(file=pred, record=f"line {line['_line']} (id {k})") from None
        counts["outside_window"] += outside
        hit = online_hits(times, q.ground_truth)
        hits.append(hit)
        rows.append(
            {"id": k, "question": q.where, "ground_truth": q.ground_truth, "detections": times, **hit}
        )
    _report("streamingbench_proactive online_emgarde", counts, examples)
    result = {**online_rates(hits, len(questions)), "questions": len(questions), "scored": len(rows)}
    return {**result, **counts, "detections_scored": which}, rows
