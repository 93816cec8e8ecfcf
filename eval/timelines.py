"""Per-record timelines as PNGs (matplotlib, Agg): P(</Response>) per step, the threshold, target
times (lines) and windows (spans), and the fires (markers); ``eval.run`` draws its first
``timelines`` records and logs them as images."""

from __future__ import annotations

from pathlib import Path

from data_builders.records import Stream
from data_builders.stream_steps import step_times
from infra.files import atomic_writer, id_file_name


def plot_timeline(
    stream: Stream, times: list[float], p: list[float], fired: list[int], threshold: float, path: Path
) -> Path:
    """One record's timeline as a PNG: P(response) per step, threshold, targets, fires."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = stream.clip_start
    fig, ax = plt.subplots(figsize=(8, 2.4), dpi=80)
    for i, target in enumerate(stream.targets):
        if target.window is not None:
            ax.axvspan(
                target.window[0] - t0,
                target.window[1] - t0,
                color="tab:green",
                alpha=0.2,
                label="target window" if i == 0 else None,
            )
        ax.axvline(target.time - t0, color="tab:green", lw=2, label="target" if i == 0 else None)
    x = [t - t0 for t in times]
    ax.plot(x, p, color="tab:blue", lw=1, label="P(response)")
    ax.axhline(threshold, color="grey", ls="--", lw=1, label=f"threshold {threshold:g}")
    fx = [xi for xi, f in zip(x, fired, strict=True) if f]
    fy = [pi for pi, f in zip(p, fired, strict=True) if f]
    ax.scatter(fx, fy, color="tab:red", marker="v", s=40, zorder=3, label="fire")
    ax.set_xlim(0, stream.duration)
    ax.set_ylim(0, 1)
    ax.set_xlabel("seconds since clip start")
    kind = "negative" if stream.is_negative else f"{len(stream.targets)} target(s)"
    ax.set_title(f"{stream.id} ({stream.task}, {kind}): {sum(fired)} fire(s)", fontsize=9)
    ax.legend(fontsize=6, loc="upper left", ncol=5)
    fig.tight_layout()
    try:
        with atomic_writer(path, "wb") as fh:  # whole or not at all (a full disk leaves no cut PNG)
            fig.savefig(fh, format="png")
    finally:
        plt.close(fig)
    return path


def plot_timelines(
    streams: list[Stream], rows: list[dict], steps_per_second: float, threshold: float, out: Path
) -> list[Path]:
    """``out/timelines/<id>.png`` for each stream, from its predictions line (``p_response``, ``fired``);
    the file name is ``records.id_file_name`` of the id, so no id can name a path outside ``out``."""
    by_id = {r["id"]: r for r in rows}
    paths = []
    for s in streams:
        row = by_id[s.id]
        times = step_times(s, steps_per_second)[: len(row["p_response"])]
        paths.append(
            plot_timeline(
                s,
                times,
                row["p_response"],
                row["fired"],
                threshold,
                out / "timelines" / f"{id_file_name(s.id)}.png",
            )
        )
    return paths
