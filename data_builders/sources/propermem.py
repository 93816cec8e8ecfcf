"""ProPerMem-style clips -> ``propermem`` streams: a clip, a long personal history, one trigger window.

``python -m data_builders build source=propermem annotations=/data/propermem/clips.jsonl videos=/data/propermem/videos out=/data/built/propermem``

The benchmark's files are not public; this is our format, from the paper. One JSON object per clip
(JSON Lines or a JSON list)::

    {"id": "pm_0001", "video": "pm_0001.mp4", "clip_start": 0.0, "clip_end": 120.0,
     "instruction": "...",                                 # optional (default: the option)
     "history": [{"id": "m1", "time": -86400.0, "text": "..."}, ...],
     "trigger": {"window": [30.0, 42.0], "response": "...", "evidence": ["m1"]}}   # or null

Times are seconds on the clip's video timeline; history times are usually negative (before the
clip; a year of history reaches about -3.2e7 s) and must not lie after the clip. ``evidence`` lists
the history entries (the target memory) that justify the reminder. A positive clip becomes one
stream whose single target is at the window start (the first moment the reminder is justified;
the window is defined by the matter's first appearance) with ``window = [ts, te]`` and content =
``response``. With ``make_negatives`` every positive clip also yields ``<id>-neg``: the same clip
and history with the evidence entries removed and no target (silence is right there). A clip whose
``trigger`` is null is a given negative. No probe is needed: the clip bounds are in the record.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from data_builders.records import HistoryEntry, RecordError, Stream, Target
from data_builders.toolkit import (
    BuildInputs,
    ConversionError,
    Pending,
    SourceSpec,
    Tally,
    check_span,
    each_record,
    event_span,
    load_json,
    require,
    seconds,
)


@dataclass
class ProPerMemSourceConfig:
    """Keys of ``source=propermem``."""

    make_negatives: bool = True
    """Also emit each positive clip with its target memory removed, as a negative."""
    instruction: str = (
        "You know my history. Remind me once, at the right moment, when something I "
        "should know matters now; otherwise stay silent."
    )
    """Instruction for clips that have none."""


def build_propermem(
    inputs: BuildInputs, options: ProPerMemSourceConfig
) -> Iterator[Pending | ConversionError]:
    """A positive (and a negative) stream per clip (see the module docstring)."""
    path = inputs.annotations
    data = load_json(path)
    if not isinstance(data, list):
        data = [data]

    def parse(rid: str, rec: dict) -> Iterator[Pending]:
        video = str(require(rec, "video"))
        start, end = (
            seconds(require(rec, "clip_start"), "clip_start"),
            seconds(require(rec, "clip_end"), "clip_end"),
        )
        check_span(start, end, "clip_start..clip_end")
        history, ids = _history(rec, end)
        trigger = rec.get("trigger")
        tally = Tally()
        base = Stream(
            id=f"propermem-{rid}",
            source="propermem",
            task="propermem",
            video=video,
            clip_start=start,
            clip_end=end,
            instruction=str(rec.get("instruction") or options.instruction),
            instruction_time=start,
            history=history,
            meta={"video_id": f"propermem/{video}"},
        )
        streams = [base] if trigger is None else _triggered(base, trigger, ids, options, tally)
        yield Pending(str(path), rid, video, lambda info: streams, needs_info=False, tally=tally)

    yield from each_record(
        (
            (str(r.get("id", f"item {k}")) if isinstance(r, dict) else f"item {k}", r)
            for k, r in enumerate(data)
        ),
        path,
        parse,
    )


def _history(rec: dict, end: float) -> tuple[list[HistoryEntry], list[str]]:
    """A clip's history entries (none after the clip's ``end``) and their ids."""
    history, ids = [], []
    for i, h in enumerate(rec.get("history") or []):
        t = seconds(require(h, "time"), f"history[{i}].time")
        if t > end:
            raise RecordError(f"history[{i}]: at {t}s, after the clip ends ({end}s)")
        history.append(HistoryEntry(time=t, text=str(require(h, "text"))))
        ids.append(str(h.get("id", i)))
    return history, ids


def _triggered(
    base: Stream, trigger: dict, ids: list[str], options: ProPerMemSourceConfig, tally: Tally
) -> list[Stream]:
    """The positive stream of a clip with a trigger (its target at the window start), and with
    ``make_negatives`` the negative without the evidence entries."""
    window = require(trigger, "window")
    if not isinstance(window, list) or len(window) != 2:
        raise RecordError(f"field 'trigger.window': expected [start, end], got {window!r}")
    span = event_span(
        seconds(window[0], "trigger.window"),
        seconds(window[1], "trigger.window"),
        "trigger.window",
        tally,
    )
    if span is None:
        raise RecordError(f"field 'trigger.window': ends before it starts ({window[0]} > {window[1]})")
    ts, te = span
    evidence = [str(e) for e in require(trigger, "evidence")]
    unknown = sorted(set(evidence) - set(ids))
    if unknown:
        raise RecordError(f"trigger.evidence names unknown history ids {unknown}")
    target = Target(time=ts, window=(ts, te), content=str(require(trigger, "response")))
    streams = [Stream(**{**base.__dict__, "targets": [target], "meta": {**base.meta, "evidence": evidence}})]
    if options.make_negatives:
        kept = [h for h, i in zip(base.history, ids, strict=True) if i not in set(evidence)]
        streams.append(
            Stream(
                **{
                    **base.__dict__,
                    "id": f"{base.id}-neg",
                    "history": kept,
                    "meta": {**base.meta, "removed_memory": evidence},
                }
            )
        )
    return streams


SPEC = SourceSpec("propermem", build=build_propermem, config=ProPerMemSourceConfig)
