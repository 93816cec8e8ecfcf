"""OVO-Bench's release annotations (``ovo_bench_new.json``) -> ``ovo`` streams, one per question.

``python -m data_builders build source=ovo annotations=/data/OVO-Bench/data/ovo_bench_new.json videos=/data/OVO-Bench/data/src_videos out=/data/built/ovo``

Format, as the official harness reads it (``JoeLeelyf/OVO-Bench``: ``inference.py``,
``utils/OVOBench.py`` ``OVOBenchOffline.eval`` and ``build_prompt``, ``utils/chunk_videos.py``,
the prompts in ``constant.py``): one JSON list of items ``{"id": int, "task", "video", ...}``,
``video`` relative to the source video root (``Ego4D/clips/<uid>.mp4``, ``COIN/<id>.mp4``, ...).
Twelve tasks in three parts:

- backward tracing (EPM, ASI, HLD) and real-time perception (STU, OJR, ATR, ACR, OCR, FPD):
  ``{"realtime": s, "question", "options": [str, ...], "gt": option index, "answer"}``; the
  official harness cuts the video to ``[0, ceil(realtime)]`` (at most the video's length) and
  asks the question, with its options lettered ``A. ...; B. ...;``, after it (that is the cut
  ``chunk_videos.py`` writes for these tasks in its branch for them; as published, its first test
  skips every item that is not a forward one, so only the forward cuts are written);
- forward active responding (REC, SSR, CRR): ``"test_info": [probe, ...]``, each probe
  ``{"realtime": s, ...}`` answered on the video cut to ``[0, ceil(realtime)]``. REC
  ``{"activity", "start_times", "end_times"}``, probe ``{"count"}`` ("How many times did they
  <activity>?"); SSR ``{"tutorial", "all_steps", "start_time", "end_time"}``, probe ``{"step",
  "type"}`` (is the person doing this step now: 1 yes, 0 no); CRR ``{"question", "answer",
  "ask_time", "clue_time"}``, probe ``{"type"}`` (can the question be answered yet: 1 yes, 0 no).

Streams (task ``ovo``, the benchmark's task in ``meta["benchmark_task"]``; all clips start at 0,
the official chunks' start):

- a multiple-choice item -> ``ovo-<id>``: clip ``[0, ceil(realtime)]``, the official prompt as the
  instruction at ``realtime`` and one target there, content and label the letter (``C``);
- a REC or CRR item -> ``ovo-<id>``: one target per probe at its ``realtime`` (content and label
  the count, or ``Yes`` / ``No``), the official prompt as the instruction, given at 0 (REC: the
  count runs from the video's start) or at ``ask_time`` (CRR; the first probe is there), clip
  ``[0, ceil(last probe)]``;
- an SSR item -> ``ovo-<id>-step<k>``, one stream per step (in order of the step's first probe):
  the official prompt names the step, so the probes of one step share one instruction, given at 0.

Probe times are kept as released: unsorted, and two probes of one REC item can share a time.
``meta`` holds what the official prediction file needs back (``benchmarks/protocols/ovo.py``):
``release`` (the release's item as it is, so that ``eval.run`` can write the ground truth of the
items it evaluated in the release's own format), ``ovo_id`` (the release's id), ``part``, ``video_id`` (the release's ``video``), ``question``
(multiple choice) or ``probes`` (each ``{"index": its place in test_info, ...the release's
fields}``, one per target, in target order) and ``n_probes``. A time past the probed video's end
is moved to the end, as the official cut does (counted: ``past_video_end``). An item of an unknown
task, a missing or unparsable time, a ``gt`` outside the options, a probe without its count or
type, or an empty ``test_info`` is an error naming the item (``RecordError``; in a build, that
record's ``errors.jsonl`` line). The prompts are the benchmark's own words, reproduced so that a
model is asked what the official harness asks.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from data_builders.records import TIME_EPS, RecordError, Stream, Target
from data_builders.toolkit import (
    BuildInputs,
    ConversionError,
    Pending,
    SourceSpec,
    Tally,
    each_record,
    load_json,
    require,
    seconds,
)
from data_builders.video import VideoInfo
from metrics.ovo import FORWARD_TASKS, TASK_PART

# The official prompts (``constant.py``), word for word, one line per string (trailing spaces included).
CHOICE_PROMPT = "\n".join(
    (
        "",
        "Question: {}",
        "Options:",
        "{}",
        "",
        "Respond only with the letter corresponding to your chosen option (e.g., A, B, C). ",
        "Do not include any additional text or explanation in your response.",
        "",
    )
)
REC_PROMPT = "\n".join(
    (
        "",
        "You're watching a video in which people may perform a certain type of action repetively. ",
        "The person performing this kind of action are referred to as 'they' in the following statement.",
        "You're task is to count how many times have different people in the video perform this kind of action in total.",
        "One complete motion counts as one. ",
        "Now, answer the following question: {}",
        "Provide your answer as a single number (e.g., 0, 1, 2, 3…) indicating the total count.",
        "Do not include any additional text or explanation in your response.",
        "",
    )
)
SSR_PROMPT = "\n".join(
    (
        "",
        "You're watching a tutorial video which contain a sequential of steps. ",
        "The following is one step from the whole procedures: ",
        "{}",
        "Your task is to determine if the man or woman in the video is currently performing this step.",
        "Answer only with “Yes” or “No”.",
        "Do not include any additional text or explanation in your response.",
        "",
    )
)
CRR_PROMPT = "\n".join(
    (
        "",
        "You're responsible of answering questions based on the video content. ",
        "The following question are relevant to the latest frames, i.e. the end of the video.",
        "{}",
        "Decide whether existing visual content, especially latest frames, i.e. frames that near the end of the video, provide enough information for answering the question.",
        "Answer only with “Yes” or “No”.",
        "Do not include any additional text or explanation in your response.",
        "",
    )
)


@dataclass(frozen=True)
class Probe:
    """One ``test_info`` entry: its place in the list, its time, the expected answer (``"3"``,
    ``"Yes"``, ``"No"``) and the release's own fields."""

    index: int
    time: float
    expected: str
    fields: dict[str, Any]


@dataclass(frozen=True)
class Item:
    """One release item, checked. Multiple choice: ``time``, ``question``, ``options``, ``letter``
    (the right option's); forward: ``probes`` (and ``ask_time`` for CRR)."""

    id: int | str
    task: str
    video: str
    time: float | None = None
    question: str | None = None
    options: tuple[str, ...] = ()
    letter: str | None = None
    probes: tuple[Probe, ...] = ()
    ask_time: float | None = None
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def part(self) -> str:
        return TASK_PART[self.task]


def item_id(raw: Any) -> int | str:
    """A release item's ``id``: an integer (as released) or a non-empty string."""
    value = raw.get("id") if isinstance(raw, dict) else None
    if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, str) and value)):
        raise RecordError(f"field 'id': expected an integer or string id, got {value!r}")
    return value


def _text(raw: dict, key: str) -> str:
    value = require(raw, key)
    if not isinstance(value, str):
        raise RecordError(f"field '{key}': expected a string, got {type(value).__name__} {value!r}")
    return value


def _time(value: Any, name: str) -> float:
    t = seconds(value, name)
    if t < 0:
        raise RecordError(f"field '{name}': a time on the video is 0 s or later, got {t}")
    return t


def _binary(value: Any, name: str) -> str:
    if isinstance(value, bool) or value not in (0, 1):
        raise RecordError(f"field '{name}': expected 0 (no) or 1 (yes), got {value!r}")
    return "Yes" if value == 1 else "No"


def _probe(task: str, k: int, raw: Any) -> Probe:
    name = f"test_info[{k}]"
    if not isinstance(raw, dict):
        raise RecordError(f"field '{name}': expected an object, got {type(raw).__name__}")
    if raw.get("realtime") is None:
        raise RecordError(f"field '{name}.realtime': a probe needs its time")
    time = _time(raw["realtime"], f"{name}.realtime")
    if task == "REC":
        count = require(raw, "count")
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise RecordError(f"field '{name}.count': expected a whole number >= 0, got {count!r}")
        expected = str(count)
    else:
        if task == "SSR":
            _text(raw, "step")
        expected = _binary(raw.get("type"), f"{name}.type")
    fields = {key: value for key, value in raw.items() if key != "response"}
    return Probe(k, time, expected, fields)


def parse_item(raw: Any) -> Item:
    """One release item, checked (see the module docstring); a ``RecordError`` names what is wrong."""
    if not isinstance(raw, dict):
        raise RecordError(f"expected an object, got {type(raw).__name__}")
    rid = item_id(raw)
    task = raw.get("task")
    if task not in TASK_PART:
        raise RecordError(f"field 'task': unknown task {task!r} (OVO-Bench's are {', '.join(TASK_PART)})")
    video = _text(raw, "video")
    if task in FORWARD_TASKS:
        info = require(raw, "test_info")
        if not isinstance(info, list) or not info:
            raise RecordError("field 'test_info': expected a non-empty list of probes")
        probes = tuple(_probe(task, k, p) for k, p in enumerate(info))
        question = _text(raw, "question") if task == "CRR" else None
        if task == "REC":
            _text(raw, "activity")
        ask = _time(require(raw, "ask_time"), "ask_time") if task == "CRR" else None
        return Item(rid, task, video, question=question, probes=probes, ask_time=ask, raw=raw)
    if raw.get("realtime") is None:
        raise RecordError("field 'realtime': the question needs its time")
    options = require(raw, "options")
    if not isinstance(options, list) or not options or not all(isinstance(o, str) for o in options):
        raise RecordError(f"field 'options': expected a non-empty list of strings, got {options!r}")
    gt = require(raw, "gt")
    if isinstance(gt, bool) or not isinstance(gt, int) or not 0 <= gt < len(options):
        raise RecordError(f"field 'gt': expected an option index 0..{len(options) - 1}, got {gt!r}")
    return Item(
        rid,
        task,
        video,
        time=_time(raw["realtime"], "realtime"),
        question=_text(raw, "question"),
        options=tuple(options),
        letter=chr(65 + gt),
        raw=raw,
    )


def read_release(path: str | Path) -> list[Item]:
    """Every item of a release file, checked; the first bad one raises, naming the file and item."""
    path = Path(path)
    data = load_json(path)
    if not isinstance(data, list):
        raise RecordError(f"expected a JSON list of items, got {type(data).__name__}", file=path)
    items, seen = [], {}
    for k, raw in enumerate(data):
        where = f"item {k}" if not isinstance(raw, dict) or "id" not in raw else f"id {raw['id']!r}"
        try:
            item = parse_item(raw)
        except RecordError as err:
            raise err.located(file=path, record=where) from None
        if item.id in seen:
            raise RecordError(f"duplicate id (also item {seen[item.id]})", file=path, record=where)
        seen[item.id] = k
        items.append(item)
    return items


def choice_prompt(question: str, options: tuple[str, ...]) -> str:
    """The official multiple-choice prompt: options lettered ``A. x; B. y;``."""
    lettered = "; ".join(f"{chr(65 + i)}. {o}" for i, o in enumerate(options)) + ";"
    return CHOICE_PROMPT.format(question, lettered)


def forward_prompt(item: Item, step: str | None = None) -> str:
    """The official prompt of a forward item (``step``: an SSR probe's step)."""
    if item.task == "REC":
        return REC_PROMPT.format("How many times did they " + str(item.raw["activity"]) + "?")
    if item.task == "SSR":
        return SSR_PROMPT.format(step)
    return CRR_PROMPT.format(item.question)


def cut_end(time: float) -> float:
    """The end of the official cut for a question or probe at ``time``: ``ceil(time)``, 1 s at least
    (``utils/chunk_videos.py``: ``end_time = math.ceil(realtime)``, then ``subclip(0, end_time)``)."""
    return max(1.0, float(math.ceil(time)))


def cut_step(stream: Stream, time: float, steps_per_second: float = 1.0) -> int:
    """The last step of ``stream`` that the official cut for ``time`` holds: the cut
    ``subclip(0, ceil(time))`` holds the frames at times before ``ceil(time)`` (the written clip
    lasts ``ceil(time)`` seconds and ends before the frame at that time), so at 1 step/s a probe at
    5 s sees steps 0..4 and one at 5.3 s steps 0..5; at most the stream's last step (the cut stops
    at the video's end), at least step 0."""
    n = max(1, math.floor(stream.duration * steps_per_second + TIME_EPS))
    held = math.ceil((cut_end(time) - stream.clip_start) * steps_per_second - TIME_EPS)
    return min(max(held, 1), n) - 1


def stream_id(item: Item, step: int | None = None) -> str:
    return f"ovo-{item.id}" if step is None else f"ovo-{item.id}-step{step}"


def _clip(times: list[float], info: VideoInfo | None, tally: Tally) -> float:
    """The official cut's end, ``ceil`` of the last time (1 s at least), at most the probed video's
    length; each time past that end is counted (``past_video_end``) and will be moved to it."""
    end = cut_end(max(times))
    if info is not None and end > info.duration:
        end = info.duration
        moved = sum(t > end for t in times)
        if moved:
            tally.count("past_video_end", moved)
    return end


def item_streams(item: Item, video: str, info: VideoInfo | None, tally: Tally) -> list[Stream]:
    """The streams of one item (see the module docstring)."""
    base = {
        "benchmark_task": item.task,
        "part": item.part,
        "ovo_id": item.id,
        "video_id": item.video,
        "release": {k: v for k, v in item.raw.items() if k != "response"},
    }
    common = {"source": "ovo", "task": "ovo", "video": video, "clip_start": 0.0}
    if item.part != "forward":
        end = _clip([item.time], info, tally)
        t = min(item.time, end)
        return [
            Stream(
                id=stream_id(item),
                **common,
                clip_end=end,
                instruction=choice_prompt(item.question, item.options),
                instruction_time=t,
                targets=[Target(time=t, content=item.letter, label=item.letter)],
                meta={**base, "question": item.question, "realtime": item.time},
            )
        ]
    end = _clip([p.time for p in item.probes], info, tally)
    if item.task == "SSR":
        steps: dict[str, list[Probe]] = {}
        for p in item.probes:
            steps.setdefault(p.fields["step"], []).append(p)
        groups = [(k, forward_prompt(item, s), 0.0, ps) for k, (s, ps) in enumerate(steps.items())]
    else:
        at = 0.0 if item.ask_time is None else min(item.ask_time, end)
        groups = [(None, forward_prompt(item), at, list(item.probes))]
    out = []
    for k, prompt, at, probes in groups:
        meta = {
            **base,
            "probes": [{"index": p.index, **p.fields} for p in probes],
            "n_probes": len(item.probes),
        }
        if k is not None:
            meta["step"] = probes[0].fields["step"]
        out.append(
            Stream(
                id=stream_id(item, k),
                **common,
                clip_end=end,
                instruction=prompt,
                instruction_time=at,
                targets=[Target(time=min(p.time, end), content=p.expected, label=p.expected) for p in probes],
                meta=meta,
            )
        )
    return out


@dataclass
class OvoSourceConfig:
    """Keys of ``source=ovo``."""

    video_pattern: str = "{video}"
    """Video path under ``videos``; the release's ``video`` (e.g. ``Ego4D/clips/<uid>.mp4``) is relative to its
    source video root."""


def build_ovo(inputs: BuildInputs, options: OvoSourceConfig) -> Iterator[Pending | ConversionError]:
    """One stream per question, per forward item, per SSR step (see the module docstring)."""
    path = inputs.annotations
    data = load_json(path)
    if not isinstance(data, list):
        raise RecordError(f"expected a JSON list of OVO-Bench items, got {type(data).__name__}", file=path)

    def parse(rid: str, raw: Any) -> Iterator[Pending]:
        item = parse_item(raw)
        video = options.video_pattern.format(video=item.video)
        tally = Tally()
        yield Pending(
            str(path),
            rid,
            video,
            lambda info: item_streams(item, video, info, tally),
            needs_info=False,
            tally=tally,
        )

    def record_id(k: int, raw: Any) -> str:
        return f"id {raw['id']}" if isinstance(raw, dict) and raw.get("id") is not None else f"item {k}"

    yield from each_record(((record_id(k, r), r) for k, r in enumerate(data)), path, parse)


SPEC = SourceSpec("ovo", build=build_ovo, config=OvoSourceConfig)
