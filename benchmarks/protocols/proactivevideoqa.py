"""ProactiveVideoQA on its own files: the release's ``<TASK>/anno.json`` and MMDuet2's ``pred.jsonl``.

    python -m eval.score --protocol proactivevideoqa --gt ProactiveVideoQA --pred preds/ \\
        --judge-url http://127.0.0.1:8000/v1 --judge-model my-judge --judge-cache judge.sqlite

``--gt`` is the release root (every ``<TASK>/anno.json`` in it, tasks EGO, TV, VAD, WEB) or one
annotation file (read by :mod:`data_builders.sources.proactivevideoqa`). ``--pred`` is the
prediction format the benchmark's authors' own inference writes and their evaluation reads
(MMDuet2's ``proactive_eval/inference.py`` -> ``pred.jsonl`` -> ``evaluate.py --input_file``):
JSON Lines, one line per question::

    {"question_id": ..., "model_response_list": [{"role": "user" | "assistant", "content", "time"}, ...]}

where the assistant turns are the model's replies at their ``time`` (seconds of video) and the user
turns are the input kept for reading (ignored here); an assistant turn ``NO REPLY`` (MMDuet2's
silence, which its inference already leaves out) or with empty content is no reply. ``--pred`` is
one such file (for a root, holding the questions of every task read; the question ids must then be
unique across the tasks) or a folder with ``<task>/pred.jsonl`` per task (the task's name in any
case, as MMDuet2's ``outputs/<exp>/ego/``); :func:`write_predictions` writes that folder from stream
records and the project's predictions. VLMEvalKit's port reads its own per-step table instead (the
``records`` of each row's JSON ``prediction``, a reply at its ``video_span`` end): a VLMEvalKit
artefact, not the benchmark's.

Scoring (the arithmetic in :mod:`metrics.proactivevideoqa`): each answer turn's in-span distinct
replies are judged cumulatively by the LLM judge (:data:`JUDGE_PROMPT`, this project's wording of
the paper's 1-3 rubric; the answer is ``Score: <1-3>`` or a bare digit, :func:`parse_score`), and
PAUC is reported x 100, rounded to 2 decimals as the port does, under the port's names
``omega=0``, ``omega=0.5``, ``omega=1``, with ``num_videos`` (questions) and ``num_turns``; with
several tasks, ``per_task`` holds each task's figures and the top level is over all their turns.
Requests go through :class:`benchmarks.scoring.judge.Judge` (``--judge-*`` options: a total deadline per request,
a sqlite cache, the key from the environment); a judged point the judge could not rate (unparsable
answer, failed request) is left out of its curve, as in the ports, and counted under ``unrated``
(with stderr lines; ``endpoint_down`` says the endpoint stopped answering).

A question with no line in the predictions is scored as the official code scores it, every turn
with no reply (0.25 each), and counted under ``missing_predictions`` (with a stderr line naming up
to three). Bad input is a :class:`RecordError` naming the file, the item and the reason: a
prediction for a question id the ground truth lacks, two lines of one question, a turn with no time
or a time that is no number, replies out of time order, an unknown role, a ground-truth folder that
is no task.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.protocols.base import OfficialFormat, Protocol
from benchmarks.protocols.public import PublicRunner
from benchmarks.scoring.judge import Judge, config_from_args
from data_builders.record_io import iter_jsonl, write_jsonl
from data_builders.records import RecordError, Stream
from data_builders.sources.proactivevideoqa import (
    BENCHMARK_TASKS,
    Question,
    item_id,
    parse_question,
    release_files,
    release_items,
)
from data_builders.toolkit import RECORD_EXCEPTIONS, record_reason, seconds
from engine.replies import Prediction
from infra.files import write_text_atomic
from metrics.proactivevideoqa import OMEGAS, judged_points, pauc, turn_pauc

#: The official prediction file of a task in a prediction folder.
PRED_FILE = "pred.jsonl"
#: MMDuet2's silence text (an assistant turn that is no reply).
NO_REPLY = "NO REPLY"

JUDGE_PROMPT = """You grade one answer of a video question-answering assistant against the reference answer.
The assistant watched the video as it played and answered the question on its own, possibly in several
messages; the predicted answer below is everything it said so far, joined.

Question: {question}
Reference answer: {reference}
Predicted answer: {prediction}

Score how much of the reference answer's key information the predicted answer covers:
3 = mostly covered: every key point of the reference is there, perhaps reworded or with small errors
2 = partly covered: some of it is right, but key points are missing or clearly wrong
1 = not covered: related at most, most of the information missing, or irrelevant or very poor

Reply in exactly one line and nothing else:
Score: <1-3>"""

_SCORE = re.compile(r"score\s*[:=]\s*\**\s*(\d+)", re.IGNORECASE)


def parse_score(answer: str | None) -> int | None:
    """The judge's 1-3: a bare digit, or the first ``Score: <n>`` (any case); None otherwise or out of range.

    >>> parse_score("Score: 3"), parse_score(" 2\\n"), parse_score("score:1 because"), parse_score("**Score:** 2")
    (3, 2, 1, 2)
    >>> parse_score("Score: 4"), parse_score("I would say 3"), parse_score(None)
    (None, None, None)
    """
    text = (answer or "").strip()
    m = re.fullmatch(r"[1-3]", text) or _SCORE.search(text)
    if not m:
        return None
    value = int(m.group(1) if m.groups() else m.group(0))
    return value if 1 <= value <= 3 else None


# ---------------------------------------------------------------------------------------------
# Reading the release and the predictions


def read_release(gt: Path) -> list[Question]:
    """Every question of a release root or of one annotation file; the first bad item stops with
    a :class:`RecordError` naming the file, the item and the reason."""
    out: list[Question] = []
    for task, path in release_files(gt):
        seen: set[str] = set()
        for k, rec in enumerate(release_items(path)):
            try:
                q = parse_question(rec, task)
            except RECORD_EXCEPTIONS as exc:
                raise RecordError(record_reason(exc), file=path, record=item_id(k, rec)) from None
            if q.key in seen:
                raise RecordError("duplicate question_id", file=path, record=item_id(k, rec))
            seen.add(q.key)
            out.append(q)
    return out


#: The prediction files' shapes: MMDuet2's inference writes ``role`` user / assistant turns, on the
#: seconds of video seen (``frames_seen``); Em-Garde's ``Em-Garde/eval/proactive_video_qa/eval_proactive_video_qa.py``
#: writes replies only, without ``role``, at the time of the newest frame its detector saw (``frame``).
SHAPE_CLOCKS = {"mmduet2": "frames_seen", "emgarde": "frame"}


@dataclass
class PredFile:
    """One ``pred.jsonl`` read: ``question id -> [(time, text), ...]`` (the replies in file order,
    times as written), the file's shape (None: no turn to tell) and the questions whose run failed
    (Em-Garde's ``{"id", "error"}`` lines: scored as no reply)."""

    replies: dict[str, list[tuple[float, str]]]
    shape: str | None
    failed: list[str]


def _turn_reply(turn: Any, name: str, shapes: set[str]) -> tuple[float, str] | None:
    """A turn's ``(time, text)``; None for a user turn. A turn without ``role`` is Em-Garde's reply."""
    if not isinstance(turn, dict):
        raise RecordError("expected an object", field=name)
    if "role" not in turn:
        shapes.add("emgarde")
    elif turn["role"] == "user":
        shapes.add("mmduet2")
        return None
    elif turn["role"] == "assistant":
        shapes.add("mmduet2")
    else:
        raise RecordError(f"unknown role {turn['role']!r}", field=f"{name}.role")
    if turn.get("time") is None:
        raise RecordError("a reply has no time", field=f"{name}.time")
    time = seconds(turn["time"], f"{name}.time")
    content = turn.get("content")
    if not isinstance(content, str):
        raise RecordError(f"expected text, got {content!r}", field=f"{name}.content")
    return time, content


def _line_replies(row: dict, shapes: set[str]) -> list[tuple[float, str]]:
    turns = row.get("model_response_list")
    if not isinstance(turns, list):
        raise RecordError("missing or not a list", field="model_response_list")
    replies: list[tuple[float, str]] = []
    last = None
    for i, turn in enumerate(turns):
        reply = _turn_reply(turn, f"model_response_list[{i}]", shapes)
        if reply is None:
            continue
        if last is not None and reply[0] < last:
            raise RecordError(
                f"reply at {reply[0]}s comes after one at {last}s: replies must be in time order",
                field=f"model_response_list[{i}].time",
            )
        last = reply[0]
        if reply[1].strip() not in ("", NO_REPLY):
            replies.append(reply)
    return replies


def _question_key(row: Any, key: str) -> str:
    qid = row.get(key) if isinstance(row, dict) else None
    if qid is None or isinstance(qid, bool) or not isinstance(qid, (str, int)):
        raise RecordError(f"expected a {key}, got {qid!r}", field=key)
    return str(qid)


def read_pred_file(path: Path) -> PredFile:
    """One ``pred.jsonl`` of either shape (:data:`SHAPE_CLOCKS`); a file mixing them is an error."""
    out: dict[str, list[tuple[float, str]]] = {}
    lines: dict[str, int] = {}
    shapes: set[str] = set()
    failed: list[str] = []
    for lineno, row in iter_jsonl(path):
        where = f"line {lineno}"
        try:
            if not isinstance(row, dict):
                raise RecordError(f"expected a JSON object, got {type(row).__name__}")
            failed_run = "question_id" not in row and "error" in row
            qid = _question_key(row, "id" if failed_run else "question_id")
            where = f"{where} (question_id {qid})"
            if qid in lines:
                raise RecordError(f"a second line for this question (first on line {lines[qid]})")
            out[qid] = [] if failed_run else _line_replies(row, shapes)
        except RecordError as err:
            raise err.located(file=path, record=where) from None
        if failed_run:
            shapes.add("emgarde")
            failed.append(qid)
        lines[qid] = lineno
    if len(shapes) > 1:
        raise RecordError(
            "turns with a role (MMDuet2's shape) and without one (Em-Garde's) in one file", file=path
        )
    return PredFile(out, next(iter(shapes), None), failed)


def _task_pred_file(pred: Path, task: str) -> Path | None:
    for name in (task, task.lower()):
        if (pred / name / PRED_FILE).is_file():
            return pred / name / PRED_FILE
    return None


def read_pred_files(pred: Path, questions: list[Question]) -> dict[tuple[str, str], PredFile]:
    """``(task, file) -> PredFile`` of a ``pred.jsonl`` (task ``""``) or a folder of ``<task>/pred.jsonl``."""
    tasks = sorted({q.task for q in questions})
    if not pred.is_dir():
        return {("", str(pred)): read_pred_file(pred)}
    files = {task: _task_pred_file(pred, task) for task in tasks}
    if not any(files.values()):
        raise RecordError(
            f"no <task>/{PRED_FILE} for the task(s) {', '.join(tasks)} in this folder", file=pred
        )
    return {(task, str(path)): read_pred_file(path) for task, path in files.items() if path is not None}


def read_predictions(
    pred: Path, questions: list[Question], clock: ClockChoice | None = None
) -> tuple[dict[tuple[str, str], list[tuple[float, str]]], dict]:
    """``(task, question id) -> replies`` from a ``pred.jsonl`` or a folder of ``<task>/pred.jsonl``,
    the times moved to ``clock``'s scoring clock (:func:`clock_shift`), and what was read: the
    files' shape and clock, the failed runs. A prediction for a question the ground truth lacks
    is a :class:`RecordError`."""
    clock = clock or ClockChoice()
    known = {(q.task, q.key) for q in questions}
    by_id: dict[str, list[str]] = {}
    for task, qid in known:
        by_id.setdefault(qid, []).append(task)
    files = read_pred_files(pred, questions)
    shapes = {f.shape for f in files.values() if f.shape is not None}
    if len(shapes) > 1:
        raise RecordError("the task files are of different shapes (MMDuet2's and Em-Garde's)", file=pred)
    shape = next(iter(shapes), None)
    info = clock_info(shape, clock)
    out: dict[tuple[str, str], list[tuple[float, str]]] = {}
    failed: list[str] = []
    for (task, path), read in files.items():
        if not task:
            _one_task_per_id(by_id, pred)
        for qid, replies in read.replies.items():
            key = (task, qid) if task else (by_id.get(qid, [""])[0], qid)
            if key not in known:
                where = f" of task {task}" if task else ""
                raise RecordError(f"no question {qid!r} in the ground truth{where}", file=path)
            out[key] = _shifted(replies, info["shift_s"], path, qid)
        failed += [f"{task}/{qid}" if task else qid for qid in read.failed]
    return out, {**info, "failed_predictions": len(failed), "failed_examples": failed[:3]}


def _one_task_per_id(by_id: dict[str, list[str]], pred: Path) -> None:
    shared = sorted(qid for qid, ts in by_id.items() if len(ts) > 1)
    if shared:
        raise RecordError(
            f"question id(s) {shared[:3]} are in several tasks, so one prediction file cannot tell them "
            f"apart: give a folder with <task>/{PRED_FILE}",
            file=pred,
        )


def _shifted(replies: list[tuple[float, str]], shift: float, path: str, qid: str) -> list[tuple[float, str]]:
    out = [(t + shift, text) for t, text in replies]
    if any(t < 0 for t, _ in out):
        raise RecordError(
            f"a reply moved {shift:+g} s to the scoring clock falls before 0 s (is --pred-clock right?)",
            file=path,
            record=f"question_id {qid}",
        )
    return out


#: ``--pred-clock`` / ``--score-clock`` values.
PRED_CLOCKS = ("auto", "frame", "frames_seen")
SCORE_CLOCKS = ("as_written", "frame", "frames_seen")


@dataclass(frozen=True)
class ClockChoice:
    """How reply times are read: the file's clock (``auto``: by its shape, :data:`SHAPE_CLOCKS`),
    the clock they are scored on (``as_written``: unchanged, as the benchmark's own evaluation reads
    them) and the file's frame interval, seconds (needed to move between the two clocks)."""

    pred_clock: str = "auto"
    score_clock: str = "as_written"
    frame_interval: float | None = None

    @classmethod
    def of(cls, options: argparse.Namespace) -> ClockChoice:
        return cls(
            getattr(options, "pred_clock", "auto"),
            getattr(options, "score_clock", "as_written"),
            getattr(options, "frame_interval", None),
        )


def clock_shift(file_clock: str, score_clock: str, frame_interval: float | None) -> float:
    """Seconds added to each reply time to move it from ``file_clock`` to ``score_clock``: a reply
    written at its frame's time ``t`` is said when ``t + interval`` seconds have been seen.

    >>> clock_shift("frame", "frames_seen", 0.5), clock_shift("frames_seen", "frame", 1.0)
    (0.5, -1.0)
    >>> clock_shift("frame", "as_written", None), clock_shift("frame", "frame", None)
    (0.0, 0.0)
    """
    if score_clock in ("as_written", file_clock):
        return 0.0
    if frame_interval is None or frame_interval <= 0:
        raise RecordError(
            f"moving reply times from the {file_clock} clock to the {score_clock} clock needs the "
            "file's frame interval: --frame-interval SECONDS (Em-Garde's default 0.5, MMDuet2's 1)"
        )
    return frame_interval if score_clock == "frames_seen" else -frame_interval


def clock_info(shape: str | None, clock: ClockChoice) -> dict:
    """The ``reply_clock`` block of the result: the shape, the file's clock and where it came from,
    the scoring clock and the shift."""
    if clock.pred_clock not in PRED_CLOCKS or clock.score_clock not in SCORE_CLOCKS:
        raise RecordError(f"--pred-clock {clock.pred_clock!r} / --score-clock {clock.score_clock!r}: unknown")
    if clock.pred_clock != "auto":
        file_clock, source = clock.pred_clock, "--pred-clock"
    elif shape is not None:
        file_clock, source = SHAPE_CLOCKS[shape], f"the file's shape ({shape})"
    else:
        file_clock, source = None, "no turn to tell"
    shift = 0.0 if file_clock is None else clock_shift(file_clock, clock.score_clock, clock.frame_interval)
    scored_on = file_clock if clock.score_clock == "as_written" else clock.score_clock
    return {
        "shape": shape,
        "file_clock": file_clock,
        "file_clock_from": source,
        "scored_on": scored_on,
        "shift_s": shift,
    }


# ---------------------------------------------------------------------------------------------
# Scoring


def score_questions(
    questions: list[Question],
    predictions: dict[tuple[str, str], list[tuple[float, str]]],
    rate: Callable[[str], int | None],
) -> tuple[dict, list[dict]]:
    """PAUC of the questions with ``rate(prompt) -> 1..3 | None`` as the judge; (metrics, per-turn rows)."""
    rows: list[dict] = []
    per_task: dict[str, list[dict]] = {}
    missing: list[str] = []
    judged = unrated = 0
    for q in questions:
        replies = predictions.get((q.task, q.key))
        if replies is None:
            missing.append(f"{q.task}/{q.key}")
            replies = []
        for i, answer in enumerate(q.answers):
            scores: dict[float, int] = {}
            points = []
            for time, texts in judged_points(replies, answer.reply_span):
                prediction = " ".join(texts)
                score = rate(
                    JUDGE_PROMPT.format(question=q.question, reference=answer.content, prediction=prediction)
                )
                judged += 1
                if score is None:
                    unrated += 1
                else:
                    scores[time] = score
                points.append({"time": time, "prediction": prediction, "score": score})
            values = turn_pauc(scores, answer.reply_span, answer.related_span[1])
            per_task.setdefault(q.task, []).append(values)
            rows.append(
                {
                    "task": q.task,
                    "question_id": q.question_id,
                    "turn": i,
                    "reply_timespan": list(answer.reply_span),
                    "related_timespan": list(answer.related_span),
                    "predicted": (q.task, q.key) in predictions,
                    "points": points,
                    **{_name(o): v for o, v in values.items()},
                }
            )
    every = [v for values in per_task.values() for v in values]
    result = {
        **_figures(every, len(questions)),
        "missing_predictions": len(missing),
        "missing_examples": missing[:3],
        "judged": judged,
        "unrated": unrated,
    }
    if len(per_task) > 1:
        counts = {t: sum(1 for q in questions if q.task == t) for t in per_task}
        result["per_task"] = {t: _figures(per_task[t], counts[t]) for t in BENCHMARK_TASKS if t in per_task}
    return result, rows


def _name(omega: float) -> str:
    return f"omega={omega:g}"


def _figures(turns: list[dict], n_questions: int) -> dict:
    means = pauc(turns, OMEGAS)
    return {
        **{_name(o): round(means[o] * 100, 2) for o in OMEGAS},
        "num_videos": n_questions,
        "num_turns": len(turns),
    }


def score_files(gt: Path, pred: Path, options: argparse.Namespace) -> tuple[dict, list[dict]]:
    """``eval.score --protocol proactivevideoqa``: the release and a prediction file or folder."""
    try:
        config = config_from_args(options)  # a missing URL or model fails before any reading
    except ValueError as exc:
        raise RecordError(str(exc)) from None
    questions = read_release(gt)
    predictions, read = read_predictions(pred, questions, ClockChoice.of(options))
    judge = Judge(**config)
    result, rows = score_questions(
        questions, predictions, lambda p: judge.rate(p, "Score", parse=parse_score)
    )
    result["judge"] = {
        "requests": judge.requests_sent,
        "cache_hits": judge.cache_hits,
        "unparsable": judge.unparsable,
        "request_errors": judge.errors,
        "endpoint_down": getattr(judge.backend, "down", None),
    }
    clock = {k: read[k] for k in ("shape", "file_clock", "file_clock_from", "scored_on", "shift_s")}
    result.update(reply_clock=clock, failed_predictions=read["failed_predictions"])
    for line in report(result):
        print(f"eval.score: proactivevideoqa: {line}", file=sys.stderr)
    if read["failed_predictions"]:
        print(
            f"eval.score: proactivevideoqa: {read['failed_predictions']} question(s) whose run failed (an "
            f"'error' line), scored as no reply (e.g. {', '.join(read['failed_examples'])})",
            file=sys.stderr,
        )
    return result, rows


def report(result: dict) -> list[str]:
    """The stderr lines of a result: missing predictions and points the judge could not rate."""
    lines = []
    if result["missing_predictions"]:
        lines.append(
            f"{result['missing_predictions']} question(s) have no prediction, scored as no reply "
            f"(e.g. {', '.join(result['missing_examples'])})"
        )
    if result["unrated"]:
        lines.append(
            f"{result['unrated']} of {result['judged']} judged point(s) could not be rated and are left out of "
            f"their curves (unparsable {result['judge']['unparsable']}, failed requests "
            f"{result['judge']['request_errors']})"
        )
    if result["judge"]["endpoint_down"]:
        lines.append(f"the judge endpoint is down: {result['judge']['endpoint_down']}")
    return lines


# ---------------------------------------------------------------------------------------------
# Writing the official prediction format


#: ``benchmark.reply_clock`` -> the steps a written reply time lies after the frame the reply follows.
REPLY_CLOCKS = {"frame": 0, "frames_seen": 1}


def official_lines(
    streams: Iterable[Stream],
    predictions: Iterable[Prediction],
    *,
    reply_clock: str,
    steps_per_second: float = 1.0,
) -> dict[str, list[dict]]:
    """``task -> pred.jsonl lines`` of the project's predictions on ``proactivevideoqa`` streams: the
    question's user turns (``meta["user_turns"]``) and the replies as assistant turns, in time order
    (a user turn before a reply at the same time). A reply is written at the time of its frame
    (``reply_clock="frame"``) or one step later, the seconds of video seen when it is said
    (``"frames_seen"``: the clock of the benchmark's released inference, which adds a frame
    interval per frame read before it replies). A stream with no prediction gets no line."""
    if reply_clock not in REPLY_CLOCKS:
        raise ValueError(f"reply_clock must be one of {', '.join(REPLY_CLOCKS)}, got {reply_clock!r}")
    later = REPLY_CLOCKS[reply_clock] / steps_per_second
    by_id = {}
    for s in streams:
        if s.task != "proactivevideoqa" or s.meta.get("benchmark_task") not in BENCHMARK_TASKS:
            raise RecordError(
                f"not a ProactiveVideoQA stream (task {s.task!r}, benchmark_task "
                f"{s.meta.get('benchmark_task')!r})",
                record=s.id,
            )
        if s.meta.get("question_id") is None:
            raise RecordError("the stream has no meta question_id", record=s.id, field="meta")
        by_id[s.id] = s
    out: dict[str, list[dict]] = {}
    for p in predictions:
        s = by_id.get(p.id)
        if s is None:
            raise RecordError("a prediction for a stream not among the records", record=p.id)
        turns = [
            (float(u["time"]), 0, {"role": "user", "content": u["content"], "time": float(u["time"])})
            for u in s.meta.get("user_turns", [])
        ]
        turns += [
            (
                r.time + later,
                1,
                {"role": "assistant", "content": r.text, "time": r.time - s.video_offset + later},
            )
            for r in p.replies
        ]
        turns.sort(key=lambda x: (x[0], x[1]))
        out.setdefault(s.meta["benchmark_task"], []).append(
            {"question_id": s.meta["question_id"], "model_response_list": [t for _, _, t in turns]}
        )
    return out


def write_predictions(
    streams: Iterable[Stream],
    predictions: Iterable[Prediction],
    out: str | Path,
    *,
    reply_clock: str,
    steps_per_second: float = 1.0,
) -> list[Path]:
    """Write ``<out>/<task>/pred.jsonl`` (task lower-cased, as MMDuet2's output folders) per task, the
    replies on ``reply_clock`` (:func:`official_lines`); the files ``eval.score --protocol
    proactivevideoqa --pred <out>`` reads unchanged."""
    written = []
    lines_of = official_lines(
        streams, predictions, reply_clock=reply_clock, steps_per_second=steps_per_second
    )
    for task, lines in sorted(lines_of.items()):
        path = Path(out) / task.lower() / PRED_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        write_jsonl(path, lines)
        written.append(path)
    return written


def write_release(root: str | Path, streams: Iterable[Stream]) -> list[Path]:
    """Write ``<root>/<TASK>/anno.json`` (the release's layout) of the questions the streams were
    built from (``meta["release"]``), in stream order; returns the files."""
    tasks: dict[str, list[dict]] = {}
    for s in streams:
        item, task = s.meta.get("release"), s.meta.get("benchmark_task")
        if not isinstance(item, dict) or task not in BENCHMARK_TASKS:
            raise RecordError(
                "meta lacks the release item or its task (built by source=proactivevideoqa?)",
                record=s.id,
                field="meta",
            )
        tasks.setdefault(task, []).append(item)
    paths = []
    for task, items in sorted(tasks.items()):
        path = Path(root) / task / "anno.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps(items, indent=1) + "\n")
        paths.append(path)
    return paths


class ProactiveVideoQARunner(PublicRunner):
    """``eval.run benchmark=proactivevideoqa``: the stream as built (the question at its time); the
    model's replies are its answers in both modes (the benchmark's inference streams the video and
    lets the model speak when it decides, so ``official`` and ``streaming`` are one protocol),
    written on ``benchmark.reply_clock``."""

    def check(self, bench):
        if bench.reply_clock not in REPLY_CLOCKS:
            raise ValueError(
                f"benchmark {bench.name}: reply_clock={bench.reply_clock!r} is not one of {', '.join(REPLY_CLOCKS)}"
            )
        super().check(bench)

    def write_files(self, streams, predictions, folder, bench, rows):
        gt, pred = folder / "gt", folder / "pred"
        write_release(gt, streams)
        write_predictions(
            streams, predictions, pred, reply_clock=bench.reply_clock, steps_per_second=bench.steps_per_second
        )
        return gt, pred


PROTOCOL = Protocol(
    "proactivevideoqa",
    runner=ProactiveVideoQARunner,
    official=OfficialFormat(
        score_files,
        summary="ProactiveVideoQA PAUC at omega 0 / 0.5 / 1 (release <TASK>/anno.json, MMDuet2 pred.jsonl; LLM judge)",
    ),
)
