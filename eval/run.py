"""Evaluate a checkpoint on a benchmark: causal KV-cache streaming, resumable predictions, scores, W&B.

    python -m eval.run checkpoint=runs/sft/checkpoint-500 benchmark=p3i data=toy split=test
    python -m eval.run checkpoint=null records=/tmp/toy/records.jsonl limit=8 logger=wandb
    python -m eval.run checkpoint=DIR threshold=0.3,0.5,0.7 -m        (sweep, see eval.threshold_sweep)
    accelerate launch --config_file conf/accelerate/ddp.yaml --num_processes 8 -m eval.run checkpoint=DIR ...

1. Compose ``conf/eval.yaml`` (with a checkpoint, at the ``render`` block it was trained with:
   ``engine.checkpoints``); read the records (``records=PATH`` or ``<data.dir>/<split>``).
2. Append one line per record to ``<out>/predictions.jsonl`` as its batch finishes (fsynced), so a
   killed run resumes: finished ids are skipped, a torn last line is dropped (``eval.store``).
   Batches are a fixed plan over the record order, so a resumed batch holds the same records.
   Each line carries its record's sha256 (``eval.provenance``): a record rebuilt in place since (same
   id, new contents) is streamed again, its old line moved to ``superseded/records-<time>/``
   (:func:`fresh_ids`).
3. Score in memory with the protocol's scorer (``benchmarks.runners.get_runner``) into ``metrics.json`` (what ``python -m eval.score``
   prints; order-independent), ``per_sample.jsonl``; plot timelines; log (``infra.tracking``); write
   the viewer page ``view.html`` and its rows as a W&B Table (``eval.app.view``; ``view=false``: not).

Under a multi-process launch (``accelerate launch --num_processes N -m eval.run ...``, ``WORLD_SIZE``
> 1) each rank streams its share of the records into ``predictions.rank-R-of-N.jsonl`` and rank 0
merges them into ``predictions.jsonl`` and does step 3 alone (``eval.ranks``); a threshold sweep is
refused there. Each rank uses the GPU of its ``LOCAL_RANK`` when CUDA is there.

``evaluate(cfg)`` does all of it and returns the metrics dict (used by ``make demo``);
``benchmarks.runners.evaluate_model`` runs the same streaming and scoring on a model in memory, with no
files (GRPO's held-out evaluation and ``keep_best``). The resolved
config is written once to ``<out>/config.yaml``, with ``weights``: the sha256 of the checkpoint's
weight files (``engine.checkpoints.weights_fingerprint``). Resuming with a config that would change the
decisions fails instead of mixing predictions; a folder holding an evaluation of other weights at the
same path (a retrain into the same run dir, finished or killed part way) is moved whole to
``<out>/superseded/<its sha256[:12]>/`` and the checkpoint is evaluated afresh, so the numbers printed
are always the current weights'. A full disk anywhere stops it with one line naming the output
folder and the space left (exit 2): every file is written whole or not at all, so the same command
resumes. Prints a per-task table, a summary line (the protocol's headline metric, P3I's
``with_negatives/prs_b``, over how many clips, with targets and negatives), a ``before -> after``
line when an earlier evaluation of the same records is under ``runs/eval/`` (``eval.summary``), then
the metrics as one JSON object on the last line, the headline's key first.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import sys
import time
from dataclasses import MISSING, fields
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from benchmarks.runners import get_runner
from data_builders.config import RenderConfig
from data_builders.frame_cache import FrameCache, FrameCacheError
from data_builders.record_io import load_streams, write_jsonl
from data_builders.records import RecordError, Stream
from engine.checkpoints import (
    CheckpointError,
    check_checkpoint,
    check_render,
    checkpoint_step,
    model_dir,
    named_step,
    render_overrides,
    run_dir_of,
    weights_fingerprint,
)
from engine.preflight import check_stage
from eval.app.view import write_view
from eval.config import EvalConfig, records_path
from eval.preflight import EVAL
from eval.provenance import (
    NOT_DECISIVE,
    RECORD_FIELD,
    config_sha12,
    decides,
    describe_difference,
    record_fingerprint,
)
from eval.ranks import (
    PREDICTIONS,
    RankGroup,
    adopt,
    check_manifests,
    merge,
    shard_path,
    split,
    write_manifest,
)
from eval.store import PredictionLog, PredictionWriteError
from eval.summary import compare_line, lead_with, summary_line
from eval.threshold_sweep import point_dir, reuse_rows, sibling_passes, write_summary
from eval.timelines import plot_timelines
from infra.entry import quiet_libraries, rewrite_argv, run_command
from infra.files import LOCK_FILE, FolderWriteError, OutputLock, OutputLocked, write_text_atomic
from infra.progress import Progress, console
from infra.ranks import Ranks
from infra.schema import CONF_DIR, compose, load_literal, validate
from infra.tracking import format_table, make_logger

CONF = str(CONF_DIR)
#: Where an output folder keeps the evaluations of weights the checkpoint no longer holds.
SUPERSEDED = "superseded"
log = logging.getLogger("eval.run")


def load_config(overrides: list[str] | None = None) -> DictConfig:
    """``conf/eval.yaml`` composed with command-line style overrides and validated, for callers
    outside Hydra (``make demo``, tests): ``evaluate(load_config(["checkpoint=null", "limit=8"]))``."""
    return compose("eval", render_overrides(overrides or []), EvalConfig)


#: Folders a training run writes inside its run dir: named after the run too, so two runs' ``final/``
#: get two evaluation folders (``runs/eval/sft_a_final/p3i``, ``runs/eval/sft_b_final/p3i``).
RUN_OUTPUTS = ("final", "best")


def evaluated_name(cfg: DictConfig) -> str:
    """``<run>_<checkpoint-N>``, ``<run>_final`` and ``<run>_best`` for what a training run writes, the
    dir name otherwise (a downloaded model), ``<model>-untrained`` without a checkpoint."""
    if cfg.checkpoint is None:
        return f"{cfg.model.name}-untrained"
    p = Path(cfg.checkpoint).resolve()
    return f"{p.parent.name}_{p.name}" if named_step(p) is not None or p.name in RUN_OUTPUTS else p.name


#: The longest readable label of an output folder (``p3i@threshold-0.05``, ``p3i@blank_frames-true+limit-8``:
#: no ``=`` or ``,``, so the folder can be given back as ``out_dir=``); a longer one, or a value that
#: is no plain word or number (a path), makes the label the config's sha256[:12].
LABEL_CHARS = 40
PLAIN_VALUE = re.compile(r"[A-Za-z0-9_.-]+")


def _text(value: object) -> str:
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def out_label(cfg: DictConfig, sweep: bool = False) -> str | None:
    """What tells an evaluation's default folder from the default config's: None for the default
    config; ``threshold-0.05`` (``key-value`` of each top-level option that decides and is set away
    from its default, sorted, joined by ``+``; a sweep's threshold aside) when short and plain; else the config's
    sha256[:12] (``eval.provenance.config_sha12``)."""
    skip = {*NOT_DECISIVE, "checkpoint", *(("threshold",) if sweep else ())}
    plain = OmegaConf.to_container(cfg, resolve=True)
    defaults = {f.name: f.default for f in fields(EvalConfig) if f.default is not MISSING}
    changed = {k: plain[k] for k, d in defaults.items() if k not in skip and plain.get(k) != d}
    if not changed:
        return None
    label = "+".join(f"{k}-{_text(v)}" for k, v in sorted(changed.items()))
    if len(label) <= LABEL_CHARS and all(PLAIN_VALUE.fullmatch(_text(v)) for v in changed.values()):
        return label
    return config_sha12(plain, ("threshold",) if sweep else ())


def default_out_dir(cfg: DictConfig, sweep: bool = False) -> Path:
    """``<runs>/eval/<checkpoint>/<benchmark>[_memory]`` for the default config, with
    ``@<label>`` (:func:`out_label`) for another. When that folder holds an evaluation of another
    config anyway (one differing inside a block, e.g. ``data.dir``), ``@<config sha256[:12]>``."""
    root = Path(cfg.paths.runs_dir) / "eval" / evaluated_name(cfg)
    name = cfg.benchmark.name + ("_memory" if cfg.memory.enabled else "")
    label = out_label(cfg, sweep)
    folder = root / (f"{name}@{label}" if label else name)
    plain = OmegaConf.to_container(cfg, resolve=True)
    why = _other_config(folder, plain, sweep)
    if not why:
        return folder
    alt = root / f"{name}@{config_sha12(plain, ('threshold',) if sweep else ())}"
    if alt != folder:
        log.warning("%s holds an evaluation with another config (%s): this one goes to %s", folder, why, alt)
    return alt


def _other_config(folder: Path, plain: dict, sweep: bool) -> str:
    """How an evaluation in ``folder`` (a sweep's: its points') differs from ``plain`` in what decides
    but the weights and (in a sweep) the threshold; ``""`` when none does."""
    skip = ("threshold",) if sweep else ()
    mine = {k: v for k, v in decides(plain, None).items() if k not in skip}
    saved = sorted(folder.glob("threshold_*/config.yaml")) if sweep else [folder / "config.yaml"]
    for path in (p for p in saved if p.is_file()):
        old = OmegaConf.to_container(load_literal(path), resolve=True)
        theirs = {k: v for k, v in decides(old, None).items() if k not in skip}
        why = describe_difference(mine, theirs, "this run", str(path))
        if why:
            return why
    return ""


def training_step(cfg: DictConfig) -> int:
    """The checkpoint's training step, the x axis of its metrics in W&B (``step`` when given)."""
    if cfg.step is not None:
        return int(cfg.step)
    return (checkpoint_step(cfg.checkpoint) if cfg.checkpoint is not None else None) or 0


def _start_dir(out: Path, recorded: dict) -> None:
    """Write the resolved config (with the weights' sha256) once; a resume must not change anything
    that decides, and an evaluation of other weights is set aside (:func:`_set_aside`), not resumed."""
    saved = out / "config.yaml"
    if saved.exists():
        old = OmegaConf.to_container(load_literal(saved), resolve=True)
        why = describe_difference(decides(recorded, None), decides(old, None), "now", str(saved))
        if why:  # the weights aside: an evaluation of other weights is set aside below
            raise ValueError(f"{out} holds a run with another config ({why}); pick another out_dir")
        if old.get("weights") == recorded["weights"]:
            return
        _set_aside(out, old.get("weights"), recorded)
    write_text_atomic(saved, OmegaConf.to_yaml(OmegaConf.create(recorded)))  # whole or not at all


def _set_aside(out: Path, old: str | None, recorded: dict) -> Path:
    """Move the evaluation in ``out`` (of weights ``old``) to ``out/superseded/<old[:12]>/``, its
    ``config.yaml`` last: a crash part way leaves that file, and the next run moves the rest."""
    label = old[:12] if old else "unfingerprinted"
    dest, n = out / SUPERSEDED / label, 2
    while dest.exists():
        dest, n = out / SUPERSEDED / f"{label}-{n}", n + 1
    dest.mkdir(parents=True)
    moved = sorted(p for p in out.iterdir() if p.name not in (LOCK_FILE, SUPERSEDED, "config.yaml"))
    for p in [*moved, out / "config.yaml"]:
        os.replace(p, dest / p.name)
    held = f"weights sha256 {old[:12]}" if old else "weights it recorded no fingerprint of"
    new = recorded["weights"][:12] if recorded["weights"] else None
    log.warning(
        "%s held an evaluation of %s; %s now holds sha256 %s: moved that evaluation to %s, "
        "evaluating the new weights afresh",
        out,
        held,
        recorded["checkpoint"],
        new,
        dest,
    )
    return dest


def model_config(cfg: DictConfig) -> dict:
    """The model block an evaluation loads: the ``model`` group's, or the checkpoint's weights."""
    model_cfg = OmegaConf.to_container(cfg.model, resolve=True)
    if cfg.checkpoint is not None:
        model_cfg |= {
            "name": evaluated_name(cfg),
            "kind": "pretrained",
            "path": str(model_dir(cfg.checkpoint)),
            "random_init": False,
        }
    return model_cfg


def load_model(cfg: DictConfig):
    """The model and processor an evaluation streams with, on this rank's GPU when CUDA is there."""
    import torch

    from engine.model import load_model_and_processor  # here: a refusal or --cfg job loads no model code

    model, processor = load_model_and_processor(model_config(cfg), cache_dir=cfg.paths.cache_dir)
    if torch.cuda.is_available():  # each rank of a launch on its own GPU (LOCAL_RANK), else GPU 0
        device = torch.device("cuda", Ranks.from_env().local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
        model.to(device)
    return model, processor


def _run_streams(
    cfg: DictConfig, streams: list[Stream], done: set[str], path: Path, log: PredictionLog
) -> int:
    """Stream the not-yet-done records through the engine, batch by batch; returns records run."""
    from engine.memory import build_memory
    from engine.render import TurnRenderer
    from engine.streaming import EngineConfig

    model, processor = load_model(cfg)
    render = RenderConfig(**OmegaConf.to_container(cfg.render, resolve=True))
    renderer = TurnRenderer(processor, render, cfg.benchmark.steps_per_second)
    engine_cfg = EngineConfig(
        threshold=cfg.threshold,
        max_new_tokens=cfg.max_new_tokens,
        frame_window=cfg.frame_window,
        compile=cfg.compile,
        step=cfg.engine_step,
    )
    n = 0
    rows = get_runner(cfg.benchmark.protocol).stream_rows(
        model.eval(),
        renderer,
        streams,
        path,
        engine_cfg,
        cfg.benchmark,
        batch_size=cfg.batch_size,
        cache=FrameCache(cfg.paths.frame_cache_dir),
        blank=cfg.blank_frames,
        video_root=cfg.video_root,
        memory=build_memory(cfg.memory, model, processor),  # None with memory=off
        skip=done,
    )
    bar = Progress(len(streams) - len(done), "eval", unit="record")
    by_id = {s.id: s for s in streams}
    fired = 0
    for row in rows:
        log.append(row | {RECORD_FIELD: record_fingerprint(by_id[row["id"]])})
        n += 1
        fired += sum(row["fired"])
        bar.update(1, fired=fired)  # replies so far over every record streamed, not the last one's
    bar.close()
    return n


def fresh_ids(predictions: PredictionLog, streams: list[Stream]) -> set[str]:
    """The ids of ``predictions`` whose line belongs to the record as it is now (``eval.provenance``'s
    fingerprint). The lines of records rebuilt since (same id, another fingerprint; or a line with
    none, from an older version) are moved to ``<out>/superseded/records-<time>/`` and redone."""
    done = predictions.done_ids()
    want = {s.id: record_fingerprint(s) for s in streams}
    stale = {r["id"] for r in predictions.rows() if r["id"] in want and r.get(RECORD_FIELD) != want[r["id"]]}
    if stale:
        dest = predictions.path.parent / SUPERSEDED / f"records-{time.strftime('%Y%m%dT%H%M%S')}"
        while (dest / predictions.path.name).exists():  # set aside twice in one second
            dest = dest.with_name(dest.name + "+")
        dest = dest / predictions.path.name
        predictions.set_aside(stale, dest)
        first = sorted(stale)[0]
        log.warning(
            "%s: %d prediction line(s) were made for other contents of their record (first: %s; "
            "the records were rebuilt in place): moved to %s, streaming those records again",
            predictions.path,
            len(stale),
            first,
            dest,
        )
    return done - stale


def evaluate(cfg: DictConfig, sweep: bool = False, echo: bool = True) -> dict:
    """Run, score and log one evaluation (one threshold); returns the metrics dict. The output
    folder is locked for the run (``infra.files.OutputLock``): a second evaluation into it
    stops at once, naming the holder, instead of duplicating its predictions. Under a multi-process
    launch (``WORLD_SIZE > 1``) each rank streams its share and rank 0 scores (``eval.ranks``); the
    other ranks return an empty dict."""
    quiet_libraries()
    bench = cfg.benchmark
    get_runner(bench.protocol).check(bench)  # e.g. a judge without its URL fails here, not after streaming
    if cfg.checkpoint is not None:
        check_checkpoint(cfg.checkpoint)  # a damaged file fails here, naming it, not after streaming
    check_render(cfg.checkpoint, cfg.render)
    ranks = Ranks.from_env()
    if ranks.world > 1 and sweep:
        raise ValueError(
            f"a threshold sweep (-m) runs in one process, not under a {ranks.world}-process launch: "
            "sweep with plain python -m eval.run, or launch one threshold per run"
        )
    path = records_path(cfg)
    streams = load_streams(path)[: cfg.limit]
    if not streams:
        raise RecordError("no records to evaluate", file=path)
    base = Path(cfg.out_dir) if cfg.out_dir else default_out_dir(cfg, sweep)
    out = point_dir(base, cfg.threshold) if sweep else base
    try:
        if ranks.world > 1:
            result = _evaluate_ranks(out, cfg, streams, path, ranks)
        else:
            with OutputLock(out, "eval.run"):
                result = _evaluate_into(out, base, cfg, streams, path, sweep)
    except OSError as exc:
        if not FolderWriteError.refused(exc, out) or isinstance(exc, PredictionWriteError):
            raise
        raise FolderWriteError(
            out, exc, f"{PREDICTIONS} holds whole lines only, every other file is whole"
        ) from None
    if result is None:  # a rank other than 0
        return {}
    metrics, columns, table, counts = result
    if echo:
        ran, reused = counts
        launch = f", {ranks.world} ranks" if ranks.world > 1 else ""
        print(
            f"{evaluated_name(cfg)} on {bench.name} ({len(streams)} records{launch}, {ran} streamed, "
            f"{reused} reused, threshold {cfg.threshold:g}) -> {out}"
        )
        print(format_table(columns, table))
        _print_summary(cfg, out, streams, metrics)
    return metrics


def _print_summary(cfg: DictConfig, out: Path, streams: list[Stream], metrics: dict) -> None:
    """The headline metric with its clips, and the same metric of an earlier evaluation of the same
    records if there is one (``eval.summary``)."""
    name, protocol = evaluated_name(cfg), cfg.benchmark.protocol
    print(summary_line(name, cfg.benchmark.name, protocol, metrics, streams))
    compared = compare_line(out, Path(cfg.paths.runs_dir), protocol, metrics, name)
    if compared:
        print(compared)


def _recorded(cfg: DictConfig) -> dict:
    """The config written to ``config.yaml``: the resolved config and the weights' sha256."""
    weights = weights_fingerprint(cfg.checkpoint)["sha256"] if cfg.checkpoint is not None else None
    return OmegaConf.to_container(cfg, resolve=True) | {"weights": weights}


def _evaluate_into(
    out: Path, base: Path, cfg: DictConfig, streams: list[Stream], path: Path, sweep: bool
) -> tuple[dict, list[str], list[list], tuple[int, int]]:
    bench, runner = cfg.benchmark, get_runner(cfg.benchmark.protocol)
    recorded = _recorded(cfg)
    _start_dir(out, recorded)
    write_jsonl(out / "gt.jsonl", [runner.gt_row(s) for s in streams])
    adopt(out, [streams])  # the shards of a multi-process run into predictions.jsonl, if any
    log = PredictionLog(out / "predictions.jsonl")
    done = fresh_ids(log, streams)
    reused = 0
    if sweep:
        passes = sibling_passes(base, out, recorded)  # points of these weights only
        todo = [s for s in streams if s.id not in done]
        for row in reuse_rows(todo, passes, cfg.threshold, cfg.sweep_mode, bench.steps_per_second).values():
            log.append(row)
            done.add(row["id"])
            reused += 1
    ran = _run_streams(cfg, streams, done, path, log) if len(done) < len(streams) else 0
    metrics, columns, table = _score_and_log(out, base, cfg, streams, log.rows(), recorded, sweep)
    return metrics, columns, table, (ran, reused)


def _evaluate_ranks(
    out: Path, cfg: DictConfig, streams: list[Stream], path: Path, ranks: Ranks
) -> tuple[dict, list[str], list[list], tuple[int, int]] | None:
    """One rank of a multi-process evaluation (``eval.ranks``); rank 0 returns what
    :func:`_evaluate_into` does, the others None."""
    runner = get_runner(cfg.benchmark.protocol)
    shares = split(streams, ranks.world, lambda s: runner.shard_key(s, cfg.benchmark))
    mine = shares[ranks.rank]
    group = RankGroup(ranks)
    lock = None
    recorded = _recorded(cfg)  # every rank hashes the weights it will load
    try:
        if ranks.main:  # the output folder is set up once, before any rank writes into it
            lock = OutputLock(out, "eval.run").acquire()
            _start_dir(out, recorded)
            write_jsonl(out / "gt.jsonl", [runner.gt_row(s) for s in streams])
            adopt(out, shares)
        group.barrier()
        write_manifest(out, ranks, streams, mine, path, decides(recorded, recorded["weights"]))
        group.barrier()
        check_manifests(out, ranks.world)
        shard = PredictionLog(shard_path(out, ranks.rank, ranks.world))
        done = fresh_ids(shard, mine)
        ran = (
            _run_streams(cfg, mine, done, path, shard) if len(done & {s.id for s in mine}) < len(mine) else 0
        )
        log.info(
            "rank %d/%d: %d of its %d records streamed -> %s",
            ranks.rank,
            ranks.world,
            ran,
            len(mine),
            shard.path,
        )
        ran_all = group.gather(ran)  # also the barrier before the merge
        if not ranks.main:
            return None
        rows = merge(out, streams, shares)
        metrics, columns, table = _score_and_log(out, out, cfg, streams, rows, recorded, sweep=False)
        return metrics, columns, table, (sum(ran_all), 0)
    finally:
        if lock is not None:
            lock.release()
        group.close()


def _score_and_log(
    out: Path,
    base: Path,
    cfg: DictConfig,
    streams: list[Stream],
    rows: list[dict],
    recorded: dict,
    sweep: bool,
) -> tuple[dict, list[str], list[list]]:
    """Score the rows, write ``metrics.json`` / ``per_sample.jsonl`` / timelines, log to the tracker."""
    bench, runner = cfg.benchmark, get_runner(cfg.benchmark.protocol)
    metrics, per_sample = runner.score(streams, rows, bench, out=out)
    write_jsonl(out / "per_sample.jsonl", per_sample)
    write_text_atomic(out / "metrics.json", json.dumps(metrics, indent=2, sort_keys=True) + "\n")
    pngs = plot_timelines(streams[: cfg.timelines], rows, bench.steps_per_second, cfg.threshold, out)
    columns, table = runner.table(metrics, per_sample, streams)
    run_dir = run_dir_of(cfg.checkpoint)
    tracker = make_logger(
        cfg.logger,
        f"{evaluated_name(cfg)}/{bench.name}" + (f"@{cfg.threshold:g}" if sweep else ""),
        recorded,
        group=run_dir.name if run_dir is not None else None,
        run_dir=run_dir,
    )
    prefix = f"eval/{bench.name}"
    tracker.log_metrics(metrics, training_step(cfg), prefix)
    tracker.log_table(f"{prefix}/per_task", columns, table)
    tracker.log_images(f"{prefix}/timeline", pngs, [s.id for s in streams[: len(pngs)]])
    if cfg.view:  # view.html next to metrics.json, and its rows as a W&B Table (eval.app.view)
        write_view(out, tracker=tracker, name=f"{prefix}/streams")
    tracker.finish()
    if sweep:
        write_summary(base)
    return metrics, columns, table


#: What the command reports as one line, exit 2 (a RecordError is a ValueError; a full disk while
#: writing predictions or any other file, a read-only output folder, or the frame cache's disk names
#: the folder).
USER_ERRORS = (
    ValueError,
    OutputLocked,
    FileNotFoundError,
    PredictionWriteError,
    FolderWriteError,
    FrameCacheError,
)


@hydra.main(config_path=CONF, config_name="eval", version_base="1.3")
def _main(cfg: DictConfig) -> None:
    """A point of a sweep (``-m``): Hydra composed it, it is validated and checked here."""
    console()
    try:
        cfg = validate(cfg, EvalConfig)
        check_stage(EVAL, cfg)
    except USER_ERRORS as exc:
        print(f"eval.run: {exc}", file=sys.stderr)
        sys.exit(2)
    _command(cfg)


def _command(cfg: DictConfig, _checked: object = None) -> None:
    """The command's work on its validated, checked config: evaluate, print the metrics."""
    console()
    try:
        metrics = evaluate(cfg, sweep=HydraConfig.get().mode == RunMode.MULTIRUN)
    except USER_ERRORS as exc:
        print(f"eval.run: {exc}", file=sys.stderr)
        sys.exit(2)
    if Ranks.from_env().main:  # the other ranks of a launch print nothing: rank 0's line comes last
        print(json.dumps(lead_with(metrics, get_runner(cfg.benchmark.protocol).headline)))


def main() -> None:
    """The command line, with a checkpoint's saved render block added as overrides before Hydra
    composes (``engine.checkpoints.render_overrides``), composed and checked once. SIGUSR1 gets its
    default action back (the end of the process): ``slurm/eval.sh`` starts ranks under a launcher
    told to ignore it, and a resumable evaluation has nothing to save before the requeue."""
    signal.signal(signal.SIGUSR1, signal.SIG_DFL)
    rewrite_argv("eval.run", render_overrides, CheckpointError)
    run_command("eval.run", "eval", EvalConfig, _command, _main, check=lambda cfg: check_stage(EVAL, cfg))


if __name__ == "__main__":
    main()
