"""CaptainCook4D error annotations -> ``event_intervention`` streams (error recovery, next step).

``python -m data_builders build source=captaincook4d annotations=/data/captaincook4d/annotation_json/error_annotations.json videos=/data/captaincook4d/videos out=/data/built/captaincook4d``

Input: ``error_annotations.json``, a list of recordings ``{"recording_id", "activity_id",
"is_error", "step_annotations": [{"step_id", "description", "start_time", "end_time",
"errors"?: [{"tag", "description"}], "modified_description"?}]}``; times in seconds from the
recording start, ``-1`` = the step was not performed (a Missing Step).

One stream per recording (the whole video, duration probed), performed steps in time order:

- **error recovery** (category ``error_recovery``): an erroneous performed step gets a target at
  its start, window = the step, content = its error descriptions; a missing step gets a target at
  the start of the next performed step (when the skip becomes visible), content = what was skipped.
- **next-step guidance** (category ``next_step_guidance``): at the end of every performed step but
  the last, content = the next performed step's description.

Descriptions lose their ``Verb-`` prefix ("Pour-Pour 1 egg ..." -> "Pour 1 egg ..."). Recordings
without errors still get guidance targets; ``mode=errors`` keeps only error recovery.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from data_builders.records import RecordError, Stream, Target
from data_builders.registry import (
    BuildInputs,
    ConversionError,
    Pending,
    check_span,
    clip_end_from,
    each_record,
    load_json,
    register_source,
    require,
    seconds,
)
from data_builders.video import VideoInfo


@dataclass
class CaptainCook4dOptions:
    """Keys of ``source=captaincook4d``."""

    video_pattern: str = "{recording_id}_360p.mp4"
    """Video path under ``videos``."""
    mode: str = "both"
    """``both`` (error recovery + next-step guidance) or ``errors``."""
    instruction: str = (
        "I am following a recipe. Guide me to the next step and tell me right away if I make a mistake."
    )
    """The user's instruction at t=0."""


def step_text(description: str) -> str:
    """A step description without its ``Verb-`` prefix.

    >>> step_text("Coat -Coat a 6-oz. ramekin cup with cooking spray")
    'Coat a 6-oz. ramekin cup with cooking spray'
    """
    head, sep, rest = description.partition("-")
    return rest.strip() if sep and " " not in head.strip() else description.strip()


@register_source("captaincook4d", CaptainCook4dOptions)
def build_captaincook4d(
    inputs: BuildInputs, options: CaptainCook4dOptions
) -> Iterator[Pending | ConversionError]:
    """One intervention stream per recording (see the module docstring)."""
    if options.mode not in ("both", "errors"):
        raise RecordError(f"mode must be 'both' or 'errors', got {options.mode!r}")
    path = inputs.annotations
    data = load_json(path)
    if isinstance(data, dict):
        data = list(data.values())

    def parse(rid: str, rec: dict) -> Iterator[Pending]:
        steps = require(rec, "step_annotations")
        performed, missing = [], []
        for i, step in enumerate(steps):
            start = seconds(require(step, "start_time"), f"step_annotations[{i}].start_time")
            end = seconds(require(step, "end_time"), f"step_annotations[{i}].end_time")
            text = step_text(str(require(step, "description")))
            errs = step.get("errors") or []
            if start < 0 or end < 0:
                if start >= 0 or end >= 0:
                    raise RecordError(f"step_annotations[{i}]: only one of start/end is -1")
                missing.append((i, text))
                continue
            check_span(start, end, f"step_annotations[{i}]")
            detail = "; ".join(str(e.get("description") or e.get("tag")) for e in errs if isinstance(e, dict))
            performed.append((start, end, text, detail, i))
        performed.sort()
        targets = []
        for i, text in missing:
            after = [p for p in performed if p[4] > i]
            if after:
                targets.append(
                    Target(
                        time=after[0][0], content=f"You skipped a step: {text}.", category="error_recovery"
                    )
                )
        for start, end, text, detail, _ in performed:
            if detail:
                targets.append(
                    Target(
                        time=start,
                        window=(start, end),
                        content=f"Careful with '{text}': {detail}.",
                        category="error_recovery",
                    )
                )
        if options.mode == "both":
            for cur, nxt in zip(performed, performed[1:], strict=False):
                targets.append(Target(time=cur[1], content=f"Next: {nxt[2]}.", category="next_step_guidance"))
        targets.sort(key=lambda t: (t.time, t.category or ""))
        video = options.video_pattern.format(recording_id=rid)

        def make(info: VideoInfo | None) -> list[Stream]:
            return [
                Stream(
                    id=f"captaincook4d-{rid}",
                    source="captaincook4d",
                    task="event_intervention",
                    video=video,
                    clip_start=0.0,
                    clip_end=clip_end_from(info, None, rid),
                    instruction=options.instruction,
                    instruction_time=0.0,
                    targets=targets,
                    meta={
                        "video_id": f"captaincook4d/{rid}",
                        "activity_id": rec.get("activity_id"),
                        "is_error": rec.get("is_error"),
                    },
                )
            ]

        yield Pending(str(path), rid, video, make)

    yield from each_record(
        (
            (str(r.get("recording_id", f"item {k}")) if isinstance(r, dict) else f"item {k}", r)
            for k, r in enumerate(data)
        ),
        path,
        parse,
    )
