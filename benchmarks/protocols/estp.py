"""ESTP-Bench on its own files: the release GT and the prediction file its inference writes.

    python -m eval.score --protocol estp --gt estp_bench_sq.json --pred MiniCPMV_fbf.json --content judge \\
        --judge-url http://127.0.0.1:8000/v1 --judge-model MODEL
    python -m eval.score --protocol estp --gt estp_bench_cq_v3.json --pred results/ --content any   (timing only)

The metric is the paper's ESTP-F1 (``metrics.estp``; the official script ships only with the data,
so none was run here). ``docs/protocols.md`` ("ESTP-Bench") lists every choice.

Prediction format: what ``zhangyl4/EyeWO``'s ``eval_estp_batch.py`` writes (``benchmark.eval(data,
model, output_file, ...)``; with several GPUs one ``<output_file>.part<rank>`` per GPU, each holding
some of the videos): the release object itself, each qa given the model's answers under the model's
name, as the benchmark code it adapts stores them: ``qa[<model>] = {"dialog_history": [{"role":
"user" | "assistant", "content", "time"}, ...]}``. Every assistant turn is a reply at its ``time``
(seconds on the video's clock); user turns (the polling prompts) are not replies. ``--pred`` is that
file or a folder of its parts; ``--model`` names the key when a file holds several models.

A qa of the prediction file that the ground truth lacks, or whose question differs, is an error; a
ground-truth qa without the model's answers is counted under ``missing_predictions`` (and named on
stderr) and scored as silence: every answer a false negative, F1 0. Each answer score comes from
``--content`` (``judge`` as in the paper; ``any``: timing only, every matched answer rated 5); a pair
the scorer cannot score leaves its question out, counted under ``unscorable``.

:func:`write_official` writes that prediction file from stream records and the project's
predictions, so a run of ``eval.run`` can hand the official scorer a file it reads unchanged.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import random
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.protocols.base import OfficialFormat, Protocol
from benchmarks.protocols.public import PublicRunner
from data_builders.records import RecordError, Stream, Target
from data_builders.sources.estp import ReleaseQA, iter_release, qa_name, read_release
from data_builders.toolkit import load_json, seconds
from engine.replies import Prediction, Reply
from infra.files import atomic_writer
from metrics.content import Unscorable
from metrics.estp import (
    Answer,
    QuestionScore,
    aggregate,
    answer_from_content,
    binary_question,
    f1_of,
    optimal_time,
    score_question,
)

#: The key :func:`write_official` stores the project's answers under, unless told another.
MODEL_NAME = "proactive_vlm"

#: The key of a model's turns inside its entry of a qa.
HISTORY = "dialog_history"


def _pred_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    files = sorted(
        p for p in path.iterdir() if p.is_file() and ".json" in p.name and not p.name.startswith(".")
    )
    if not files:
        raise RecordError("prediction folder holds no .json file (nor .json.part<k>)", file=path)
    return files


def _model_keys(qa: dict, release_keys: set[str]) -> list[str]:
    return [k for k, v in qa.items() if k not in release_keys and isinstance(v, dict) and HISTORY in v]


def _replies(entry: Any, where: str) -> list[Reply]:
    history = entry.get(HISTORY) if isinstance(entry, dict) else None
    if not isinstance(history, list):
        raise RecordError(f"field '{HISTORY}': expected a list of turns")
    out = []
    for i, turn in enumerate(history):
        if not isinstance(turn, dict):
            raise RecordError(f"{HISTORY}[{i}]: expected a turn object, got a {type(turn).__name__}")
        if str(turn.get("role", "")).lower() != "assistant":
            continue
        if turn.get("time") is None:
            raise RecordError(f"{HISTORY}[{i}]: an assistant turn with no time")
        t = seconds(turn["time"], f"{HISTORY}[{i}].time")
        if t < 0:
            raise RecordError(
                f"field '{HISTORY}[{i}].time': a reply time is seconds on the video's clock, got {t}"
            )
        content = turn.get("content")
        out.append(Reply(time=t, text="" if content is None else str(content)))
    return sorted(out, key=lambda r: r.time)


def read_predictions(
    path: str | Path, truth: Sequence[ReleaseQA], model: str | None = None
) -> tuple[dict[tuple[str, str, int], list[Reply]], str]:
    """The model's replies per qa key, and the model's name (``model`` or the file's only one)."""
    path = Path(path)
    by_key = {qa.key: qa for qa in truth}
    entries: dict[tuple[str, str, int], tuple[dict, Path]] = {}
    for file in _pred_files(path):
        try:
            for video_uid, clip_uid, index, qa in iter_release(load_json(file, unique_keys=True)):
                key = (str(video_uid), str(clip_uid), index)
                where = qa_name(*key)
                if key not in by_key:
                    raise RecordError(
                        "a prediction for a question the ground truth does not have", record=where
                    )
                if not isinstance(qa, dict):
                    raise RecordError(f"expected a qa object, got a {type(qa).__name__}", record=where)
                gt = by_key[key].raw
                for field in ("question", "Task Type"):
                    if qa.get(field) != gt.get(field):
                        raise RecordError(
                            f"field '{field}' is {qa.get(field)!r}, the ground truth's is {gt.get(field)!r}: "
                            "the files do not belong together",
                            record=where,
                        )
                if key in entries:
                    raise RecordError(f"the question is also in {entries[key][1]}", record=where)
                entries[key] = (qa, file)
        except RecordError as err:
            raise err.located(file=file) from None
    names = sorted({k for key, (qa, _) in entries.items() for k in _model_keys(qa, set(by_key[key].raw))})
    if model is None:
        if not names:
            raise RecordError(f"no qa holds a model's answers (a key with a '{HISTORY}')", file=path)
        if len(names) > 1:
            raise RecordError(
                f"the file holds several models' answers ({', '.join(names)}): pass --model", file=path
            )
        model = names[0]
    elif model not in names:
        known = ", ".join(names) or "none"
        raise RecordError(
            f"no qa holds answers of --model {model!r} (models in the file: {known})", file=path
        )
    replies = {}
    for key, (qa, file) in entries.items():
        if model in qa:
            try:
                replies[key] = _replies(qa[model], qa_name(*key))
            except RecordError as err:
                raise err.located(file=file, record=qa_name(*key)) from None
    return replies, model


def _answers(qa: ReleaseQA) -> list[Answer]:
    return [Answer(a.start, a.end, optimal_time(qa.task, a.start, a.end)) for a in qa.answers]


def score_files(gt: Path, pred: Path, options: argparse.Namespace) -> tuple[dict, list[dict]]:
    """ESTP-F1 of a prediction file (or folder of parts) against a release file."""
    from benchmarks.scoring import build_content
    from benchmarks.scoring.options import settings_from_args

    truth = read_release(gt)
    if not truth:
        raise RecordError("the release file holds no question", file=gt)
    replies, model = read_predictions(pred, truth, getattr(options, "model", None))
    settings = settings_from_args(options)
    content = build_content(settings)
    prepare = getattr(content, "prepare", None)
    if prepare is not None:  # a batching scorer (embedding) encodes every text at once
        prepare(
            [a.content for qa in truth for a in qa.answers] + [r.text for rs in replies.values() for r in rs]
        )
    per_task: dict[str, list[float]] = {}
    pooled = {"tp": 0.0, "matched": 0, "fp": 0, "answers": 0}
    rows, missing, unscorable = [], [], []
    for qa in truth:
        got = replies.get(qa.key)
        absent = got is None
        if absent:
            missing.append(qa.name)
            got = []
        targets = [Target(time=a.start, content=a.content, window=(a.start, a.end)) for a in qa.answers]

        def rate(k: int, j: int, got: list[Reply] = got, targets: list[Target] = targets) -> float:
            return answer_from_content(content(got[j].text, targets[k]))

        try:
            q = score_question(_answers(qa), [r.time for r in got], rate)
        except Unscorable:
            unscorable.append(qa.name)
            continue
        per_task.setdefault(qa.task, []).append(q.f1)
        pooled["tp"] += q.tp
        pooled["matched"] += len(qa.answers) - q.fn
        pooled["fp"] += q.fp
        pooled["answers"] += len(qa.answers)
        rows.append(_question_row(qa, q, len(got), absent))
    if missing:
        _warn_missing(missing, len(truth), model, pred)
    p, r, f1 = f1_of(pooled["tp"], pooled["matched"], pooled["fp"], pooled["answers"])
    result = {
        **aggregate(per_task),
        "definition": PROJECT_DEFINITION,
        "content": settings.content,
        "model": model,
        "questions": len(truth),
        "scored": len(rows),
        "missing_predictions": len(missing),
        "unscorable": {"questions_left_out": len(unscorable), "qa": unscorable[:20]},
        "pooled": {"precision": 100 * p, "recall": 100 * r, "f1": 100 * f1, **pooled},
    }
    return result, rows


#: Whose reading the default mode follows: the project's own of the paper (the official scorer ships
#: only with the data and was not run here).
PROJECT_DEFINITION = "proactive-vlm metrics/estp.py (the paper's ESTP-F1 as this project reads it)"
#: Where ``--mode guiego``'s definition comes from.
GUIEGO_DEFINITION = (
    "CopeeeTang/GUI-Ego/proactive-project/experiments/estp_phase3/hypothesis_runner.py (compute_case_metrics)"
)


def score_files_guiego(gt: Path, pred: Path, options: argparse.Namespace) -> tuple[dict, list[dict]]:
    """``eval.score --protocol estp --mode guiego``: a public third-party reading of ESTP-F1
    (:func:`metrics.estp.binary_question`: timing only, each hit answer counted as 1, its interval
    first rounded up to the 0.5 s grid), on the same files as the default mode. The per-task,
    category and ``ESTP-F1`` figures are aggregated as the default mode aggregates them;
    ``mean_over_questions`` is the plain mean of the questions' F1, the average GUI-Ego prints."""
    truth = read_release(gt)
    if not truth:
        raise RecordError("the release file holds no question", file=gt)
    replies, model = read_predictions(pred, truth, getattr(options, "model", None))
    per_task: dict[str, list[float]] = {}
    rows, missing = [], []
    for qa in truth:
        got = replies.get(qa.key)
        if got is None:
            missing.append(qa.name)
        times = [r.time for r in got or []]
        q = binary_question([(a.start, a.end) for a in qa.answers], times, qa.clip_end)
        per_task.setdefault(qa.task, []).append(q.f1)
        rows.append(_question_row(qa, q, len(times), got is None))
    if missing:
        _warn_missing(missing, len(truth), model, pred)
    every = [row["f1"] for row in rows]
    result = {
        **aggregate(per_task),
        "mean_over_questions": 100 * sum(every) / len(every),
        "model": model,
        "questions": len(truth),
        "missing_predictions": len(missing),
    }
    return result, rows


def _question_row(qa: ReleaseQA, q: QuestionScore, replies: int, missing: bool) -> dict:
    """One question's row of the per-record output: its scores and how many replies it had."""
    return {
        "id": qa.record_id,
        "qa": qa.name,
        "task": qa.task,
        "f1": q.f1,
        "precision": q.precision,
        "recall": q.recall,
        "tp": q.tp,
        "fp": q.fp,
        "fn": q.fn,
        "answer_scores": list(q.per_answer),
        "replies": replies,
        "missing": missing,
    }


def _warn_missing(missing: list[str], questions: int, model: str, pred: Path) -> None:
    """Say on stderr which questions have no answers of the model (they score as silence)."""
    shown = "; ".join(missing[:3]) + (" ..." if len(missing) > 3 else "")
    print(
        f"eval.score: {len(missing)} of {questions} questions have no answers of model {model!r} "
        f"in {pred}, scored as silence (F1 0): {shown}",
        file=sys.stderr,
    )


def write_official(
    release: str | Path,
    streams: Iterable[Stream],
    predictions: Iterable[Prediction] | Mapping[str, Sequence[Reply]],
    out: str | Path,
    model: str = MODEL_NAME,
) -> int:
    """Write the prediction file of the official format (module docstring) for ``release``: each
    qa of a stream with a prediction gets ``qa[model] = {"dialog_history": [turns]}`` (the questions
    at the times they were asked and the replies, :func:`_history`);
    the others are left as the release has them (the scorer counts them missing). Returns the
    number of qa written with answers. A prediction without its stream, or a stream whose ``meta``
    does not name a qa of the release, is a :class:`RecordError`; the file is written atomically."""
    release = Path(release)
    data = copy.deepcopy(load_json(release))
    qas = {(str(v), str(c), k): qa for v, c, k, qa in iter_release(data)}
    if isinstance(predictions, Mapping):
        replies = {pid: list(rs) for pid, rs in predictions.items()}
    else:
        replies = {p.id: list(p.replies) for p in predictions}
    by_id = {s.id: s for s in streams}
    for pid in replies:
        if pid not in by_id:
            raise RecordError("a prediction for a stream that is not among the records", record=pid)
    written, seen = 0, {}
    for pid, rs in replies.items():
        meta = by_id[pid].meta
        try:
            key = (str(meta["video_uid"]), str(meta["clip_uid"]), int(meta["qa_index"]))
        except (KeyError, TypeError, ValueError):
            raise RecordError(
                "meta lacks video_uid / clip_uid / qa_index", record=pid, field="meta"
            ) from None
        qa = qas.get(key)
        if not isinstance(qa, dict):
            raise RecordError(
                f"meta names {qa_name(*key)}, which the release does not have", file=release, record=pid
            )
        if key in seen:
            raise RecordError(f"streams {seen[key]} and {pid} both name {qa_name(*key)}", record=pid)
        seen[key] = pid
        if model in qa:
            raise RecordError(
                f"the release's qa already has a key {model!r}", file=release, record=qa_name(*key)
            )
        qa[model] = {HISTORY: _history(by_id[pid], rs)}
        written += 1
    with atomic_writer(out) as fh:
        json.dump(data, fh, indent=1)
    return written


def _history(stream: Stream, replies: Sequence[Reply]) -> list[dict]:
    """A qa's ``dialog_history``: the questions as user turns at the times they were asked (the
    stream's instruction, then ``meta["user_turns"]``), the replies as assistant turns, in time
    order (a question before a reply at the same time)."""
    asked = [(stream.instruction_time, stream.instruction)] if stream.instruction else []
    asked += [(u["time"], u["content"]) for u in stream.meta.get("user_turns", [])]
    turns = [(t, 0, {"role": "user", "content": text, "time": t}) for t, text in asked if t is not None]
    turns += [(r.time, 1, {"role": "assistant", "content": r.text, "time": r.time}) for r in replies]
    return [turn for _, _, turn in sorted(turns, key=lambda x: (x[0], x[1]))]


#: ``benchmark.question_time``: when a single question (no time in the release) is asked.
QUESTION_TIMES = ("clip_start", "before_first_answer")


def asked_stream(stream: Stream, rule: str, steps_per_second: float = 1.0) -> Stream:
    """``stream`` with its question asked by ``rule``. ``clip_start``: as built, at the clip start.
    ``before_first_answer`` (EyeWO's released loader, ``data/estp/livechat.py``, for a single
    question): a time drawn uniformly from the clip start to one step before the midpoint of the
    qa's first answer, from a generator seeded by the qa's name (the same time on every run); the
    clip start when that midpoint is less than a step after it. A contextual qa (its questions are
    user turns with their own times) is left as it is under both."""
    if rule not in QUESTION_TIMES:
        raise ValueError(f"question_time must be one of {', '.join(QUESTION_TIMES)}, got {rule!r}")
    release = stream.meta.get("release")
    single = isinstance(release, dict) and release.get("question") is not None
    if rule == "clip_start" or not single or stream.meta.get("user_turns") or not stream.targets:
        return stream
    first = stream.targets[0]
    due = sum(first.window) / 2 if first.window is not None else first.time
    latest = due - 1.0 / steps_per_second
    if latest <= stream.clip_start:
        return dataclasses.replace(stream, instruction_time=stream.clip_start)
    meta = stream.meta
    draw = random.Random(qa_name(str(meta["video_uid"]), str(meta["clip_uid"]), int(meta["qa_index"])))
    return dataclasses.replace(stream, instruction_time=draw.uniform(stream.clip_start, latest))


def write_release(path: str | Path, streams: Sequence[Stream]) -> list[Stream]:
    """Write the release file (``{video_uid: {clip_uid: [qa, ...]}}``) of the qa the streams were
    built from (``meta["release"]``), each clip's qa in their release order; returns the streams
    with ``meta["qa_index"]`` renumbered to their place in the file written."""
    clips: dict[tuple[str, str], list[Stream]] = {}
    for s in streams:
        meta = s.meta
        if not isinstance(meta.get("release"), dict) or meta.get("qa_index") is None:
            raise RecordError(
                "meta lacks the release qa or its qa_index (built by source=estp?)", record=s.id, field="meta"
            )
        clips.setdefault((str(meta["video_uid"]), str(meta["clip_uid"])), []).append(s)
    data: dict[str, dict[str, list]] = {}
    renumbered = []
    for (video, clip), members in clips.items():
        members.sort(key=lambda s: int(s.meta["qa_index"]))
        data.setdefault(video, {})[clip] = [s.meta["release"] for s in members]
        renumbered += [dataclasses.replace(s, meta={**s.meta, "qa_index": k}) for k, s in enumerate(members)]
    with atomic_writer(path) as fh:
        json.dump(data, fh, indent=1)
    return renumbered


class EstpRunner(PublicRunner):
    """``eval.run benchmark=estp``: the stream as built (its first question at its time; a single
    question at the time ``benchmark.question_time`` picks, :func:`asked_stream`); the model's
    replies are its answers in both modes (the benchmark's own harness lets the model speak when it
    decides, so ``official`` and ``streaming`` are one protocol here)."""

    def check(self, bench):
        if bench.question_time not in QUESTION_TIMES:
            raise ValueError(
                f"benchmark {bench.name}: question_time={bench.question_time!r} is not one of "
                f"{', '.join(QUESTION_TIMES)}"
            )
        super().check(bench)

    def stream_rows(self, model, renderer, streams, path, engine_cfg, bench, **options):
        asked = [asked_stream(s, bench.question_time, bench.steps_per_second) for s in streams]
        yield from super().stream_rows(model, renderer, asked, path, engine_cfg, bench, **options)

    def write_files(self, streams, predictions, folder, bench, rows):
        gt, pred = folder / "estp_bench.json", folder / f"{bench.model_key}.json"
        streams = [asked_stream(s, bench.question_time, bench.steps_per_second) for s in streams]
        renumbered = write_release(gt, streams)
        write_official(gt, renumbered, predictions, pred, model=bench.model_key)
        return gt, pred

    def score_options(self, bench):
        return [*super().score_options(bench), "--model", bench.model_key]


PROTOCOL = Protocol(
    "estp",
    runner=EstpRunner,
    official=OfficialFormat(
        score_files,
        summary="ESTP-Bench ESTP-F1 (the paper's definition) on the release and EyeWO's output file",
    ),
    scoring_modes={
        "guiego": OfficialFormat(
            score_files_guiego,
            summary="ESTP-F1 as GUI-Ego reads it: timing only, each hit answer counted as 1 (0.5 s grid)",
            definition=GUIEGO_DEFINITION,
        )
    },
)
