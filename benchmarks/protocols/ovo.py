"""OVO-Bench on its own files: the release's ``ovo_bench_new.json`` and a model's prediction folder.

    python -m eval.score --protocol ovo --gt data/ovo_bench_new.json --pred results/<model>

Followed: ``JoeLeelyf/OVO-Bench`` ``score.py`` (reads every file of ``results/<model>/`` and
concatenates their ``backward``, ``realtime`` and ``forward`` lists) and ``utils/OVOBenchScore.py``
(``OVOBenchOfflineScore``; the rules are :mod:`metrics.ovo`'s). A prediction file is what the
official harness writes (``utils/OVOBench.py``): ``{"backward": [...], "realtime": [...],
"forward": [...]}``, a multiple-choice item ``{"id", "video", "task", "question", "response",
"ground_truth"}`` and a forward item the release's item with ``test_info[i].response`` added. A
response is a string, or null where the model failed (scored 0).

Each entry is scored as the official scorer scores it: against its own ground truth (its
``ground_truth``; per probe its ``count`` / ``type``; the release's where it has none), under its own
task. An id given more than once (two of the published result folders reuse ids of an older
numbering), an id not in the release and a ground truth other than the release's are scored so,
counted (``reused_ids``, ``not_in_release``, ``own_ground_truth``) and named on stderr; ``--strict``
refuses them and checks every entry against the release: its ``ground_truth``, ``task``, ``count``,
``type``, ``step`` and probe times, where given, and its ``test_info`` length. Refused in both, each
naming the file, the item and the reason: an entry in another part's list (the official scorer
stops or misscores there), a missing ``response`` and a response that is neither a string nor null
(the official scorer stops on a list in REC and takes list membership elsewhere), a
``--pred`` that is a file, not a folder (the official scorer reads a folder). Release items with no
prediction are left out, as the official scorer leaves them out: they are counted (``missing``,
per task) and named on stderr, and a part with none scored has no figure, nor then the total.

:func:`write_predictions` writes the same format from the project's stream records (built by
``source=ovo``, :mod:`data_builders.sources.ovo`) and predictions (``{"id", "replies"}``): the
answer to a question or probe is the first reply at or after the step it lands on (``official``:
the last step of its official cut, the frames before ``ceil(time)``) and before the next question's
step (questions landing on one step take its replies in order); none is a null
response. A record with no prediction is left out of the file, and so is an SSR item predicted on
some of its steps only (both counted and logged; the scorer then counts the items missing).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.protocols.base import OfficialFormat, Protocol
from benchmarks.protocols.emgarde import OVO_DEFINITION, score_ovo_online
from benchmarks.protocols.public import PublicRunner, no_frame_window, probe_frames
from data_builders.records import TIME_EPS, RecordError, Stream
from data_builders.sources.ovo import Item, cut_step, item_id, read_release
from data_builders.stream_steps import step_times, target_step
from data_builders.toolkit import load_json
from engine.replies import Prediction
from infra.files import atomic_writer
from infra.registry import Registry
from metrics.ovo import PARTS, TASK_PART, TASKS, figures, probe_score

log = logging.getLogger(__name__)

#: The file :func:`write_predictions` writes into the prediction folder.
PREDICTION_FILE = "ovo_predictions.json"
#: The fields of a multiple-choice item in the official prediction file.
CHOICE_FIELDS = ("id", "video", "task", "question", "response", "ground_truth")


def prediction_files(folder: Path) -> list[Path]:
    """The ``.json`` files of a prediction folder, in name order."""
    if not folder.is_dir():
        raise RecordError(
            "expected the folder <results>/<model> of official prediction files (the official "
            "score.py reads a folder), got a file",
            file=folder,
        )
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix == ".json")
    if not files:
        raise RecordError("no .json prediction file in the folder", file=folder)
    return files


def _response(entry: dict, name: str) -> str | None:
    if "response" not in entry:
        raise RecordError(f"field '{name}response' is missing (null marks a failed answer)")
    value = entry["response"]
    if value is not None and not isinstance(value, str):
        raise RecordError(
            f"field '{name}response': expected a string or null, got {type(value).__name__} {value!r}"
        )
    return value


def _agree(given: Any, released: Any, name: str) -> None:
    same = given == released and isinstance(given, bool) == isinstance(released, bool)
    if not same:
        raise RecordError(
            f"field '{name}': {given!r} here but {released!r} in the release (a prediction file made "
            "from another release?)"
        )


def parse_answers(entry: Any, item: Item, part: str) -> list[str | None]:
    """The responses of one prediction item, checked against its release item (one per question:
    one for multiple choice, one per probe for forward)."""
    if part != item.part:
        raise RecordError(f"listed under '{part}', but the release's {item.task} is a {item.part} task")
    if "task" in entry:
        _agree(entry["task"], item.task, "task")
    if item.part != "forward":
        if "ground_truth" in entry:
            _agree(entry["ground_truth"], item.letter, "ground_truth")
        return [_response(entry, "")]
    info = entry.get("test_info")
    if not isinstance(info, list) or len(info) != len(item.probes):
        got = f"{len(info)} entries" if isinstance(info, list) else repr(info)
        raise RecordError(f"field 'test_info': expected the release's {len(item.probes)} probes, got {got}")
    out = []
    for probe, given in zip(item.probes, info, strict=True):
        name = f"test_info[{probe.index}]."
        if not isinstance(given, dict):
            raise RecordError(f"field '{name[:-1]}': expected an object, got {type(given).__name__}")
        for key, released in probe.fields.items():
            if key in given:
                _agree(given[key], released, name + key)
        out.append(_response(given, name))
    return out


@dataclass(frozen=True)
class Answered:
    """One prediction entry, read: its id, task, part, responses and the answers they are scored
    against (the letter; per probe the count or Yes/No)."""

    id: Any
    task: str
    part: str
    responses: list[str | None]
    expected: list[str]


def _own_expected(task: str, probe: dict, released: Any, name: str) -> str:
    """A probe's expected answer from the entry's own ``count`` / ``type`` (the release's where the
    entry has none), as the official scorer reads it."""
    key = "count" if task == "REC" else "type"
    if key not in probe:
        if released is None:
            raise RecordError(f"field '{name}{key}' is missing and the release has no such probe")
        return released.expected
    value = probe[key]
    if task == "REC":
        if isinstance(value, bool) or not isinstance(value, int):
            raise RecordError(f"field '{name}count': expected a whole number, got {value!r}")
        return str(value)
    if isinstance(value, bool) or value not in (0, 1):
        raise RecordError(f"field '{name}type': expected 0 (no) or 1 (yes), got {value!r}")
    return "Yes" if value == 1 else "No"


def own_answers(entry: dict, item: Item | None, part: str) -> Answered:
    """An entry scored as the official scorer scores it: its own task and its own ground truth
    (``ground_truth``; per probe ``count`` / ``type``), the release's item lending what it lacks."""
    rid = item_id(entry)
    task = entry.get("task", item.task if item is not None else None)
    if task not in TASK_PART:
        raise RecordError(f"field 'task': unknown task {task!r} (OVO-Bench's are {', '.join(TASK_PART)})")
    if TASK_PART[task] != part:
        raise RecordError(f"listed under '{part}', but {task} is a {TASK_PART[task]} task")
    same = item if item is not None and item.task == task else None
    if part != "forward":
        letter = entry.get("ground_truth", same.letter if same is not None else None)
        if not isinstance(letter, str) or not letter:
            raise RecordError(f"field 'ground_truth': expected the right option's letter, got {letter!r}")
        return Answered(rid, task, part, [_response(entry, "")], [letter])
    info = entry.get("test_info")
    if not isinstance(info, list) or not info:
        raise RecordError(f"field 'test_info': expected a non-empty list of probes, got {info!r}")
    responses, expected = [], []
    for k, probe in enumerate(info):
        name = f"test_info[{k}]."
        if not isinstance(probe, dict):
            raise RecordError(f"field '{name[:-1]}': expected an object, got {type(probe).__name__}")
        released = same.probes[k] if same is not None and k < len(same.probes) else None
        expected.append(_own_expected(task, probe, released, name))
        responses.append(_response(probe, name))
    return Answered(rid, task, part, responses, expected)


def _released(item: Item) -> tuple[str, list[str]]:
    return item.task, [item.letter] if item.part != "forward" else [p.expected for p in item.probes]


def _entries(folder: Path) -> Iterable[tuple[Path, str, int, Any]]:
    """(file, part, index, entry) of every entry of every file of a prediction folder."""
    for path in prediction_files(folder):
        data = load_json(path, unique_keys=True)
        if not isinstance(data, dict) or not all(isinstance(data.get(p), list) for p in PARTS):
            raise RecordError(
                "expected an object with the lists 'backward', 'realtime' and 'forward'", file=path
            )
        for part in PARTS:
            for k, entry in enumerate(data[part]):
                yield path, part, k, entry


def read_predictions(
    folder: Path, items: dict[Any, Item], strict: bool = False
) -> tuple[list[Answered], dict[str, list]]:
    """Every entry of a prediction folder, read (see the module docstring), and what the release
    does not agree with: ``reused_ids`` (ids given more than once), ``not_in_release`` and
    ``own_ground_truth`` (ids scored against a ground truth other than the release's). By default
    each entry is scored as the official scorer scores it (:func:`own_answers`); ``strict``
    refuses all three and checks every entry against its release item (:func:`parse_answers`)."""
    answers: list[Answered] = []
    where: dict[Any, str] = {}
    notes: dict[str, list] = {"reused_ids": [], "not_in_release": [], "own_ground_truth": []}
    for path, part, k, entry in _entries(folder):
        at = f"{part}[{k}]"
        try:
            if not isinstance(entry, dict):
                raise RecordError(f"expected an object, got {type(entry).__name__}")
            rid = item_id(entry)
            at = f"{part}[{k}] (id {rid!r})"
            item = items.get(rid)
            if strict and item is None:
                raise RecordError(f"id {rid!r} is not an item of the release file")
            if rid in where:
                if strict:
                    raise RecordError(f"id {rid!r} is given twice (first: {where[rid]})")
                if rid not in notes["reused_ids"]:
                    notes["reused_ids"].append(rid)
            if strict:
                answers.append(
                    Answered(rid, item.task, part, parse_answers(entry, item, part), _released(item)[1])
                )
            else:
                answers.append(own_answers(entry, item, part))
        except RecordError as err:
            raise err.located(file=path, record=at) from None
        where.setdefault(rid, f"{path.name} {at}")
        got = answers[-1]
        if item is None:
            notes["not_in_release"].append(rid)
        elif (got.task, got.expected) != _released(item) and rid not in notes["own_ground_truth"]:
            notes["own_ground_truth"].append(rid)
    return answers, notes


def _warn(pred: Path, notes: dict[str, list]) -> None:
    """stderr lines naming the ids the release does not agree with (scored as the official scorer does)."""
    says = {
        "reused_ids": "ids given more than once, each entry scored",
        "not_in_release": "ids not in the release, scored",
        "own_ground_truth": "ids scored against the file's own ground truth, not the release's",
    }
    for key, ids in notes.items():
        if ids:
            shown = ", ".join(map(str, ids[:20])) + (", ..." if len(ids) > 20 else "")
            print(
                f"eval.score: ovo: {pred}: {len(ids)} {says[key]}, as the official scorer scores them "
                f"(--strict refuses them): {shown}",
                file=sys.stderr,
            )


def score_ovo(gt: Path, pred: Path, options: argparse.Namespace | None = None) -> tuple[dict, list[dict]]:
    """The official figures of a prediction folder against the release file, and one row per
    scored question or probe."""
    release = read_release(gt)
    items = {item.id: item for item in release}
    answers, notes = read_predictions(pred, items, strict=bool(getattr(options, "strict", False)))
    scores: dict[str, list[int]] = {task: [] for task in TASKS}
    rows: list[dict] = []
    for a in answers:
        for k, (response, want) in enumerate(zip(a.responses, a.expected, strict=True)):
            score = probe_score(a.task, response, want)
            scores[a.task].append(score)
            probe = k if a.part == "forward" else None
            rows.append({"id": a.id, "task": a.task, "part": a.part, "probe": probe, "response": response,
                         "expected": want, "score": score})  # fmt: skip
    answered = {a.id for a in answers}
    missing = Counter(item.task for item in release if item.id not in answered)
    metrics: dict[str, Any] = figures(scores)
    metrics["scored"] = {task: len(v) for task, v in scores.items()}
    metrics["missing"] = {task: missing[task] for task in TASKS if missing[task]}
    metrics["n_missing"] = sum(missing.values())
    metrics["n_items"] = len(release)
    metrics.update({key: ids for key, ids in notes.items() if ids})
    _warn(pred, notes)
    _report_missing(pred, metrics, len(release))
    return metrics, rows


def _report_missing(pred: Path, metrics: dict, n_release: int) -> None:
    if not metrics["n_missing"]:
        return
    by_task = ", ".join(f"{t} {n}" for t, n in metrics["missing"].items())
    print(
        f"eval.score: ovo: {metrics['n_missing']} of {n_release} release items have no prediction "
        f"in {pred} ({by_task}); left out of their task's mean, as the official scorer leaves them",
        file=sys.stderr,
    )
    empty = [p for p in PARTS if metrics[p] is None]
    if empty:
        print(
            f"eval.score: ovo: nothing scored in {', '.join(empty)}: no figure there, no total",
            file=sys.stderr,
        )


# ----------------------------------------------------------------------------------------------
# Writing the official prediction file from stream records and the project's predictions


def probe_answers(
    stream: Stream, replies: Iterable, steps_per_second: float = 1.0, *, official_cut: bool = False
) -> tuple[list[str | None], int]:
    """The reply text answering each target of ``stream`` (None: no answer), and how many replies
    answered nothing. A target's answer is the first reply at or after the step it lands on and
    before the next later-landing target's step; targets on one step take that span's replies in
    order (the targets' own order). A target lands on the first step at or after its time, or with
    ``official_cut`` on the last step the official cut for its time holds
    (:func:`data_builders.sources.ovo.cut_step`: where ``protocol_mode=official`` asks it)."""
    times = step_times(stream, steps_per_second)
    if official_cut:
        steps = [cut_step(stream, t.time, steps_per_second) for t in stream.targets]
    else:
        steps = [target_step(stream, t, steps_per_second) for t in stream.targets]
    landing = [times[k] for k in steps]
    order = sorted(range(len(landing)), key=lambda i: (landing[i], i))
    starts = sorted(set(landing))
    pending = sorted(replies, key=lambda r: r.time)
    answers: list[str | None] = [None] * len(landing)
    used = 0
    for n, start in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else float("inf")
        span = [r for r in pending if start - TIME_EPS <= r.time < end - TIME_EPS]
        group = [i for i in order if landing[i] == start]
        for i, reply in zip(group, span, strict=False):
            answers[i] = reply.text
            used += 1
    return answers, len(pending) - used


def streaming_answers(
    stream: Stream, replies: Iterable, steps_per_second: float = 1.0
) -> tuple[list[str | None], int]:
    """``protocol_mode=streaming``: the answer to each target of ``stream`` from what the model said
    on its own (docs/protocols.md): a multiple-choice question as :func:`probe_answers`; a REC probe
    the last reply at or before the probe's step (the last count said), none a null response; a CRR
    probe ``Yes`` when the model has replied since the question was asked, else ``No``; an SSR
    probe ``Yes`` when it replied after the stream's previous probe step and by this one (it said
    the step is under way), else ``No``. Returns the answers and how many replies answered nothing."""
    task = _meta(stream, "benchmark_task")
    if TASK_PART.get(task) != "forward":
        return probe_answers(stream, replies, steps_per_second)
    times = step_times(stream, steps_per_second)
    landing = [times[target_step(stream, t, steps_per_second)] for t in stream.targets]
    asked = stream.instruction_time if stream.instruction_time is not None else stream.clip_start
    said = sorted((r for r in replies if r.time >= asked - TIME_EPS), key=lambda r: r.time)
    answers: list[str | None] = []
    used: set[int] = set()
    for at in landing:
        by = [i for i, r in enumerate(said) if r.time <= at + TIME_EPS]
        if task == "REC":
            answers.append(said[by[-1]].text if by else None)
            used.update(by[-1:])
        elif task == "CRR":
            answers.append("Yes" if by else "No")
            used.update(by)
        else:
            before = max((t for t in landing if t < at - TIME_EPS), default=-float("inf"))
            now = [i for i in by if said[i].time > before + TIME_EPS]
            answers.append("Yes" if now else "No")
            used.update(now)
    return answers, len(said) - len(used)


def official_answers(
    stream: Stream, replies: Iterable, steps_per_second: float = 1.0
) -> tuple[list[str | None], int]:
    """``protocol_mode=official``: each target's answer is the reply at the last step of its
    official cut (:func:`probe_answers` with ``official_cut``), where :class:`OvoRunner` asks it."""
    return probe_answers(stream, replies, steps_per_second, official_cut=True)


#: How each ``protocol_mode`` turns a record's replies into its answers.
ANSWER_RULES = Registry(
    "OVO answer rule",
    {
        "official": "benchmarks.protocols.ovo:official_answers",
        "streaming": "benchmarks.protocols.ovo:streaming_answers",
    },
)


def _meta(stream: Stream, key: str) -> Any:
    if stream.meta.get(key) is None:
        raise RecordError(f"meta has no '{key}' (not a record built by source=ovo?)", record=stream.id)
    return stream.meta[key]


def write_predictions(
    streams: Iterable[Stream],
    predictions: Iterable[Prediction],
    folder: str | Path,
    *,
    steps_per_second: float = 1.0,
    file_name: str = PREDICTION_FILE,
    mode: str = "official",
) -> dict[str, Any]:
    """Write ``folder/file_name`` in the official prediction format from ``source=ovo`` stream
    records and the model's predictions on them (see the module docstring); returns what was
    written: the path, the items, the records without a prediction (left out, so the scorer counts
    them missing), the questions left unanswered (null responses) and the replies that answered
    nothing, and the SSR items predicted on some of their steps only (left out whole: the
    official ``test_info`` cannot be written in part; logged). ``mode`` picks how replies become
    answers (:data:`ANSWER_RULES`). A prediction for no record and a record of another task, or not
    built by ``source=ovo``, are errors."""
    streams = list(streams)
    replies = _replies_by_id(streams, predictions)
    parts: dict[str, list[dict]] = {part: [] for part in PARTS}
    forward: dict[Any, dict] = {}
    counts = Counter()
    for s in streams:
        task, oid, part = _ovo_keys(s)
        done = s.id in replies
        counts["records"] += 1
        counts["missing_records"] += not done
        answers, unused = ANSWER_RULES[mode](s, replies.get(s.id, []), steps_per_second)
        counts["unanswered"] += sum(a is None for a in answers) if done else 0
        counts["unused_replies"] += unused
        if part != "forward":
            if len(s.targets) != 1:
                raise RecordError(f"a question has one target, this record {len(s.targets)}", record=s.id)
            if done:
                item = {
                    "id": oid,
                    "video": _meta(s, "video_id"),
                    "task": task,
                    "question": _meta(s, "question"),
                }
                parts[part].append({**item, "response": answers[0], "ground_truth": s.targets[0].label})
            continue
        _gather_probes(forward, s, task, oid, done, answers)
    partial = _forward_items(forward, parts["forward"])
    path = Path(folder) / file_name
    with atomic_writer(path) as fh:
        json.dump(parts, fh, ensure_ascii=False, indent=1)
        fh.write("\n")
    counts["incomplete_items"] = len(partial)
    _log_gaps(path, counts, partial)
    return {"path": str(path), "items": sum(len(v) for v in parts.values()), **counts}


def _replies_by_id(streams: list[Stream], predictions: Iterable[Prediction]) -> dict[str, list]:
    """Each prediction's replies by record id; a prediction for no record given is an error."""
    ids = {s.id for s in streams}
    replies: dict[str, list] = {}
    for p in predictions:
        if p.id not in ids:
            raise RecordError("a prediction for an id that is no record given", record=p.id)
        replies[p.id] = p.replies
    return replies


def _ovo_keys(s: Stream) -> tuple[str, Any, str]:
    """An OVO-Bench record's task, item id and part, checked to agree."""
    if s.task != "ovo":
        raise RecordError(f"task {s.task!r}: not an OVO-Bench record", record=s.id)
    task, oid, part = _meta(s, "benchmark_task"), _meta(s, "ovo_id"), _meta(s, "part")
    if TASK_PART.get(task) != part:
        raise RecordError(f"meta: task {task!r} is not a {part!r} task", record=s.id)
    return task, oid, part


def _gather_probes(
    forward: dict[Any, dict], s: Stream, task: str, oid: Any, done: bool, answers: list
) -> None:
    """Add a forward record's probes, answered, to its item's entry in ``forward`` (item id -> the
    item, its probe count, probes by index, the record ids predicted and left)."""
    probes = _meta(s, "probes")
    if len(probes) != len(s.targets):
        raise RecordError(f"meta lists {len(probes)} probes for {len(s.targets)} targets", record=s.id)
    entry = forward.setdefault(
        oid,
        {
            "item": {"id": oid, "video": _meta(s, "video_id"), "task": task},
            "n": _meta(s, "n_probes"),
            "probes": {},
            "done": [],
            "left": [],
        },
    )
    (entry["done"] if done else entry["left"]).append(s.id)
    for probe, answer in zip(probes, answers, strict=True):
        fields = {k: v for k, v in probe.items() if k != "index"}
        entry["probes"][probe["index"]] = {**fields, "response": answer}


def _forward_items(forward: dict[Any, dict], out: list[dict]) -> list[str]:
    """Append each forward item predicted on all its records to ``out``, its probes whole and in
    order; return the items predicted on some records only (left out), described."""
    partial = []
    for oid, entry in forward.items():
        if entry["done"] and entry["left"]:
            partial.append(f"{oid!r} (no prediction for {', '.join(entry['left'])})")
        if not entry["done"] or entry["left"]:
            continue
        if sorted(entry["probes"]) != list(range(entry["n"])):
            raise RecordError(
                f"item {oid!r}: the records hold probes {sorted(entry['probes'])} of {entry['n']}",
                record=entry["done"][0],
            )
        out.append({**entry["item"], "test_info": [entry["probes"][k] for k in range(entry["n"])]})
    return partial


def _log_gaps(path: Path, counts: Counter, partial: list[str]) -> None:
    """Warn of the records with no prediction, the questions with no answer, the SSR items left out."""
    if counts["missing_records"] or counts["unanswered"]:
        log.warning(
            "%s: %d of %d OVO-Bench records have no prediction (left out), %d questions no answer (null)",
            path,
            counts["missing_records"],
            counts["records"],
            counts["unanswered"],
        )
    if partial:
        log.warning(
            "%s: %d SSR items predicted on some of their steps only, left out whole (their test_info "
            "cannot be written whole): %s",
            path,
            len(partial),
            "; ".join(partial[:5]),
        )


def write_release(path: str | Path, streams: Iterable[Stream]) -> int:
    """Write the release file (``ovo_bench_new.json``'s list) of the items the streams were built
    from (``meta["release"]``; an SSR item's step streams share one), in first-seen order; returns
    the items written."""
    items: dict[Any, dict] = {}
    for s in streams:
        raw = _meta(s, "release")
        items.setdefault(_meta(s, "ovo_id"), raw)
    with atomic_writer(path) as fh:
        json.dump(list(items.values()), fh, ensure_ascii=False, indent=1)
        fh.write("\n")
    return len(items)


def probe_plan(streams: list[Stream], steps_per_second: float) -> list[tuple[Stream, list]]:
    """``protocol_mode=official``: the causal passes that answer every question and probe of the
    streams, one pass per video: the longest stream of the video (all of them start at 0, without an
    instruction in the pass), with one probe per target of every stream of the video, at the last
    step of the official cut for the target's time (:func:`data_builders.sources.ovo.cut_step`:
    the frames before ``ceil(time)``), asking the stream's official prompt; a probe's key is
    ``(stream id, target index)``."""
    from engine.probes import Probe

    by_video: dict[tuple, list[Stream]] = {}
    for s in streams:
        by_video.setdefault((s.video, s.clip_start, s.video_offset), []).append(s)
    plan = []
    for members in by_video.values():
        longest = max(members, key=lambda s: (s.clip_end, s.id))
        probes = [
            Probe(cut_step(s, t.time, steps_per_second), s.instruction, (s.id, j))
            for s in members
            for j, t in enumerate(s.targets)
        ]
        plan.append((longest, probes))
    return plan


class OvoRunner(PublicRunner):
    """``eval.run benchmark=ovo``. ``streaming``: each record streamed as built (its official prompt
    given at its ask time), answers by :func:`streaming_answers`. ``official``: every question and
    probe answered from the video up to its time with the official prompt, the model made to answer
    (:func:`probe_plan`: one causal pass per video, the cache branched at each probe,
    ``engine.probes``); a record's answers are its replies at its targets' steps."""

    def shard_key(self, stream, bench):
        """``official``: the video (the key of :func:`probe_plan`), so that one rank makes each
        video's single pass; ``streaming``: the record id."""
        if bench.protocol_mode != "official":
            return stream.id
        return json.dumps([stream.video, stream.clip_start, stream.video_offset])

    def stream_rows(self, model, renderer, streams, path, engine_cfg, bench, **options):
        if bench.protocol_mode != "official":
            yield from super().stream_rows(model, renderer, streams, path, engine_cfg, bench, **options)
            return
        import torch

        from engine.probes import answer_probes

        no_frame_window(engine_cfg, bench)
        skip = options.get("skip", frozenset())
        todo = [s for s in streams if s.id not in skip]
        for longest, probes in probe_plan(todo, renderer.steps_per_second):
            frames = probe_frames(longest, path, renderer, options)
            with torch.inference_mode():
                answers = answer_probes(
                    model,
                    renderer,
                    longest,
                    frames,
                    probes,
                    max_new_tokens=engine_cfg.max_new_tokens,
                    full_logits=False,
                    cfg=engine_cfg,
                )
            times = step_times(longest, renderer.steps_per_second)
            rows: dict[str, dict] = {}
            for a in answers:
                sid, _ = a.probe.key
                row = rows.setdefault(sid, {"id": sid, "replies": [], "p_response": [], "fired": []})
                row["replies"].append({"time": times[a.probe.step], "text": a.text, "category": None})
            yield from rows.values()

    def write_files(self, streams, predictions, folder, bench, rows):
        gt, pred = folder / "ovo_bench_new.json", folder / bench.model_key
        write_release(gt, streams)
        pred.mkdir(parents=True, exist_ok=True)
        write_predictions(
            streams, predictions, pred, steps_per_second=bench.steps_per_second, mode=bench.protocol_mode
        )
        return gt, pred


PROTOCOL = Protocol(
    "ovo",
    runner=OvoRunner,
    official=OfficialFormat(
        score_ovo, summary="OVO-Bench (offline scorer): per-task accuracy, part means, total"
    ),
    scoring_modes={
        "online_emgarde": OfficialFormat(
            score_ovo_online,
            summary="Em-Garde's online F1 of REC, SSR and CRR (its result file)",
            definition=OVO_DEFINITION,
        )
    },
)
