"""StreamingBench Proactive Output on its own files: the release questions and the harness's output.

    python -m eval.score --protocol streamingbench_proactive --gt questions_proactive.json \\
        --pred proactive_output_MyModel.json [--model MyModel]

Followed: ``THUNLP-MT/StreamingBench``, ``src/data/count.py`` (task ``proactive``: the figures) and
``src/benchmark/StreamingBenchProactive.py`` (the harness that writes the prediction file). The
prediction file is the release list itself, each question carrying one entry per model,
``{"answered": poll time or false, "dialog_history": [{"role", "content", "time", "cost"}, ...]}``;
the last turn of the history is the answer, at the (absolute, whole-second) time of its poll. The
rules are in :mod:`metrics.streamingbench_proactive`; docs/protocols.md lists every choice.

Reading: the prediction file's questions are paired with the release's by video, ``time_stamp`` and
wording (so a file of a subset, or in another order, scores); each is scored against its own
ground-truth fields, as the official scorer scores it (which reads the prediction file alone): a
question given twice, one the release lacks and one whose ground truth differs from the release's
are scored, listed and named on stderr (``--strict`` refuses them). The model is the one key the prediction questions add to the release's fields, or
``--model`` when there are several. A release question without that model's entry is *missing*:
skipped, as the official scorer skips it (counted under ``missing`` and named on stderr). An empty
history (the harness writes one when the answer is due more than 3 s before the question) is scored
as a wrong answer; the official scorer stops there (``official_would_fail``). Everything else the
official scorer would misread or stop on (no history, a last turn that is not the assistant's,
a time that is not a number, a text that is not a string, an unknown model) is a ``RecordError``
naming the file, the question and the reason.

:func:`write_official` writes that prediction file from stream records and the project's
predictions, as the harness would have written it for the same answers.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.protocols.base import OfficialFormat, Protocol
from benchmarks.protocols.emgarde import SB_DEFINITION, score_sb_online
from benchmarks.protocols.public import PublicRunner, no_frame_window, probe_frames
from data_builders.records import TIME_EPS, RecordError, Stream
from data_builders.sources.streamingbench_proactive import (
    SOURCE,
    ReleaseQuestion,
    entry_questions,
    read_question,
)
from data_builders.stream_steps import step_times
from data_builders.toolkit import load_json
from engine.replies import Prediction, Reply
from infra.files import atomic_writer
from infra.registry import Registry
from metrics.streamingbench_proactive import Outcome, judge_answer, poll_of, poll_times, proactive_metrics

log = logging.getLogger(__name__)

MISSING = "no answer of the model (skipped, as the official scorer skips it)"
EMPTY_HISTORY = "an empty dialog_history (the official scorer stops on it: IndexError); scored as wrong"

#: The harness's prompt, ``PROMPT_TEMPLATE_PROACTIVE`` of ``src/benchmark/StreamingBenchProactive.py``,
#: word for word: every call puts its query in it (a poll's, then the bare question).
PROMPT_TEMPLATE = (
    "You are an advanced image question-answering AI assistant. You have been provided with images "
    "and a question related to the images. Your task is to carefully analyze the images and provide "
    "the answer to the question. You need to carefully confirm whether the images content meet the "
    "conditions of the question, and then output the correct content.\n"
    "\n"
    "Question: {}\n"
    "\n"
    "The answer is:\n"
)
#: The harness's poll query: the question, then the expected output (the ground truth) in quotes.
POLL_QUERY = '{question} Is it the right time to output "{expected}"? You can only answer yes or no.'


def poll_query(question: ReleaseQuestion) -> str:
    """What the harness asks at every poll (and records as the poll's user turn)."""
    return POLL_QUERY.format(question=question.question, expected=question.expected)


def said_yes(response: str) -> bool:
    """The harness's test of a poll's reply: ``yes`` anywhere in it, any case."""
    return "yes" in response.strip().lower()


def _questions(path: Path, unique_keys: bool = False) -> list[tuple[ReleaseQuestion, dict]]:
    """Every question of a release-structured file, checked, with its raw object (``unique_keys``: a
    key given twice in one object is an error, for a prediction file)."""
    data = load_json(path, unique_keys)
    if not isinstance(data, list):
        raise RecordError(f"expected a list of video segments, got {type(data).__name__}", file=path)
    out = []
    for i, entry in enumerate(data):
        where = f"[{i}]"
        try:
            for k, raw in enumerate(entry_questions(entry)):
                where = f"[{i}].questions[{k}]"
                out.append((read_question(entry, raw, where), raw))
        except RecordError as err:
            raise err.located(file=path, record=where) from None
    return out


def read_ground_truth(path: Path) -> list[tuple[ReleaseQuestion, dict]]:
    """The release's questions in file order; two questions with the same key are an error."""
    out = _questions(path)
    seen: dict[tuple, str] = {}
    for q, _ in out:
        if q.key in seen:
            raise RecordError(
                f"the same video, time_stamp and question as {seen[q.key]}", file=path, record=q.where
            )
        seen[q.key] = q.where
    return out


#: What :func:`pair_questions` notes where a prediction file and the release disagree.
NOTES = {
    "repeated_questions": "questions given more than once, each scored",
    "not_in_release": "questions not in the release, scored",
    "own_ground_truth": "questions scored against the file's own ground truth, not the release's",
}


def pair_questions(
    gt: Sequence[tuple[ReleaseQuestion, dict]], pred: Path, strict: bool = False
) -> tuple[list[tuple[ReleaseQuestion, dict]], dict[str, list[str]]]:
    """The prediction file's questions in file order (each with its own ground truth, as the
    official scorer reads it) and the disagreements with the release, by kind (:data:`NOTES`): a
    question the release lacks, one whose ground truth differs from the release's, one given twice.
    ``strict`` refuses each instead."""
    truth = {q.key: q for q, _ in gt}
    out: list[tuple[ReleaseQuestion, dict]] = []
    seen: dict[tuple, str] = {}
    notes: dict[str, list[str]] = {key: [] for key in NOTES}
    for q, raw in _questions(pred, unique_keys=True):
        g = truth.get(q.key)
        try:
            if g is None:
                problem = (
                    f"no question of the ground truth has video_path {q.video_path!r}, time_stamp "
                    f"{raw['time_stamp']!r} and this question"
                )
                _note(notes, "not_in_release", q.where, RecordError(problem), strict)
            else:
                for name, mine, theirs in (
                    ("ground_truth_time_stamp", q.ground_truth, g.ground_truth),
                    ("ground_truth_output", q.expected, g.expected),
                    ("task_type", q.task_type, g.task_type),
                ):
                    if mine != theirs:
                        problem = f"{raw[name]!r} differs from the ground truth's {g.where}: made from another release?"
                        _note(notes, "own_ground_truth", q.where, RecordError(problem, field=name), strict)
                        break
            if q.key in seen:
                problem = RecordError(f"the same question as {seen[q.key]}")
                _note(notes, "repeated_questions", f"{q.where} (as {seen[q.key]})", problem, strict)
        except RecordError as err:
            raise err.located(file=pred, record=q.where) from None
        seen.setdefault(q.key, q.where)
        out.append((q, raw))
    return out, notes


def _note(notes: dict[str, list[str]], key: str, where: str, problem: RecordError, strict: bool) -> None:
    if strict:
        raise problem
    notes[key].append(where)


def find_model(
    gt: Sequence[tuple[ReleaseQuestion, dict]],
    paired: Sequence[tuple[ReleaseQuestion, dict]],
    pred: Path,
    given: str | None,
) -> str:
    """The model whose answers are scored: ``given`` (``--model``), else the one key the prediction
    questions add to the release's fields."""
    release_fields = {name for _, raw in gt for name in raw}
    added: dict[str, int] = {}
    for _, raw in paired:
        for name in raw:
            if name not in release_fields:
                added[name] = added.get(name, 0) + 1
    found = ", ".join(f"{name!r} ({n} questions)" for name, n in sorted(added.items())) or "none"
    if given is not None:
        if given not in added:
            raise RecordError(
                f"no question holds answers of model {given!r} (models found: {found})", file=pred
            )
        return given
    if not added:
        raise RecordError("no question holds a model's answers (keys beyond the release's fields)", file=pred)
    if len(added) > 1:
        raise RecordError(
            f"the questions hold answers of several models ({found}): pick one with --model", file=pred
        )
    return next(iter(added))


def last_turn(answer: Any, model: str) -> tuple[float, str] | None:
    """(time, text) of the last turn of a model entry, ``None`` for an empty history; a malformed
    entry raises a ``RecordError`` naming the field."""
    if not isinstance(answer, dict):
        raise RecordError(
            f"expected an object {{answered, dialog_history}}, got {type(answer).__name__}", field=model
        )
    history = answer.get("dialog_history")
    if not isinstance(history, list):
        raise RecordError("missing or not a list", field=f"{model}.dialog_history")
    if not history:
        return None
    at = f"{model}.dialog_history[{len(history) - 1}]"
    turn = history[-1]
    if not isinstance(turn, dict):
        raise RecordError(f"expected an object, got {type(turn).__name__}", field=at)
    if turn.get("role") != "assistant":
        raise RecordError(
            f"the last turn must be the assistant's answer, got role {turn.get('role')!r}", field=at
        )
    time, text = turn.get("time"), turn.get("content")
    if isinstance(time, bool) or not isinstance(time, (int, float)) or not math.isfinite(time):
        raise RecordError(f"expected the poll time in seconds, got {time!r}", field=f"{at}.time")
    if not isinstance(text, str):
        raise RecordError(
            f"expected the answer text, got {type(text).__name__} {text!r}", field=f"{at}.content"
        )
    return float(time), text


def _count(out: dict, key: str, reason: str, example: str) -> None:
    out.setdefault(key, {}).setdefault(reason, 0)
    out[key][reason] += 1
    examples = out.setdefault(f"{key}_examples", {}).setdefault(reason, [])
    if len(examples) < 3:
        examples.append(example)


def _row(q: ReleaseQuestion) -> dict:
    return {
        "id": q.where,
        "video_path": q.video_path,
        "time_stamp": q.time_stamp,
        "ground_truth": q.ground_truth,
    }


def score_files(
    gt_path: Path, pred_path: Path, model: str | None, strict: bool = False
) -> tuple[dict, list[dict]]:
    """The official figures of one model's answers in ``pred_path`` (each question against its own
    ground truth, as the official scorer scores it; :func:`pair_questions`) against the release
    ``gt_path``, and one row per scored question, then one per release question left unanswered."""
    gt = read_ground_truth(gt_path)
    paired, disagree = pair_questions(gt, pred_path, strict)
    model = find_model(gt, paired, pred_path, model)
    outcomes, rows, notes = [], [], {}
    answered = set()
    for q, raw in paired:
        if model not in raw:
            continue  # the official scorer skips it; a release question counts as missing below
        answered.add(q.key)
        try:
            turn = last_turn(raw[model], model)
        except RecordError as err:
            raise err.located(file=pred_path, record=q.where) from None
        if turn is None:
            _count(notes, "official_would_fail", EMPTY_HISTORY, q.where)
            outcomes.append(Outcome(q.task_type, False, False))
            rows.append(
                {**_row(q), "status": "empty_history", "time_correct": False, "answer_correct": False}
            )
            continue
        on_time, right = judge_answer(turn[0], turn[1], ground_truth=q.ground_truth, expected=q.expected)
        outcomes.append(Outcome(q.task_type, on_time, right))
        rows.append(
            {**_row(q), "status": "scored", "time": turn[0], "time_correct": on_time, "answer_correct": right}
        )
    for q, _ in gt:
        if q.key not in answered:
            _count(notes, "dropped", MISSING, q.where)
            rows.append({**_row(q), "status": "missing"})
    for key, where in disagree.items():
        if where:
            shown = ", ".join(where[:10]) + (", ..." if len(where) > 10 else "")
            print(
                f"eval.score: streamingbench_proactive: {pred_path}: {len(where)} {NOTES[key]}, as the "
                f"official scorer scores them (--strict refuses them): {shown}",
                file=sys.stderr,
            )
    metrics = proactive_metrics(outcomes)
    missing = notes.get("dropped", {}).get(MISSING, 0)
    found = {key: where for key, where in disagree.items() if where}
    return {"model": model, **metrics, "questions": len(gt), "missing": missing, **found, **notes}, rows


def score_official(gt: Path, pred: Path, options: argparse.Namespace) -> tuple[dict, list[dict]]:
    """``eval.score --protocol streamingbench_proactive``: see the module docstring."""
    return score_files(gt, pred, getattr(options, "model", None), bool(getattr(options, "strict", False)))


# ----------------------------------------------------------------------------------------------
# Writing the official prediction file from the project's predictions


def official_answer(question: ReleaseQuestion, replies: Iterable[Reply]) -> dict:
    """A question's model entry as the harness writes it for a model that speaks first at the
    frame of the first reply: one user turn (the poll query) and one assistant turn per poll ("no"
    while the model is silent, "yes" at the poll that shows that frame), then the question and the
    reply's text at that poll; ``answered`` is that poll's time, or false (every poll "no") when the first reply
    comes past the last poll or there is none. ``cost`` (the harness's seconds per call) is null:
    not measured. Times are absolute seconds on the video's clock, as the harness writes them."""
    answer = None
    for reply in replies:
        at = poll_of(reply.time, question.time_stamp, question.ground_truth)
        if at is not None:
            answer = (at, reply.text)
        break  # the harness stops at the first answer: later replies are never asked for
    history = []
    for at in poll_times(question.time_stamp, question.ground_truth):
        said = answer is not None and at == answer[0]
        history.append({"role": "user", "content": poll_query(question), "time": at, "cost": None})
        history.append({"role": "assistant", "content": "yes" if said else "no", "time": at, "cost": None})
        if said:
            history.append({"role": "user", "content": question.question, "time": at, "cost": None})
            history.append({"role": "assistant", "content": answer[1], "time": at, "cost": None})
            break
    return {"answered": answer[0] if answer is not None else False, "dialog_history": history}


#: The turns of a transcript (a prediction row's ``polls``, :class:`StreamingBenchRunner`).
TRANSCRIPT_TURNS = ("poll", "question")


def harness_answer(question: ReleaseQuestion, transcript: Sequence[Any], where: str) -> dict:
    """A question's model entry from the transcript of the harness's calls, as the harness writes
    it: per call a user turn (the poll query, or the bare question after a "yes") and the model's
    reply, both at the poll's time; ``answered`` is the poll of the bare question, or false."""
    history, answered = [], False
    for k, turn in enumerate(transcript):
        ok = isinstance(turn, dict) and turn.get("turn") in TRANSCRIPT_TURNS
        if not ok or not isinstance(turn.get("response"), str) or not isinstance(turn.get("time"), int):
            raise RecordError(
                f"expected {{turn: poll|question, time: int, response: str}}, got {turn!r}",
                record=where,
                field=f"polls[{k}]",
            )
        asked = poll_query(question) if turn["turn"] == "poll" else question.question
        history.append({"role": "user", "content": asked, "time": turn["time"], "cost": None})
        history.append({"role": "assistant", "content": turn["response"], "time": turn["time"], "cost": None})
        if turn["turn"] == "question":
            answered = turn["time"]
    return {"answered": answered, "dialog_history": history}


def streaming_answer(question: ReleaseQuestion, replies: Iterable[Reply]) -> dict:
    """A question's model entry for ``protocol_mode=streaming``: the question at its ``time_stamp``
    and the model's first reply from then on as the answer, at the time of its own frame (no poll:
    the model decided to speak there). A model that never spoke gets the entry the harness writes
    for one that answers "no" at every poll (the scorer then reads that last "no", at the last
    poll), so silence scores alike in both modes."""
    first = next((r for r in sorted(replies, key=lambda r: r.time) if r.time >= question.time_stamp), None)
    if first is None:
        return official_answer(question, [])
    history = [{"role": "user", "content": question.question, "time": question.time_stamp, "cost": None}]
    at = int(first.time) if float(first.time).is_integer() else first.time
    history.append({"role": "assistant", "content": first.text, "time": at, "cost": None})
    return {"answered": at, "dialog_history": history}


#: How each ``protocol_mode`` turns a question's replies into its model entry.
ANSWER_RULES = Registry(
    "StreamingBench proactive answer rule",
    {
        "official": "benchmarks.protocols.streamingbench_proactive:official_answer",
        "streaming": "benchmarks.protocols.streamingbench_proactive:streaming_answer",
    },
)


def _release_place(stream: Stream) -> tuple[int, int, dict, dict]:
    meta = stream.meta
    try:
        if stream.task != SOURCE:
            raise RecordError(f"a stream of task {stream.task!r}, not {SOURCE!r}", field="task")
        place = meta.get("entry"), meta.get("question_index")
        entry, raw = meta.get("release_entry"), meta.get("release_question")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in place) or not (
            isinstance(entry, dict) and isinstance(raw, dict)
        ):
            raise RecordError(
                f"needs entry, question_index, release_entry and release_question (built by source={SOURCE})",
                field="meta",
            )
    except RecordError as err:
        raise err.located(record=stream.id) from None
    return place[0], place[1], entry, raw


def write_official(
    path: str | Path,
    streams: Sequence[Stream],
    predictions: Iterable[Prediction],
    model: str,
    *,
    pred_file: str | Path | None = None,
    mode: str = "official",
    transcripts: Mapping[str, Sequence[Any]] | None = None,
) -> dict:
    """Write the harness's prediction file for ``model`` (the release's segments, each question
    with its ``model`` entry, :func:`official_answer`) from the stream records and the project's
    predictions; whole or not at all. A stream without a prediction gets no entry (the scorer
    counts it missing; logged); a prediction of no stream is an error. ``mode`` picks the answer
    rule (:data:`ANSWER_RULES`: ``official``, the harness's polls; ``streaming``); in ``official``
    mode a stream with a transcript of the harness's calls (``transcripts``: stream id -> the
    prediction row's ``polls``) is written from it (:func:`harness_answer`). Returns the counts."""
    answer_of = ANSWER_RULES[mode]
    if not isinstance(model, str) or not model:
        raise RecordError(f"the model's key must be a non-empty string, got {model!r}")
    by_id = {s.id: s for s in streams}
    replies: dict[str, list[Reply]] = {}
    for p in predictions:
        if p.id not in by_id:
            raise RecordError("a prediction for no stream of the records", file=pred_file, record=p.id)
        replies[p.id] = p.replies
    entries: dict[int, dict] = {}
    questions: dict[int, dict[int, dict]] = {}
    counts = {"questions": 0, "answered": 0, "unanswered": 0, "missing": 0}
    for s in streams:
        i, k, entry, raw = _release_place(s)
        try:
            question = read_question(entry, raw, s.id)
        except RecordError as err:
            raise err.located(record=s.id) from None
        if k in questions.setdefault(i, {}):
            raise RecordError(
                f"the same release question [{i}].questions[{k}] as another stream", record=s.id
            )
        entries.setdefault(i, entry)
        item = dict(raw)
        counts["questions"] += 1
        if s.id in replies:
            if mode == "official" and transcripts is not None and s.id in transcripts:
                item[model] = harness_answer(question, transcripts[s.id], s.id)
            else:
                item[model] = answer_of(question, replies[s.id])
            counts["answered" if item[model]["answered"] is not False else "unanswered"] += 1
        else:
            counts["missing"] += 1
        questions[i][k] = item
    _warn_missing([s.id for s in streams if s.id not in replies], len(streams), model)
    data = [
        {**entries[i], "questions": [questions[i][k] for k in sorted(questions[i])]} for i in sorted(entries)
    ]
    with atomic_writer(path) as fh:
        json.dump(data, fh, indent=4)
    return counts


def _warn_missing(missing: list[str], n: int, model: str) -> None:
    if missing:
        log.warning(
            "%d of %d streams have no prediction; written without a %r entry (the scorer skips them): %s",
            len(missing),
            n,
            model,
            ", ".join(missing[:3]) + (", ..." if len(missing) > 3 else ""),
        )


def write_release(path: str | Path, streams: Sequence[Stream]) -> int:
    """Write the release file (``questions_proactive.json``'s structure) of the questions the
    streams were built from, from the release fields their ``meta`` keeps; returns the questions."""
    entries: dict[int, dict] = {}
    questions: dict[int, dict[int, dict]] = {}
    for s in streams:
        i, k, entry, raw = _release_place(s)
        entries.setdefault(i, entry)
        questions.setdefault(i, {})[k] = raw
    data = [
        {**entries[i], "questions": [questions[i][k] for k in sorted(questions[i])]} for i in sorted(entries)
    ]
    with atomic_writer(path) as fh:
        json.dump(data, fh, indent=4)
    return sum(len(q) for q in questions.values())


def poll_step(stream: Stream, at: int, steps_per_second: float = 1.0) -> int:
    """The last step of ``stream`` (which starts at the question's ``time_stamp``) that the poll at
    ``at`` shows: the harness cuts ``[time_stamp, at)`` (``split_video``: ``ss=time_stamp``,
    ``t=at - time_stamp``), the frames before ``at``; at most the stream's last step."""
    n = len(step_times(stream, steps_per_second))
    held = math.ceil((at - stream.clip_start) * steps_per_second - TIME_EPS)
    return min(max(held, 1), n) - 1


def poll_probes(stream: Stream, question: ReleaseQuestion, steps_per_second: float = 1.0) -> list:
    """``protocol_mode=official``: the harness's polls of one question as probes, one per poll
    (``metrics.streamingbench_proactive.poll_times``), each asking :func:`poll_query` inside
    :data:`PROMPT_TEMPLATE` on the step its clip ends on; a probe's key is ``("poll", time)``."""
    from engine.probes import Probe

    prompt = PROMPT_TEMPLATE.format(poll_query(question))
    return [
        Probe(poll_step(stream, at, steps_per_second), prompt, ("poll", at))
        for at in poll_times(question.time_stamp, question.ground_truth)
    ]


def ask_question(question: ReleaseQuestion):
    """The harness's follow-up: after a poll's reply with "yes", the bare question in
    :data:`PROMPT_TEMPLATE` on the same clip."""
    from engine.probes import Probe

    def follow(answer):
        if not said_yes(answer.text):
            return None
        at = answer.probe.key[1]
        return Probe(answer.probe.step, PROMPT_TEMPLATE.format(question.question), ("question", at))

    return follow


class StreamingBenchRunner(PublicRunner):
    """``eval.run benchmark=streamingbench_proactive``. ``streaming``: the stream as built (the
    question at its ``time_stamp``, the clip to ``ground_truth_time_stamp + 4``), the model's first
    reply its answer. ``official``: the harness's calls (:func:`poll_probes`, :func:`ask_question`:
    the poll query with the expected output at every poll on the clip ``[time_stamp, poll)``, the
    model made to answer; after a "yes", the bare question on the same clip, whose reply is the
    answer), one causal pass per question (``engine.probes``); the row's ``polls`` keep the
    transcript the prediction file is written from."""

    def stream_rows(self, model, renderer, streams, path, engine_cfg, bench, **options):
        if bench.protocol_mode != "official":
            yield from super().stream_rows(model, renderer, streams, path, engine_cfg, bench, **options)
            return
        import torch

        from engine.probes import answer_probes

        no_frame_window(engine_cfg, bench)
        for s in streams:
            if s.id in options.get("skip", frozenset()):
                continue
            _, _, entry, raw = _release_place(s)
            question = read_question(entry, raw, s.id)
            probes = poll_probes(s, question, renderer.steps_per_second)
            answers = []
            if probes:
                frames = probe_frames(s, path, renderer, options)
                with torch.inference_mode():
                    answers = answer_probes(model, renderer, s, frames, probes, max_new_tokens=engine_cfg.max_new_tokens,
                                            full_logits=False, cfg=engine_cfg, follow_up=ask_question(question))  # fmt: skip
            polls = [{"turn": a.probe.key[0], "time": a.probe.key[1], "response": a.text} for a in answers]
            said = [a for a in answers if a.probe.key[0] == "question"]
            replies = [{"time": a.time, "text": a.text, "category": None} for a in said]
            yield {"id": s.id, "replies": replies, "polls": polls, "p_response": [], "fired": []}

    def write_files(self, streams, predictions, folder, bench, rows):
        gt, pred = folder / "questions_proactive.json", folder / f"proactive_output_{bench.model_key}.json"
        write_release(gt, streams)
        transcripts = {r["id"]: r["polls"] for r in rows if "polls" in r}
        write_official(
            pred, streams, predictions, bench.model_key, mode=bench.protocol_mode, transcripts=transcripts
        )
        return gt, pred

    def score_options(self, bench):
        return ["--model", bench.model_key]


PROTOCOL = Protocol(
    SOURCE,
    runner=StreamingBenchRunner,
    official=OfficialFormat(
        score_official, summary="StreamingBench Proactive Output: time_accuracy, answer_accuracy (0-1)"
    ),
    scoring_modes={
        "online_emgarde": OfficialFormat(
            score_sb_online,
            summary="Em-Garde's Recall@2s, Accuracy@2s, Recall@1s, Accuracy@1s (its result file; 0-1)",
            definition=SB_DEFINITION,
        )
    },
)
