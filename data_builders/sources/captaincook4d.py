"""CaptainCook4D error annotations -> ``event_intervention`` streams (error recovery, next step).

``python -m data_builders build source=captaincook4d annotations=/data/CaptainCook4D/annotations/annotation_json/error_annotations.json videos=/data/captain_cook_4d/gopro/resolution_360p out=/data/built/captaincook4d``

Input: ``annotation_json/error_annotations.json`` of the ``CaptainCook4D/annotations`` repository
(the only file of the release with error tags; ``step_annotations.json`` lacks them), a list of
recordings ``{"recording_id", "activity_id", "is_error", "step_annotations": [{"description",
"step_id", "start_time", "end_time", "errors"?: [{"tag", "description"}], "modified_description"?}]}``;
times in seconds (floats or ints) from the recording start, ``-1`` for a step not performed.
Videos: ``<recording_id>_360p.mp4`` as the ``CaptainCook4D/downloader`` writes them into
``gopro/resolution_360p/`` (any other layout is found by the driver's video index).

One stream per recording (the whole video). Its duration comes from the repository's
``metadata/video_information.csv`` (column ``duration(sec)``; found next to ``annotation_json/``
or given as ``video_information``), so ``check_videos=false`` opens no video; without it the video
is probed.

**Recipe order.** The release lists steps in the order they were annotated, with most steps that
were not performed appended at the end, so list order says nothing about when a skip shows. The
recipe order (``recipe_order=auto``) comes from the repository's ``task_graphs/`` (a DAG per recipe;
the graph is matched to a recording by its step texts; "B follows A" = B descends from A), else
from a consensus over the file (each step's mean relative position among the performed steps of
the recipe's recordings; "B follows A" = B's position is later). ``list`` uses the list order.

Targets (``mode=both``; ``mode=errors`` keeps only error recovery):

- **skip reminder** (``error_recovery``), one for every step tagged ``Missing Step`` that was not
  performed, wherever it stands in the list: due when the first performed step that follows it in
  the recipe order starts (the moment the skip becomes visible), else at the end of the last
  performed step. Content "You skipped a step: <step>."
- **error recovery** (``error_recovery``): a performed step with errors gets a target at its start,
  window = the step, content = its error descriptions.
- **next-step guidance** (``next_step_guidance``) between consecutive performed steps A, B (by
  start time) at ``min(end of A, start of B)``: "Next: <X>." where X is the first (in recipe order)
  skipped step whose reminder is due at B's start (the recipe's next step, which the person is
  about to skip), else B. So guidance never names a step that a reminder then calls skipped.

Steps that were not performed and carry no ``Missing Step`` tag are optional (e.g. "Top with more
parmesan if desired"): no target, counted as ``optional_steps_not_performed``. Two performed
entries of one step id overlapping by more than half are one step listed twice (kept once,
``merged_duplicate_steps``). Step texts read as instructions, verb included (:func:`step_text`).
"""

from __future__ import annotations

import csv
import io
import logging
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from data_builders.records import RecordError, Stream, Target
from data_builders.sources.recipe_order import RecipeOrder, recipe_orders
from data_builders.toolkit import (
    BuildInputs,
    ConversionError,
    Pending,
    SourceSpec,
    Tally,
    check_options,
    clip_end_from,
    each_record,
    event_span,
    load_json,
    read_text,
    require,
    seconds,
)
from data_builders.video import VideoInfo

log = logging.getLogger("data_builders")
MISSING = "Missing Step"


@dataclass
class CaptainCook4dSourceConfig:
    """Keys of ``source=captaincook4d``."""

    video_pattern: str = "{recording_id}_360p.mp4"
    """Video path under ``videos`` (the downloader's 360p file names; other layouts are found by name)."""
    mode: str = "both"
    """``both`` (error recovery + next-step guidance) or ``errors``."""
    recipe_order: str = "auto"
    """``auto`` (task graphs when found, else consensus), ``task_graph``, ``consensus`` or ``list``."""
    task_graphs: str | None = None
    """The repository's ``task_graphs/`` folder (null: ``../task_graphs`` next to ``annotation_json/``)."""
    video_information: str | None = None
    """``metadata/video_information.csv`` with each recording's duration (null: found next to
    ``annotation_json/`` if present, else videos are probed)."""
    instruction: str = (
        "I am following a recipe. Guide me to the next step and tell me right away if I make a mistake."
    )
    """The user's instruction at t=0."""

    def __post_init__(self) -> None:
        check_options(
            self,
            choices={"mode": ("both", "errors"), "recipe_order": ("auto", "task_graph", "consensus", "list")},
        )


def step_text(description: str) -> str:
    """A ``Verb-rest`` step description as an instruction, verb included, first letter upper case.

    The release writes the step's verb, a hyphen, then the step; the rest repeats the verb in most
    descriptions and not in some. When the rest contains the verb it is the instruction; otherwise
    the verb goes in front.

    >>> step_text("Chop-Chop the onion"), step_text("Coat -Coat a 6-oz. ramekin cup ")
    ('Chop the onion', 'Coat a 6-oz. ramekin cup')
    >>> step_text("Add-1 egg to a blender"), step_text("Measure and add-1/4 tsp of salt")
    ('Add 1 egg to a blender', 'Measure and add 1/4 tsp of salt')
    >>> step_text("add-Measure 1/16 teaspoon of baking soda and add it to the mug")
    'Measure 1/16 teaspoon of baking soda and add it to the mug'
    """
    head, sep, rest = description.partition("-")
    head, rest = head.strip(), rest.strip()
    if not sep or not head or not rest:
        text = description.strip()
    elif re.search(rf"(?<![\w-]){re.escape(head)}(?![\w-])", rest, flags=re.IGNORECASE):
        text = rest
    else:
        text = f"{head} {rest}"
    return text[:1].upper() + text[1:]


@dataclass
class Step:
    """One entry of a recording's step list, read."""

    index: int
    step_id: str
    description: str
    start: float
    end: float
    errors: list[dict] = field(default_factory=list)

    @property
    def text(self) -> str:
        return step_text(self.description)

    @property
    def performed(self) -> bool:
        return self.start >= 0 and self.end >= 0

    @property
    def tags(self) -> set[str]:
        return {str(e.get("tag")) for e in self.errors if isinstance(e, dict)}


def read_steps(rec: dict, tally: Tally) -> list[Step]:
    """The recording's steps; a step with one time negative, or badly inverted, is dropped alone."""
    steps = []
    for i, raw in enumerate(require(rec, "step_annotations")):
        name = f"step_annotations[{i}]"
        start = seconds(require(raw, "start_time"), f"{name}.start_time")
        end = seconds(require(raw, "end_time"), f"{name}.end_time")
        errors = raw.get("errors") or []
        if not isinstance(errors, list):
            raise RecordError(f"field '{name}.errors': expected a list, got {type(errors).__name__}")
        if (start < 0) != (end < 0):
            tally.drop(f"{name}: only one of start/end is negative ({start}, {end}); step dropped")
            continue
        if start >= 0:
            span = event_span(start, end, name, tally)
            if span is None:
                continue
            start, end = span
        steps.append(
            Step(i, str(require(raw, "step_id")), str(require(raw, "description")), start, end, errors)
        )
    return steps


def _dedup(performed: list[Step], tally: Tally) -> list[Step]:
    """Performed entries of one step id that overlap by more than half of the shorter: kept once."""
    kept: list[Step] = []
    for s in sorted(performed, key=lambda s: s.index):
        twin = next(
            (
                k
                for k in kept
                if k.step_id == s.step_id
                and min(k.end, s.end) - max(k.start, s.start) > 0.5 * min(k.end - k.start, s.end - s.start)
            ),
            None,
        )
        if twin is None:
            kept.append(s)
        else:
            twin.errors = twin.errors + [e for e in s.errors if e not in twin.errors]
            tally.count("merged_duplicate_steps")
    return sorted(kept, key=lambda s: (s.start, s.end, s.index))


def _detail(step: Step) -> str:
    return "; ".join(
        str(e.get("description") or e.get("tag"))
        for e in step.errors
        if isinstance(e, dict) and e.get("tag") != MISSING
    ) or "; ".join(str(e.get("description") or e.get("tag")) for e in step.errors if isinstance(e, dict))


def recording_targets(steps: list[Step], order: RecipeOrder, mode: str, tally: Tally) -> list[Target]:
    """All targets of one recording (see the module docstring for the rules)."""
    performed = _dedup([s for s in steps if s.performed], tally)
    skipped = [s for s in steps if not s.performed and MISSING in s.tags]
    tally.count(
        "optional_steps_not_performed", sum(1 for s in steps if not s.performed and MISSING not in s.tags)
    )
    if skipped and not performed:
        raise RecordError(
            "steps are tagged Missing Step but no step was performed: nothing to time a reminder by"
        )
    last_end = max((s.end for s in performed), default=0.0)
    due: dict[int, float] = {}
    for m in skipped:
        later = [p.start for p in performed if order.follows(p, m)]
        due[m.index] = min(later) if later else last_end
        tally.count("skip_reminders")
        tally.count("skip_reminders_at_end" if not later else "skip_reminders_at_next_step")
    targets = [
        Target(time=due[m.index], content=f"You skipped a step: {m.text}.", category="error_recovery")
        for m in skipped
    ]
    for s in performed:
        if s.errors:
            targets.append(
                Target(
                    time=s.start,
                    window=(s.start, s.end),
                    content=f"Careful with '{s.text}': {_detail(s)}.",
                    category="error_recovery",
                )
            )
    if mode == "both":
        for a, b in zip(performed, performed[1:], strict=False):
            at_b = sorted((m for m in skipped if due[m.index] == b.start), key=order.rank)
            nxt = at_b[0] if at_b else b
            targets.append(
                Target(time=min(a.end, b.start), content=f"Next: {nxt.text}.", category="next_step_guidance")
            )
    targets.sort(key=lambda t: (t.time, t.category or "", t.content))
    return targets


def read_durations(path: Path) -> dict[str, float]:
    """``recording_id -> duration(sec)`` from ``metadata/video_information.csv``."""
    rows = list(csv.DictReader(io.StringIO(read_text(path))))
    if not rows or not {"recording_id", "duration(sec)"} <= set(rows[0]):
        raise RecordError("expected the columns recording_id and duration(sec)", file=path)
    out = {}
    for n, row in enumerate(rows, start=2):
        try:
            out[row["recording_id"].strip()] = seconds(row["duration(sec)"], "duration(sec)")
        except RecordError as exc:
            raise exc.located(file=path, record=f"line {n}") from None
    return out


def _repository_file(annotations: Path, option: str | None, relative: str) -> Path | None:
    """An explicit option path (must exist), else ``relative`` to the repository root above
    ``annotation_json/`` when it exists there."""
    if option:
        path = Path(option)
        if not path.exists():
            raise RecordError(f"{relative} given as {option} does not exist")
        return path
    guess = annotations.resolve().parent.parent / relative
    return guess if guess.exists() else None


def build_captaincook4d(
    inputs: BuildInputs, options: CaptainCook4dSourceConfig
) -> Iterator[Pending | ConversionError]:
    """One intervention stream per recording (see the module docstring)."""
    path = inputs.annotations
    data = load_json(path)
    if isinstance(data, dict):  # one recording, or recordings keyed by id
        data = [data] if "step_annotations" in data else list(data.values())
    if not isinstance(data, list):
        raise RecordError("expected a list of recordings", file=path)
    info_csv = _repository_file(path, options.video_information, "metadata/video_information.csv")
    durations = read_durations(info_csv) if info_csv else {}
    graphs = None
    if options.recipe_order in ("auto", "task_graph"):
        graphs = _repository_file(path, options.task_graphs, "task_graphs")
        if graphs is None and options.recipe_order == "task_graph":
            raise RecordError(
                "recipe_order=task_graph but no task_graphs folder was found (set task_graphs=DIR)"
            )
    orders, kinds = recipe_orders(data, options.recipe_order, graphs)
    log.info(
        "captaincook4d: recipe order by %s; durations %s",
        ", ".join(f"{k} for {n} recordings" for k, n in sorted(Counter(kinds.values()).items())) or "-",
        f"from {info_csv}" if info_csv else "probed",
    )

    def parse(rid: str, rec: dict) -> Iterator[Pending]:
        tally = Tally()
        steps = read_steps(rec, tally)
        targets = recording_targets(steps, orders[rid], options.mode, tally)
        video = options.video_pattern.format(recording_id=rid)
        stated = durations.get(rid)

        def make(info: VideoInfo | None) -> list[Stream]:
            return [
                Stream.whole_video(
                    id=f"captaincook4d-{rid}",
                    source="captaincook4d",
                    task="event_intervention",
                    video=video,
                    clip_end=clip_end_from(info, stated, rid),
                    instruction=options.instruction,
                    targets=targets,
                    meta={
                        "video_id": f"captaincook4d/{rid}",
                        "activity_id": rec.get("activity_id"),
                        "is_error": rec.get("is_error"),
                        "recipe_order": kinds[rid],
                    },
                )
            ]

        yield Pending(str(path), rid, video, make, needs_info=stated is None, lookup=(rid,), tally=tally)

    yield from each_record(((_rid(k, r), r) for k, r in enumerate(data)), path, parse)


def _rid(k: int, rec: object) -> str:
    return str(rec.get("recording_id", f"item {k}")) if isinstance(rec, dict) else f"item {k}"


SPEC = SourceSpec("captaincook4d", build=build_captaincook4d, config=CaptainCook4dSourceConfig)
