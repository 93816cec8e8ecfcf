"""What ``eval.run`` does for a public benchmark: its own files written, its own scorer's figures read.

    python -m eval.run benchmark=ovo records=/data/built/ovo checkpoint=DIR                 (streaming)
    python -m eval.run benchmark=ovo benchmark.protocol_mode=official records=... checkpoint=DIR

A public benchmark's runner (:class:`PublicRunner`, one subclass in each benchmark's module) streams
the records as every protocol does, then writes into ``<out>/official/``:

- ``gt``: the ground truth of the evaluated records, in the release's own format, rebuilt from the
  release items the builder kept in each record's ``meta`` (a run of part of a release is scored on
  that part, not against questions it never ran);
- ``pred``: the model's answers in the benchmark's official prediction format (what its own
  harness writes), made from the predictions by the rules of ``benchmark.protocol_mode``;
- ``score_command.txt``: the ``python -m eval.score`` command line that scores the two.

``metrics.json`` is what that command prints (it is run in process: ``Protocol.score_files``), plus
``protocol_mode`` and ``official_files``; the official scorers read ``pred`` unchanged. The modes
(docs/protocols.md, "Two protocols"): ``official`` reproduces the official harness, ``streaming`` lets
the model's own decisions be its answers.
"""

from __future__ import annotations

import contextlib
import shlex
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from benchmarks.config import BenchmarkConfig
from benchmarks.protocols.base import ProtocolRunner
from data_builders.records import Stream
from engine.replies import Prediction, Reply
from infra.files import write_text_atomic

#: The folder of an evaluation that holds the benchmark's own files.
OFFICIAL_DIR = "official"
MODES = ("official", "streaming")


def predictions_of(rows: Iterable[dict[str, Any]]) -> list[Prediction]:
    """The predictions of ``predictions.jsonl`` rows (their replies, in time order)."""
    return [
        Prediction(
            row["id"],
            sorted(
                (Reply(r["time"], r.get("text", ""), r.get("category")) for r in row["replies"]),
                key=lambda r: r.time,
            ),
        )
        for row in rows
    ]


class PublicRunner(ProtocolRunner):
    """A public benchmark: subclasses write its files (:meth:`write_files`) and may add options of
    its scorer (:meth:`score_options`) and a per-task table (:meth:`table`)."""

    modes = MODES

    def write_files(
        self,
        streams: list[Stream],
        predictions: list[Prediction],
        folder: Path,
        bench: BenchmarkConfig,
        rows: list[dict[str, Any]],
    ) -> tuple[Path, Path]:
        """Write the ground truth and the official prediction file (or folder) of ``predictions``
        into ``folder`` (``rows``: the prediction rows they come from, with any fields a runner
        added); returns their paths (``--gt``, ``--pred``)."""
        raise NotImplementedError

    def score_options(self, bench: BenchmarkConfig) -> list[str]:
        """``eval.score`` options beyond ``--protocol/--gt/--pred``: the content scorer and the judge."""
        opts = ["--content", bench.content]
        for flag, value in (
            ("--judge-backend", bench.judge_backend),
            ("--judge-url", bench.judge_url),
            ("--judge-model", bench.judge_model),
            ("--judge-key-env", bench.judge_key_env),
            ("--judge-cache", bench.judge_cache),
            ("--judge-timeout", bench.judge_timeout),
            ("--embedding-model", bench.embedding_model),
        ):
            if value is not None:
                opts += [flag, str(value)]
        return opts

    def score(
        self,
        streams: list[Stream],
        rows: Iterable[dict[str, Any]],
        bench: BenchmarkConfig,
        out: Path | None = None,
    ) -> tuple[dict[str, Any], list[dict]]:
        """The official figures of the rows: the files written (into ``out/official/``, or a temporary
        folder without ``out``) and scored by ``eval.score`` in process."""
        from benchmarks.scoring.options import parse_options

        rows = list(rows)
        predictions = predictions_of(rows)
        keep = out is not None
        with contextlib.ExitStack() as stack:
            if keep:
                folder = Path(out) / OFFICIAL_DIR
                folder.mkdir(parents=True, exist_ok=True)
            else:
                folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="official-")))
            gt, pred = self.write_files(streams, predictions, folder, bench, rows)
            argv = ["--protocol", bench.protocol, "--gt", str(gt), "--pred", str(pred)]
            argv += self.score_options(bench)
            if keep:
                write_text_atomic(
                    folder / "score_command.txt", shlex.join(["python", "-m", "eval.score", *argv]) + "\n"
                )
            result, per_sample = self.protocol.score_files(parse_options(argv, [bench.protocol]))
        files = {"gt": str(gt), "pred": str(pred)} if keep else None
        return {**result, "protocol_mode": bench.protocol_mode, "official_files": files}, per_sample

    def table(
        self, metrics: dict[str, Any], per_sample: list[dict], streams: list[Stream]
    ) -> tuple[list[str], list[list]]:
        """One row per figure that is a number (nested figures as ``group/name``)."""
        return ["figure", "value"], [[k, v] for k, v in _numbers(metrics)]


def probe_frames(stream: Stream, path: Path, renderer: Any, options: dict[str, Any]):
    """The frames of ``stream`` for an official mode that asks probes (``engine.probes``), read
    as the engine reads them (``options``: those of :meth:`ProtocolRunner.stream_rows`: the frame
    cache, the video root, ``blank`` for the grey control)."""
    import numpy as np

    from data_builders.frames import stream_frames
    from data_builders.record_io import resolve_video
    from engine.streaming import BLANK_GREY

    video = resolve_video(stream, path, options.get("video_root"))
    frames = stream_frames(stream, video, renderer.cfg, renderer.steps_per_second, options.get("cache"))
    return np.full_like(frames, BLANK_GREY) if options.get("blank") else frames


def no_frame_window(engine_cfg: Any, bench: BenchmarkConfig) -> None:
    """Probes need the whole cache: a frame window is refused before anything streams."""
    if engine_cfg.frame_window is not None:
        raise ValueError(
            f"benchmark {bench.name}, protocol_mode=official: frame_window is not supported (give null)"
        )


def _numbers(metrics: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, float]]:
    for key, value in metrics.items():
        if isinstance(value, bool):
            continue
        if isinstance(value, (int, float)):
            yield f"{prefix}{key}", value
        elif isinstance(value, dict) and key not in ("official_files",):
            yield from _numbers(value, f"{prefix}{key}/")
