"""The evaluation viewer: one self-contained HTML page of an ``eval.run`` folder, and the same rows
as a W&B Table.

    python -m eval.app.view out_dir=runs/eval/sft_4b_checkpoint-500/p3i
    python -m eval.app.view out_dir=DIR thumbnails=0 html=/tmp/p3i.html

``eval.run`` writes ``<out_dir>/view.html`` next to ``metrics.json`` at the end of every evaluation
(``view=false`` to skip it) and logs the rows as the W&B Table ``eval/<benchmark>/streams`` of the
evaluation's run, a timeline image per row. The page needs no server and nothing outside the file
(inline CSS and JS, thumbnails as inline JPEG data URIs): open it after ``scp``.

- The header leads with the protocol's headline metric (``eval.summary``; P3I:
  ``with_negatives/prs_b``) and the clips behind it (with targets, negatives), then the per-task
  table ``eval.run`` prints (the runner's ``table``); every metric of ``metrics.json`` is one click
  away. The legend and the header name their two redundancy counts apart (:data:`WORDS`).
- One row per stream of ``predictions.jsonl`` with its record id, task, category, fire and target
  counts and a timeline over a seconds axis: target times (brown lines), their windows (bands), the
  fires coloured by outcome (a hit green), and P(</Response>) as a curve against the threshold. Each timeline is one canvas drawn when it scrolls into view, never an element per
  step, so a 28,800-step EgoServe day draws like a 20-step clip: the curve is kept as the maximum
  over at most :data:`CURVE_BINS` bins, one character each.
- The outcomes (hit, early, late, redundant, false alarm, wrong, missed target: ``metrics.outcomes``)
  are the scorers' own: :meth:`benchmarks.protocols.base.ProtocolRunner.outcomes` of the run's protocol (P3I:
  ``metrics.prs.fire_outcomes``, ProPerMem: ``metrics.propermem.fire_outcomes``, EgoServe:
  ``metrics.egoserve.unit_outcomes``; the public benchmarks' fires are ``unclassified``). This
  module holds no timing rule.
- Hover a fire for its time, outcome and reply; click a row for every reply with its thumbnail
  (the frame at the fire, at most ``thumbnails`` per stream, spread over its fires) and the
  protocol's per-sample row. Filters by task, outcome and category (``meta.benchmark_task`` or
  the targets' categories) and by id; sorted worst first (most fires that are not hits plus
  missed targets) by default.
- Size: per stream about 0.4 KB of text, its curve (at most :data:`CURVE_BINS` bytes), its
  replies (each cut to :data:`TEXT_CHARS` characters) and at most ``thumbnails`` JPEGs of
  :data:`THUMB_PIXELS` pixels (about 1.5 KB each): at most ~9.6 KB a stream beyond its replies
  with the defaults, ~10 MB for 1,000 streams; docs/evaluation.md, "Evaluation viewer", gives a measured run.

A video that cannot be read leaves its stream without thumbnails, and the page and the last JSON
line say which and why. Prints ``{"html": ..., "streams": ..., "fires": ..., "bytes": ...}`` last.
"""

from __future__ import annotations

import base64
import io
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.config import BenchmarkConfig
from benchmarks.runners import get_runner
from data_builders.record_io import iter_jsonl, load_streams, resolve_video
from data_builders.records import RecordError, Stream
from data_builders.video import VideoError, read_frames
from eval.config import records_path
from eval.provenance import RECORD_FIELD, record_fingerprint
from eval.store import PredictionLog
from eval.summary import counts, headline
from infra.files import atomic_writer, id_file_name, write_text_atomic
from infra.schema import load_literal, validate
from metrics.outcomes import FIRE_OUTCOMES, StreamOutcomes

#: Most curve bins per stream (the maximum P(</Response>) of each bin), and characters per reply.
CURVE_BINS = 600
TEXT_CHARS = 300
#: Pixel budget of a thumbnail (about 96 x 72), and its JPEG quality.
THUMB_PIXELS = 96 * 72
THUMB_QUALITY = 70
DEFAULT_THUMBNAILS = 6
#: 64 levels of the curve, one character each (0 = ``0``, 1 = ``o``).
LEVELS = "0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyz{|}~"[:64]
COLOURS = {
    "hit": "#2ca02c",
    "early": "#ff7f0e",
    "late": "#9467bd",
    "redundant": "#8c8c8c",
    "false_alarm": "#d62728",
    "wrong": "#e377c2",
    "unclassified": "#1f77b4",
    "missed": "#000000",
}
#: A target's line and its window's band: colours no outcome uses (a hit is green).
TARGET_COLOUR = "#8c564b"
WINDOW_COLOUR = "#efe2d5"
#: What the legend and the header call what the two redundancy counts are, so they are not read as
#: one: the legend's ``redundant`` is an outcome under the PRS-U matching; ``redundant_replies`` is
#: the scorer's PRS-B count (``metrics.prs.redundant_replies``), which holds a negative's replies too.
WORDS = {
    "redundant": "redundant (another reply to a target already answered, PRS-U matching)",
    "false_alarm": "false alarm (a reply on a clip without targets)",
    "redundant_replies": "redundant_replies (the scorer's count: replies beyond one per target under "
    "PRS-B matching, plus every reply on a clip without targets)",
}
#: Axis steps (s) a timeline's ticks are spaced by: the smallest giving at most :data:`MAX_TICKS` gaps.
TICK_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400)
MAX_TICKS = 8


def tick_step(duration: float) -> float:
    """The seconds between two ticks of a timeline's axis.

    >>> tick_step(20.0), tick_step(4.0), tick_step(28800.0)
    (5, 1, 3600)
    """
    return next((s for s in TICK_STEPS if duration / s <= MAX_TICKS), TICK_STEPS[-1])


def encode_curve(p: list[float], bins: int = CURVE_BINS) -> str:
    """The per-step P(</Response>) as at most ``bins`` characters: each the maximum of its bin,
    quantised to 64 levels (so a single step above the threshold still shows).

    >>> encode_curve([0.0, 1.0, 0.5]), len(encode_curve([0.1] * 28800))
    ('0oP', 600)
    """
    n = len(p)
    if n == 0:
        return ""
    k = min(n, bins)
    out = []
    for b in range(k):
        lo, hi = b * n // k, max(b * n // k + 1, (b + 1) * n // k)
        v = max(p[lo:hi])
        out.append(LEVELS[min(63, max(0, round(v * 63)))])
    return "".join(out)


def stream_categories(stream: Stream) -> list[str]:
    """The stream's benchmark category (``meta.benchmark_task``) and its targets' categories."""
    cats = {t.category for t in stream.targets if t.category}
    if stream.meta.get("benchmark_task"):
        cats.add(str(stream.meta["benchmark_task"]))
    return sorted(cats)


def thumbnails(
    stream: Stream, times: list[float], video: Path, limit: int
) -> tuple[dict[int, str], str | None]:
    """Data URIs of the frames at up to ``limit`` of the fire ``times`` (reply index -> URI), spread
    evenly over them, and why there are none (an unreadable video), or None."""
    if not times or limit <= 0:
        return {}, None
    from PIL import Image

    n = len(times)
    picks = sorted({round(i * (n - 1) / max(1, limit - 1)) for i in range(min(limit, n))})
    try:
        frames = read_frames(video, [times[i] - stream.video_offset for i in picks], max_pixels=THUMB_PIXELS)
    except (VideoError, OSError) as exc:
        return {}, str(exc)
    out = {}
    for i, frame in zip(picks, frames, strict=True):
        buf = io.BytesIO()
        Image.fromarray(frame).save(buf, format="JPEG", quality=THUMB_QUALITY)
        out[i] = "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode()
    return out, None


def _fire_cells(s: Stream, replies: list[dict], o: StreamOutcomes, pics: dict[int, str]) -> list[dict]:
    """A row's replies for the page: clip time, outcome, target matched, score, text, category, frame."""
    return [
        {
            "t": r["time"] - s.clip_start,
            "o": f.outcome,
            "g": f.target,
            "s": None if f.score is None else round(f.score, 3),
            "x": (r.get("text") or "")[:TEXT_CHARS],
            "c": r.get("category"),
            "img": pics.get(k),
        }
        for k, (r, f) in enumerate(zip(replies, o.fires, strict=True))
    ]


def _target_cells(s: Stream, o: StreamOutcomes) -> list[dict]:
    """A row's targets for the page: clip time, window, outcome, text, category."""
    return [
        {
            "t": t.time - s.clip_start,
            "w": None if t.window is None else [t.window[0] - s.clip_start, t.window[1] - s.clip_start],
            "o": o.targets[i],
            "x": t.content[:TEXT_CHARS],
            "c": t.category,
        }
        for i, t in enumerate(s.targets)
    ]


def view_rows(
    streams: list[Stream],
    rows: list[dict],
    outcomes: dict[str, StreamOutcomes],
    per_sample: dict[str, dict],
    steps_per_second: float,
    records: Path | None = None,
    video_root: str | None = None,
    thumbs: int = DEFAULT_THUMBNAILS,
) -> list[dict]:
    """One JSON-ready row per prediction row (the page's and the W&B Table's data)."""
    by_id = {s.id: s for s in streams}
    out = []
    for row in rows:
        s = by_id.get(row["id"])
        if s is None:
            raise RecordError("prediction id is not in the records", record=row["id"])
        o = outcomes[s.id]
        replies = row["replies"]
        times = [r["time"] for r in replies]
        pics, why = (
            thumbnails(s, times, resolve_video(s, records, video_root), thumbs) if thumbs else ({}, None)
        )
        fires = _fire_cells(s, replies, o, pics)
        targets = _target_cells(s, o)
        counts = Counter(f["o"] for f in fires)
        missed = sum(t["o"] == "missed" for t in targets)
        out.append(
            {
                "id": s.id,
                "task": s.task,
                "cats": stream_categories(s),
                "dur": s.duration,
                "tick": tick_step(s.duration),
                "steps": len(row.get("p_response", [])),
                "sps": steps_per_second,
                "curve": encode_curve(row.get("p_response", [])),
                "fires": fires,
                "targets": targets,
                "counts": dict(counts),
                "missed": missed,
                "bad": len(fires) - counts.get("hit", 0) + missed,
                "sample": per_sample.get(s.id, {}),
                "no_thumbs": why,
            }
        )
    return out


def load_run(out_dir: Path) -> tuple[Any, BenchmarkConfig, list[Stream], list[dict], Path]:
    """The config, benchmark, streams (those with a prediction line) and prediction rows of an
    ``eval.run`` folder. The folder is data: its ``config.yaml`` is read with nothing resolved
    (``infra.schema.load_literal``), so a ``${oc.env:...}`` in it stays that text."""
    saved = out_dir / "config.yaml"
    if not saved.is_file():
        raise RecordError("no config.yaml: not an eval.run folder", file=out_dir)
    cfg = load_literal(saved)
    bench = validate(cfg.benchmark, BenchmarkConfig)
    rows = PredictionLog(out_dir / "predictions.jsonl").rows()
    if not rows:
        raise RecordError("no predictions", file=out_dir / "predictions.jsonl")
    records = records_path(cfg)
    have = {r["id"] for r in rows}
    streams = [s for s in load_streams(records) if s.id in have]
    missing = have - {s.id for s in streams}
    if missing:
        raise RecordError(f"prediction ids not in the records: {sorted(missing)[:5]}", file=records)
    made = {r["id"]: r.get(RECORD_FIELD) for r in rows}
    changed = [s.id for s in streams if made[s.id] not in (None, record_fingerprint(s))]
    if changed:  # a line of an older version holds no fingerprint: shown as it is
        raise RecordError(
            f"{len(changed)} record(s) changed since their predictions were made (first: {changed[0]}); "
            "rerun eval.run on this folder to stream them again",
            file=records,
        )
    return cfg, bench, streams, rows, records


def build_view(out_dir: str | Path, thumbs: int = DEFAULT_THUMBNAILS) -> tuple[dict, list[dict]]:
    """The page's data of an ``eval.run`` folder: ``{"title", "protocol", "threshold", "headline",
    "clips", "table", "metrics", "rows", ...}``, and the rows."""
    out_dir = Path(out_dir)
    cfg, bench, streams, rows, records = load_run(out_dir)
    runner = get_runner(bench.protocol)
    outcomes = runner.outcomes(streams, rows, bench)
    per_sample = {}
    if (out_dir / "per_sample.jsonl").is_file():
        per_sample = {r["id"]: r for r in iter_jsonl(out_dir / "per_sample.jsonl") if "id" in r}
    metrics = (
        json.loads((out_dir / "metrics.json").read_text()) if (out_dir / "metrics.json").is_file() else {}
    )
    vrows = view_rows(
        streams, rows, outcomes, per_sample, bench.steps_per_second, records, cfg.get("video_root"), thumbs
    )
    title = f"{cfg.get('checkpoint') or cfg.model.name} on {bench.name}"
    columns, table = runner.table(metrics, list(per_sample.values()), streams) if metrics else ([], [])
    data = {
        "title": title,
        "protocol": bench.protocol,
        "threshold": float(cfg.threshold),
        "headline": headline(bench.protocol, metrics),
        "clips": counts(streams),
        "table": {"columns": columns, "rows": table},
        "metrics": metrics,
        "outcomes": list(FIRE_OUTCOMES) + ["missed"],
        "colours": COLOURS | {"target": TARGET_COLOUR, "window": WINDOW_COLOUR},
        "words": WORDS,
        "rows": vrows,
    }
    return data, vrows


#: What no text may bring into a ``<script>`` element as itself: ``</script>`` would end the element and
#: ``<!--<script>`` would make the HTML parser read on past its end tag; JSON writes them as ``\\uXXXX``.
SCRIPT_UNSAFE = {ord(c): f"\\u{ord(c):04x}" for c in "<>&\u2028\u2029"}


def embed_json(data: Any) -> str:
    """``data`` as JSON that is inert inside a ``<script>`` element: ``<``, ``>``, ``&``, U+2028 and
    U+2029 (they only occur inside JSON strings) written as ``\\u003c`` etc.

    >>> embed_json({"x": "<!--<script></script>&"})
    '{"x":"\\\\u003c!--\\\\u003cscript\\\\u003e\\\\u003c/script\\\\u003e\\\\u0026"}'
    """
    return json.dumps(data, separators=(",", ":")).translate(SCRIPT_UNSAFE)


def render_html(data: dict) -> str:
    """The self-contained page of :func:`build_view`'s data: the title HTML-escaped, the data as
    :func:`embed_json` in its one place (no text of either is searched for markers again)."""
    title = data["title"].replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    page, tail = PAGE.split("@@DATA@@")
    return page.replace("@@TITLE@@", title) + embed_json(data) + tail


def timeline_png(row: dict, path: Path, width: int = 800, height: int = 68) -> Path:
    """A row's timeline as a small PNG (PIL; the W&B Table's image): windows, targets, the curve
    and the fires in the page's colours, over a seconds axis (the bottom 12 px)."""
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (width, height), "white")
    d = ImageDraw.Draw(img)
    dur = max(row["dur"], 1e-9)

    def x(t: float) -> int:
        return int(round(min(max(t / dur, 0.0), 1.0) * (width - 1)))

    _png_axis(d, x, row, width, height)
    height -= 12
    for t in row["targets"]:
        if t["w"]:
            d.rectangle(
                [x(t["w"][0]), 4, max(x(t["w"][1]), x(t["w"][0]) + 1), height - 4], fill=WINDOW_COLOUR
            )
    curve = row["curve"]
    if curve:
        pts = [
            (
                int(i * (width - 1) / max(1, len(curve) - 1)),
                int(height - 4 - LEVELS.index(c) / 63 * (height - 8)),
            )
            for i, c in enumerate(curve)
        ]
        d.line(pts, fill="#6baed6", width=1)
    for t in row["targets"]:
        d.line(
            [x(t["t"]), 2, x(t["t"]), height - 2],
            fill=COLOURS["missed"] if t["o"] == "missed" else TARGET_COLOUR,
            width=2,
        )
    for f in row["fires"]:
        cx = x(f["t"])
        d.polygon([(cx - 4, 2), (cx + 4, 2), (cx, 12)], fill=COLOURS[f["o"]])
    with atomic_writer(path, "wb") as fh:  # whole or not at all
        img.save(fh, format="PNG")
    return path


def _png_axis(d, x, row: dict, width: int, height: int) -> None:
    """The seconds axis of :func:`timeline_png`: a tick and its label every :func:`tick_step`."""
    step = row.get("tick") or tick_step(row["dur"])
    base = height - 12
    d.line([0, base, width - 1, base], fill="#999999")
    k = 0
    while k * step <= row["dur"] + 1e-9:
        cx = x(k * step)
        d.line([cx, base, cx, base + 3], fill="#999999")
        label = f"{k * step:g} s"
        d.text((min(cx + 2, width - 6 * len(label)), base + 1), label, fill="#555555")
        k += 1


TABLE_COLUMNS = ["id", "task", "category", "fires", *FIRE_OUTCOMES, "targets", "missed", "timeline"]


def table_rows(vrows: list[dict], out_dir: Path) -> list[list]:
    """The W&B Table rows (:data:`TABLE_COLUMNS`), worst first; the last cell is the timeline PNG's
    path (``<out_dir>/view_timelines/<id>.png``), which the W&B logger turns into an image."""
    ordered = sorted(vrows, key=lambda r: (-r["bad"], r["id"]))
    return [
        [
            r["id"],
            r["task"],
            ", ".join(r["cats"]),
            len(r["fires"]),
            *(r["counts"].get(o, 0) for o in FIRE_OUTCOMES),
            len(r["targets"]),
            r["missed"],
            timeline_png(r, out_dir / "view_timelines" / f"{id_file_name(r['id'])}.png"),
        ]
        for r in ordered
    ]


def write_view(
    out_dir: str | Path,
    html: str | Path | None = None,
    thumbs: int = DEFAULT_THUMBNAILS,
    tracker: Any = None,
    name: str | None = None,
) -> dict:
    """Write the page (default ``<out_dir>/view.html``) and, with a ``tracker``
    (``infra.tracking``), log the rows as the W&B Table ``name``; returns the figures printed."""
    out_dir = Path(out_dir)
    data, vrows = build_view(out_dir, thumbs)
    path = Path(html) if html else out_dir / "view.html"
    text = render_html(data)
    write_text_atomic(path, text)
    if tracker is not None and tracker.active:
        tracker.log_table(
            name or f"eval/{data['protocol']}/streams", TABLE_COLUMNS, table_rows(vrows, out_dir)
        )
    no_thumbs = {r["id"]: r["no_thumbs"] for r in vrows if r["no_thumbs"]}
    return {
        "html": str(path),
        "streams": len(vrows),
        "fires": sum(len(r["fires"]) for r in vrows),
        "bytes": len(text.encode()),
        "without_thumbnails": len(no_thumbs),
        "without_thumbnails_why": dict(list(no_thumbs.items())[:5]),
    }


USAGE = "usage: python -m eval.app.view out_dir=DIR [html=PATH] [thumbnails=N]"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv in (["--help"], ["-h"]):
        print(USAGE)
        return 0
    args = dict(a.split("=", 1) for a in argv if "=" in a)
    unknown = set(args) - {"out_dir", "html", "thumbnails"}
    bad = [a for a in argv if "=" not in a]
    if "out_dir" not in args or unknown or bad:
        print(USAGE, file=sys.stderr)
        return 2
    try:
        figures = write_view(
            args["out_dir"], args.get("html"), int(args.get("thumbnails", DEFAULT_THUMBNAILS))
        )
    except (RecordError, ValueError, FileNotFoundError) as exc:
        print(f"eval.app.view: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(figures))
    return 0


PAGE = r"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>@@TITLE@@</title>
<style>
body{font:13px/1.4 system-ui,sans-serif;margin:12px;color:#222}
h1{font-size:16px;margin:0 0 8px}
#headline{margin:0 0 8px}#headline .big{font-size:20px;margin-right:8px}
#tasks{margin-bottom:8px}details{margin-bottom:8px}summary{cursor:pointer;color:#555}
table.m{border-collapse:collapse}
.kvs{display:flex;flex-wrap:wrap;gap:4px 14px;margin-bottom:8px}.kv{white-space:nowrap}
.tabs{display:flex;flex-wrap:wrap;gap:12px;align-items:flex-start;margin-bottom:8px}
table.m td,table.m th{border:1px solid #ddd;padding:2px 6px;text-align:right}
table.m th{background:#f4f4f4}table.m td:first-child{text-align:left}
#bar{position:sticky;top:0;background:#fff;padding:6px 0;border-bottom:1px solid #ccc;z-index:2}
#bar select,#bar input{margin-right:8px}
.legend span{display:inline-block;margin-right:10px}
.legend i{display:inline-block;width:10px;height:10px;margin-right:3px;vertical-align:middle}
.row{border-bottom:1px solid #eee;padding:4px 0;cursor:pointer}
.row .h{display:flex;gap:10px;white-space:nowrap;overflow:hidden}
.row .id{font-family:monospace;font-weight:600;min-width:220px;overflow:hidden;text-overflow:ellipsis}
.row canvas{width:100%;height:60px;display:block}
.det{display:none;padding:4px 0 8px 12px}.row.open .det{display:block}
.fire{display:flex;gap:8px;align-items:center;margin:2px 0}
.fire img{height:54px;border:1px solid #ccc}
.tag{padding:0 4px;border-radius:3px;color:#fff;font-size:11px}
#tip{position:fixed;pointer-events:none;background:#222;color:#fff;padding:4px 6px;border-radius:4px;max-width:420px;display:none;z-index:3}
</style></head><body>
<h1>@@TITLE@@</h1>
<div id="headline"></div>
<div id="tasks"></div>
<details id="every"><summary>every metric of metrics.json</summary><div id="metrics"></div></details>
<div id="bar">
<label>task <select id="f-task"></select></label>
<label>outcome <select id="f-outcome"></select></label>
<label>category <select id="f-cat"></select></label>
<label>id <input id="f-id" size="18"></label>
<label>sort <select id="f-sort"><option value="worst">worst first</option><option value="id">id</option><option value="fires">most fires</option></select></label>
<span id="count"></span>
<div class="legend" id="legend"></div>
</div>
<div id="rows"></div>
<div id="tip"></div>
<script type="application/json" id="data">@@DATA@@</script>
<script>
(function(){
const D=JSON.parse(document.getElementById('data').textContent);
const C=D.colours, LV="0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyz{|}~";
const $=id=>document.getElementById(id);
function esc(s){return String(s==null?'':s).replace(/[&<>"]/g,c=>({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;'}[c]));}
function fmt(v){return typeof v==='number'?(Number.isInteger(v)?v:v.toFixed(1)):esc(v);}
function word(k){return D.words[k]||k.replace('_',' ');}
// the headline metric with the clips behind it, then the per-task table eval.run prints
(function(){
  const h=D.headline,c=D.clips;
  $('headline').innerHTML=(h?'<span class="big">'+esc(h.key)+' <b>'+fmt(h.value)+'</b></span>'+esc(h.words)+'<br>':'')+
    c.clips+' clips: '+c.with_targets+' with targets, '+c.negatives+' negatives; threshold '+D.threshold;
  const T=D.table;if(!T.columns.length)return;
  $('tasks').innerHTML='<table class="m" id="per-task"><tr>'+T.columns.map(k=>'<th>'+esc(k)+'</th>').join('')+'</tr>'+
    T.rows.map(r=>'<tr>'+r.map(v=>'<td>'+(v==null?'':fmt(v))+'</td>').join('')+'</tr>').join('')+'</table>';
})();
// metrics: top-level numbers, then one table per nested block of numbers
(function(){
  const m=D.metrics, flat=[], blocks=[];
  for(const [k,v] of Object.entries(m)){
    if(typeof v!=='object'||v===null){flat.push([k,v]);continue;}
    const rows=Object.entries(v).filter(([,x])=>x&&typeof x==='object'&&!Array.isArray(x));
    const nums=Object.entries(v).filter(([,x])=>typeof x==='number');
    if(nums.length)flat.push(...nums.map(([a,b])=>[k+'/'+a,b]));
    if(rows.length)blocks.push([k,rows]);
  }
  let h='<div class="kvs">'+flat.map(([k,v])=>'<span class="kv" data-key="'+esc(k)+'">'+esc(D.words[k]||k)+' <b>'+fmt(v)+'</b></span>').join('')+'</div><div class="tabs">';
  for(const [k,rows] of blocks){
    const cols=[...new Set(rows.flatMap(([,x])=>Object.keys(x).filter(c=>typeof x[c]!=='object')))];
    if(!cols.length)continue;
    h+='<table class="m"><tr><th>'+esc(k)+'</th>'+cols.map(c=>'<th>'+esc(c)+'</th>').join('')+'</tr>'+
      rows.map(([n,x])=>'<tr><td>'+esc(n)+'</td>'+cols.map(c=>'<td>'+fmt(x[c])+'</td>').join('')+'</tr>').join('')+'</table>';
  }
  h+='</div>';
  $('metrics').innerHTML=h;
})();
const R=D.rows;
function opts(sel,vals){sel.innerHTML='<option value="">all</option>'+vals.map(v=>'<option>'+esc(v)+'</option>').join('');}
opts($('f-task'),[...new Set(R.map(r=>r.task))].sort());
opts($('f-outcome'),D.outcomes.filter(o=>R.some(r=>o==='missed'?r.missed:r.counts[o])));
opts($('f-cat'),[...new Set(R.flatMap(r=>r.cats))].sort());
$('legend').innerHTML=D.outcomes.map(o=>'<span data-outcome="'+o+'"><i style="background:'+C[o]+'"></i>'+esc(word(o))+' <b id="n-'+o+'"></b></span>').join('')+
  '<span><i style="background:'+C.target+'"></i>target</span><span><i style="background:'+C.window+'"></i>target window</span><span><i style="background:#6baed6"></i>P(response), threshold '+D.threshold+'</span>';
const tip=$('tip');
function draw(cv,r){
  const w=cv.clientWidth||800,H=60,h=46,dpr=window.devicePixelRatio||1;
  cv.width=w*dpr;cv.height=H*dpr;const g=cv.getContext('2d');g.scale(dpr,dpr);
  const dur=Math.max(r.dur,1e-9),X=t=>Math.min(Math.max(t/dur,0),1)*(w-1);
  g.fillStyle='#fafafa';g.fillRect(0,0,w,h);
  for(const t of r.targets)if(t.w){g.fillStyle=C.window;g.fillRect(X(t.w[0]),0,Math.max(2,X(t.w[1])-X(t.w[0])),h);}
  axis(g,r,X,w,h);
  const y=v=>h-3-v*(h-16);
  g.strokeStyle='#bbb';g.setLineDash([3,3]);g.beginPath();g.moveTo(0,y(D.threshold));g.lineTo(w,y(D.threshold));g.stroke();g.setLineDash([]);
  if(r.curve.length){g.strokeStyle='#6baed6';g.beginPath();const n=r.curve.length;
    for(let i=0;i<n;i++){const px=X((i/n)*(r.steps/r.sps||dur)),py=y(LV.indexOf(r.curve[i])/63);i?g.lineTo(px,py):g.moveTo(px,py);}g.stroke();}
  for(const t of r.targets){g.strokeStyle=t.o==='missed'?C.missed:C.target;g.lineWidth=2;g.beginPath();g.moveTo(X(t.t),0);g.lineTo(X(t.t),h);g.stroke();g.lineWidth=1;}
  for(const f of r.fires){const x=X(f.t);g.fillStyle=C[f.o];g.beginPath();g.moveTo(x-4,1);g.lineTo(x+4,1);g.lineTo(x,11);g.fill();}
  cv._x=X;
}
// the seconds axis under a timeline: a tick and its label every r.tick seconds (view.tick_step)
function axis(g,r,X,w,h){const ticks=[];g.strokeStyle='#999';g.fillStyle='#555';g.font='10px system-ui,sans-serif';
  g.beginPath();g.moveTo(0,h+0.5);g.lineTo(w,h+0.5);g.stroke();
  for(let k=0;k*r.tick<=r.dur+1e-9;k++){const t=k*r.tick,x=Math.round(X(t))+0.5,l=t+' s';ticks.push(t);
    g.beginPath();g.moveTo(x,h);g.lineTo(x,h+3);g.stroke();g.fillText(l,Math.min(x+2,w-g.measureText(l).width-1),h+12);}
  g.canvas.dataset.ticks=ticks.join(',');}
const io=new IntersectionObserver(es=>{for(const e of es)if(e.isIntersecting){const cv=e.target;io.unobserve(cv);draw(cv,cv._r);}});
function fireAt(cv,r,ev){const b=cv.getBoundingClientRect(),x=ev.clientX-b.left;let best=null,bd=6;
  for(const f of r.fires){const d=Math.abs(cv._x(f.t)-x);if(d<bd){bd=d;best=f;}}return best;}
function detail(r){
  let h='';
  for(const f of r.fires)h+='<div class="fire">'+(f.img?'<img src="'+f.img+'">':'')+'<span class="tag" style="background:'+C[f.o]+'">'+f.o.replace('_',' ')+'</span> '+
    '<b>'+f.t.toFixed(1)+' s</b>'+(f.c?' ['+esc(f.c)+']':'')+' '+esc(f.x)+(f.s!=null?' <i>(score '+f.s+')</i>':'')+'</div>';
  for(const t of r.targets)h+='<div class="fire"><span class="tag" style="background:'+(t.o==='missed'?C.missed:C.target)+'">target '+esc(t.o)+'</span> <b>'+t.t.toFixed(1)+' s</b>'+
    (t.w?' window '+t.w[0].toFixed(1)+'-'+t.w[1].toFixed(1)+' s':'')+(t.c?' ['+esc(t.c)+']':'')+' '+esc(t.x)+'</div>';
  if(r.no_thumbs)h+='<div>no thumbnails: '+esc(r.no_thumbs)+'</div>';
  const s=Object.entries(r.sample).filter(([k])=>k!=='id');
  if(s.length)h+='<div>per sample: '+s.map(([k,v])=>esc(k)+' '+(typeof v==='object'?esc(JSON.stringify(v)):fmt(v))).join(', ')+'</div>';
  return h;
}
function show(){
  const ft=$('f-task').value,fo=$('f-outcome').value,fc=$('f-cat').value,fi=$('f-id').value.toLowerCase(),so=$('f-sort').value;
  let rs=R.filter(r=>(!ft||r.task===ft)&&(!fc||r.cats.includes(fc))&&(!fi||r.id.toLowerCase().includes(fi))&&(!fo||(fo==='missed'?r.missed>0:r.counts[fo]>0)));
  if(so==='worst')rs.sort((a,b)=>b.bad-a.bad||(a.id<b.id?-1:1));else if(so==='fires')rs.sort((a,b)=>b.fires.length-a.fires.length||(a.id<b.id?-1:1));else rs.sort((a,b)=>a.id<b.id?-1:1);
  const box=$('rows');box.textContent='';io.disconnect();
  const tot={};for(const o of D.outcomes)tot[o]=0;let nf=0;
  for(const r of rs){nf+=r.fires.length;for(const f of r.fires)tot[f.o]++;tot.missed+=r.missed;
    const d=document.createElement('div');d.className='row';d.dataset.id=r.id;d.dataset.fires=r.fires.length;
    d.innerHTML='<div class="h"><span class="id" title="'+esc(r.id)+'">'+esc(r.id)+'</span><span>'+esc(r.task)+'</span><span>'+esc(r.cats.join(', '))+'</span><span>'+r.fires.length+' fires, '+r.targets.length+' targets'+(r.missed?', '+r.missed+' missed':'')+'</span><span>'+r.dur.toFixed(0)+' s</span></div><canvas></canvas><div class="det"></div>';
    const cv=d.querySelector('canvas');cv._r=r;io.observe(cv);
    cv.addEventListener('mousemove',ev=>{const f=fireAt(cv,r,ev);if(!f){tip.style.display='none';return;}
      tip.innerHTML='<b>'+f.t.toFixed(1)+' s</b> '+f.o.replace('_',' ')+(f.c?' ['+esc(f.c)+']':'')+'<br>'+esc(f.x);tip.style.display='block';tip.style.left=(ev.clientX+12)+'px';tip.style.top=(ev.clientY+12)+'px';});
    cv.addEventListener('mouseleave',()=>{tip.style.display='none';});
    d.addEventListener('click',()=>{const det=d.querySelector('.det');if(!d.classList.contains('open'))det.innerHTML=detail(r);d.classList.toggle('open');});
    box.appendChild(d);}
  for(const o of D.outcomes){const e=$('n-'+o);if(e)e.textContent=tot[o];}
  $('count').textContent=rs.length+' of '+R.length+' streams, '+nf+' fires';
  document.body.dataset.shown=rs.length;document.body.dataset.fires=nf;
}
for(const id of ['f-task','f-outcome','f-cat','f-sort'])$(id).addEventListener('change',show);
$('f-id').addEventListener('input',show);
show();
document.body.dataset.ready='1';
})();
</script></body></html>
"""


if __name__ == "__main__":
    sys.exit(main())
