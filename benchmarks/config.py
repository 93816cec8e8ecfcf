"""The benchmark block of ``eval.run`` and of GRPO's held-out evaluation (``BenchmarkConfig``) and the
scoring settings it extends (``ScoringConfig``: each field is also a flag of ``python -m
eval.score``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from infra.schema import bounded
from metrics.prs import DEFAULT_ALPHA


def _knob(default: Any, help: str | None, *, flag: str | None = None, **bounds: float) -> Any:
    """A scoring field: its default and bounds (as :func:`infra.schema.bounded`), and the
    ``python -m eval.score`` flag derived from it (``--<name>`` unless ``flag`` says otherwise)."""
    return field(default=default, metadata={**bounded(None, **bounds).metadata, "help": help, "flag": flag})


@dataclass
class ScoringConfig:
    """How predictions are scored: the content scorer and the protocol's constants. One definition for
    a benchmark config's scoring keys (``conf/benchmark/*.yaml``), ``benchmarks.scoring.ScoreConfig`` and
    the flags of ``python -m eval.score`` (derived from these fields, ``benchmarks.scoring.options.add_scoring_flags``)."""

    content: str = _knob("label", None)
    """Content scorer: ``exact``, ``label`` (targets that carry a structured label, the structured tasks,
    by that label, every other target by ``open_content``), ``embedding``, ``judge`` or ``any``."""
    open_content: str = _knob("exact", "scorer for targets without a label", flag="--label-fallback")
    """Scorer of open (unlabelled) targets under ``content=label``: exact, embedding, judge or any
    (``eval.score --label-fallback``)."""
    alpha: float = _knob(DEFAULT_ALPHA, "PRS timing decay (1/s)", ge=0)
    """PRS timing decay, 1/s."""
    tolerance: float | None = _knob(None, "seconds (EgoServe delta, ProPerMem tol)", ge=0)
    """Seconds: EgoServe's matching delta (null: per dataset), ProPerMem's late tolerance (null: 2 s)."""
    dataset: str | None = _knob(None, None)
    """EgoServe dataset (egolife, holoassist, captaincook4d); null: from each record's meta/source."""
    embedding_model: str | None = _knob(None, "sentence-embedding model folder")
    """Sentence-embedding model folder for ``open_content=embedding`` (null: the packaged one)."""
    judge_backend: str = _knob("http", "http (OpenAI-compatible) or local")
    """LLM judge of ``content``/``open_content=judge``: ``http`` (OpenAI-compatible) or ``local``."""
    judge_url: str | None = _knob(None, "base URL of the judge endpoint, e.g. http://host/v1")
    """Base URL of the judge endpoint, e.g. ``http://127.0.0.1:8000/v1`` (required by the http judge)."""
    judge_model: str | None = _knob(None, "judge model name (http) or folder (local)")
    """Judge model name (http) or folder (local); required when the judge is used."""
    judge_key_env: str = _knob("JUDGE_API_KEY", "env var holding the API key")
    """Environment variable holding the judge's API key (the key itself is never in a config)."""
    judge_cache: str | None = _knob(None, "sqlite cache file of judge answers")
    """sqlite cache of judge answers (null: ``~/.cache/proactive_vlm/judge.sqlite``)."""
    judge_timeout: float = _knob(60.0, "seconds: total deadline of one judge request", gt=0)
    """Seconds: the total deadline of one judge request (connect, send and the whole reply)."""


@dataclass
class BenchmarkConfig(ScoringConfig):
    """One benchmark's protocol knobs (``conf/benchmark/*.yaml``): its scoring (:class:`ScoringConfig`)
    and how it is run."""

    name: str = "p3i"
    """Short name used in output dirs and W&B keys."""
    protocol: str = "p3i"
    """Scoring protocol of ``eval.score`` and the runner of ``benchmarks.runners``: p3i, egoserve, propermem,
    ovo, streamingbench_proactive, proactivevideoqa, estp."""
    protocol_mode: str = "streaming"
    """``streaming``: the question at its ask time, the model's own silence/response decisions are its
    answers; ``official`` (the public benchmarks that poll: ovo, streamingbench_proactive): the
    official harness's protocol (docs/protocols.md). ``metrics.json`` records which."""
    model_key: str = "proactive_vlm"
    """The model's name in a public benchmark's official prediction file or folder (``eval.run`` writes
    it; OVO-Bench: ``results/<model_key>/``)."""
    steps_per_second: float = bounded(1.0, gt=0)
    """Decision steps per second of video (P3I, EgoServe: 1; ProPerMem: 0.5)."""
    categories: list[str] | None = None
    """Allowed category tags of a response (EgoServe: its subtypes); null: any tag."""
    question_time: str = "clip_start"
    """ESTP-Bench: when a single question (the release gives it no time) is asked: ``clip_start``
    (the clip's first step; the benchmark's evaluation harness ships only with the data) or
    ``before_first_answer`` (the rule of EyeWO's released loader, ``data/estp/livechat.py``: a time
    drawn uniformly from the clip start to one step before the midpoint of the qa's first answer,
    seeded by the qa's name, so a run repeats). Written as the user turn of the prediction file."""
    reply_clock: str = "frames_seen"
    """ProactiveVideoQA: the time a reply is written at in ``pred.jsonl``: ``frames_seen`` (the
    benchmark's released inference, MMDuet2's ``proactive_eval/inference.py``: the seconds of video
    seen, one step after the time of the frame the reply follows) or ``frame`` (that frame's time)."""
