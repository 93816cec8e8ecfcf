"""HoloAssist annotations -> ``event_intervention`` streams: the instructor's proactive help only.

``python -m data_builders build source=holoassist annotations=/data/holoassist/data-annotation-trainval-v1_1.json videos=/data/holoassist/video_pitch_shifted out=/data/built/holoassist``

Input: ``data-annotation-trainval-v1_1.json``, a list of videos ``{"batch", "videoMetadata":
{..., "duration": {"raw": "HH:MM:SS.ss", "seconds"}}, "events": [{"id", "label", "start", "end",
"type", "attributes"}], "taskId", "taskType", "video_name"}``, times in seconds. Videos are where the
release unpacks them, ``<root>/<video_name>/Export_py/Video_pitchshift.mp4`` (names may hold
spaces, ``&`` and ``%20``). The clip is the whole video; its duration is the annotation's
``videoMetadata.duration`` (``raw``, else ``seconds``), so ``check_videos=false`` opens no video.

Targets come from ``Conversation`` events, whose ``Conversation Purpose`` is
``<role>_<purpose>`` in lower case (e.g. ``instructor-start-conversation_follow-up instruction``):

- only the roles in ``roles`` (default: ``instructor-start-conversation``) make targets: the
  instructor stepped in unasked. Replies to the student's questions and everything the student
  starts are reactive, counted as ``conversations_not_proactive``.
- purposes in ``correction_purposes`` ("correct the wrong action") -> ``error_recovery``; in
  ``guidance_purposes`` ("follow-up instruction", "describing high-level instruction") ->
  ``next_step_guidance``; all others (opening / closing remarks, adjusting to capture better
  quality video, confirming the previous action, other) make no target
  (``conversations_other_purpose``).
- with ``corrections_from_actions``, a conversation that a wrong ``Fine grained action`` names as
  its correction (``Incorrect Action Corrected by`` = the conversation's id, ``Action
  Correctness`` "Wrong Action, corrected by instructor ...", or the conversation's ``sequence``
  naming that action) is ``error_recovery`` whatever its purpose label, with the window opened at
  the mistake's start (the reply counts from the moment the error is visible).
- a transcription whose ``Transcription Confidence`` is in ``drop_confidence`` or whose text holds
  one of ``unintelligible_markers`` is no reference reply: left out and counted
  (``dropped_low_confidence``, ``dropped_unintelligible``); an empty one likewise
  (``dropped_empty_transcription``).

Target = at the conversation's start, window = the conversation (from the mistake for linked
corrections), content = the transcription. A video where the instructor never stepped in is a
negative. Format references: the official HoloAssist annotation README, a real record printed in
``adibMosharrof/ProAssist`` ``notebooks/dialog_generation_playground.ipynb`` and the loaders in
``yukw777/tglg`` ``src/real_time_vlm_benchmark/datasets/holo_assist.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from urllib.parse import unquote

from data_builders.records import RecordError, Stream, Target
from data_builders.toolkit import (
    BuildInputs,
    ConversionError,
    Pending,
    SourceSpec,
    Tally,
    clip_end_from,
    clock_seconds,
    each_record,
    event_span,
    load_json,
    require,
    seconds,
)
from data_builders.video import VideoInfo


@dataclass
class HoloAssistSourceConfig:
    """Keys of ``source=holoassist``."""

    video_pattern: str = "{video_name}/Export_py/Video_pitchshift.mp4"
    """Video path under ``videos`` (the release's layout; names may hold spaces and &)."""
    roles: list[str] = field(default_factory=lambda: ["instructor-start-conversation"])
    """Conversation roles whose purposes can make targets (proactive ones: the instructor stepping in unasked)."""
    correction_purposes: list[str] = field(default_factory=lambda: ["correct the wrong action"])
    """Purposes that become ``error_recovery`` targets."""
    guidance_purposes: list[str] = field(
        default_factory=lambda: ["follow-up instruction", "describing high-level instruction"]
    )
    """Purposes that become ``next_step_guidance`` targets (others, e.g. opening/closing remarks, adjusting
    video, other: no target)."""
    corrections_from_actions: bool = True
    """A conversation a wrong fine-grained action names as its correction (``Incorrect Action Corrected by``)
    is error recovery."""
    drop_confidence: list[str] = field(default_factory=lambda: ["low-confidence-transcription"])
    """``Transcription Confidence`` values whose transcription is no reference reply (left out, counted)."""
    unintelligible_markers: list[str] = field(default_factory=lambda: ["unintelligible", "inaudible"])
    """A transcription holding one of these (any case) is no reference reply (left out, counted)."""
    instruction: str = (
        "I am doing a task. Correct me when I do something wrong and tell me what to do next when I need it."
    )
    """The user's instruction at t=0."""


def _norm(text: object) -> str:
    return " ".join(str(text or "").lower().split())


def stated_duration(rec: dict) -> float | None:
    """``videoMetadata.duration``: ``raw`` (hundredths) if it parses, else ``seconds``; None if absent.

    >>> stated_duration({"videoMetadata": {"duration": {"raw": "00:02:10.62", "seconds": 131}}})
    130.62
    """
    duration = (
        (rec.get("videoMetadata") or {}).get("duration")
        if isinstance(rec.get("videoMetadata"), dict)
        else None
    )
    if not isinstance(duration, dict):
        return None
    for key, read in (("raw", clock_seconds), ("seconds", seconds)):
        if duration.get(key) is not None:
            try:
                value = read(duration[key], f"videoMetadata.duration.{key}")
            except RecordError:
                continue
            if value > 0:
                return value
    return None


def _corrections(events: list, options: HoloAssistSourceConfig) -> dict[str, float]:
    """Conversation id -> start (s) of the wrong action it corrects, from the fine-grained actions."""
    out: dict[str, float] = {}
    if not options.corrections_from_actions:
        return out
    actions = {}
    for ev in events:
        if not isinstance(ev, dict) or ev.get("label") != "Fine grained action":
            continue
        attrs = ev.get("attributes") or {}
        correctness = _norm(attrs.get("Action Correctness"))
        if not (correctness.startswith("wrong action") and "instructor" in correctness):
            continue
        try:
            start = seconds(ev.get("start"), "start")
        except RecordError:
            continue
        actions[str(ev.get("id"))] = start
        by = _norm(attrs.get("Incorrect Action Corrected by"))
        if by and by != "none":
            out[by] = min(out.get(by, start), start)
    for ev in events:
        if isinstance(ev, dict) and ev.get("label") == "Conversation":
            seq = _norm((ev.get("attributes") or {}).get("sequence"))
            if seq in actions:
                cid = str(ev.get("id"))
                out[cid] = min(out.get(cid, actions[seq]), actions[seq])
    return out


def conversation_targets(events: list, options: HoloAssistSourceConfig, tally: Tally) -> list[Target]:
    """The targets of one video's events (see the module docstring)."""
    if not isinstance(events, list):
        raise RecordError(f"field 'events': expected a list, got {type(events).__name__}")
    roles = {_norm(r) for r in options.roles}
    fixes, guides = (
        {_norm(p) for p in options.correction_purposes},
        {_norm(p) for p in options.guidance_purposes},
    )
    low, markers = (
        {_norm(c) for c in options.drop_confidence},
        [m.lower() for m in options.unintelligible_markers],
    )
    linked = _corrections(events, options)
    targets = []
    for i, ev in enumerate(events):
        if require(ev, "label") != "Conversation":
            continue
        attrs = ev.get("attributes") or {}
        role, _, purpose = _norm(attrs.get("Conversation Purpose")).partition("_")
        if role not in roles:
            tally.count("conversations_not_proactive")
            continue
        mistake = linked.get(str(ev.get("id")))
        if mistake is not None or purpose in fixes:
            category = "error_recovery"
        elif purpose in guides:
            category = "next_step_guidance"
        else:
            tally.count("conversations_other_purpose")
            continue
        text = " ".join(str(attrs.get("Transcription") or "").split())
        if _norm(attrs.get("Transcription Confidence")) in low:
            tally.lose("dropped_low_confidence")
            continue
        if any(m in text.lower() for m in markers):
            tally.lose("dropped_unintelligible")
            continue
        if not text:
            tally.lose("dropped_empty_transcription")
            continue
        span = event_span(
            seconds(require(ev, "start"), f"events[{i}].start"),
            seconds(require(ev, "end"), f"events[{i}].end"),
            f"events[{i}] (id {ev.get('id')})",
            tally,
        )
        if span is None:
            continue
        start, end = span
        window = (min(mistake, start) if mistake is not None else start, end)
        targets.append(Target(time=start, window=window, content=text, category=category))
    targets.sort(key=lambda t: (t.time, t.content))
    return targets


def build_holoassist(
    inputs: BuildInputs, options: HoloAssistSourceConfig
) -> Iterator[Pending | ConversionError]:
    """One intervention stream per video (see the module docstring)."""
    path = inputs.annotations
    data = load_json(path)
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        raise RecordError("expected a list of videos", file=path)

    def parse(rid: str, rec: dict) -> Iterator[Pending]:
        tally = Tally()
        targets = conversation_targets(require(rec, "events"), options, tally)
        name = unquote(rid)
        video = options.video_pattern.format(video_name=name)
        stated = stated_duration(rec)

        def make(info: VideoInfo | None) -> list[Stream]:
            return [
                Stream.whole_video(
                    id=f"holoassist-{rid}",
                    source="holoassist",
                    task="event_intervention",
                    video=video,
                    clip_end=clip_end_from(info, stated, rid),
                    instruction=options.instruction,
                    targets=targets,
                    meta={"video_id": f"holoassist/{name}", "task_type": rec.get("taskType")},
                )
            ]

        yield Pending(str(path), rid, video, make, needs_info=stated is None, lookup=(name, rid), tally=tally)

    def record_id(k: int, r: object) -> str:
        return str(r.get("video_name") or f"item {k}") if isinstance(r, dict) else f"item {k}"

    yield from each_record(((record_id(k, r), r) for k, r in enumerate(data)), path, parse)


SPEC = SourceSpec("holoassist", build=build_holoassist, config=HoloAssistSourceConfig)
