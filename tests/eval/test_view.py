"""eval.app.view: the page of a real toy eval.run, opened in headless Chromium (Debian's, driven by
Playwright), its rows, fires and outcome counts against predictions.jsonl and the scorer; a filter;
a screenshot. And a synthetic 1,000-stream run: the file's size and the page's load time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from benchmarks.config import BenchmarkConfig
from benchmarks.runners import get_runner
from data_builders.record_io import load_streams, write_jsonl
from data_builders.records import Stream, Target
from data_builders.synthetic.toy import generate_toy
from eval.app.view import CURVE_BINS, embed_json, main, render_html
from eval.run import evaluate, load_config
from eval.store import PredictionLog

ROOT = Path(__file__).resolve().parents[2]

FIRING = 0.47  # the untrained tiny model fires on about half the steps (tests/eval/test_run.py)


def open_page(browser, html: Path):
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    start = time.perf_counter()
    page.goto(html.as_uri())
    page.wait_for_selector("body[data-ready='1']")
    return page, errors, time.perf_counter() - start


def shown(page) -> tuple[int, int]:
    return tuple(int(x) for x in page.eval_on_selector("body", "b => [b.dataset.shown, b.dataset.fires]"))


def test_toy_run_page_in_chromium(tiny_checkpoint, toy_dir, tmp_path, browser):
    out = tmp_path / "out"
    cfg = load_config(
        [
            f"checkpoint={tiny_checkpoint}",
            f"records={toy_dir / 'records.jsonl'}",
            f"paths.cache_dir={tmp_path / 'cache'}",
            f"paths.runs_dir={tmp_path / 'runs'}",
            "render.max_pixels=4096",
            "max_new_tokens=6",
            f"threshold={FIRING}",
            f"out_dir={out}",
            "limit=4",
        ]
    )
    evaluate(cfg, echo=False)
    html = out / "view.html"
    assert html.is_file()  # eval.run writes it by default, next to metrics.json
    rows = PredictionLog(out / "predictions.jsonl").rows()
    streams = load_streams(toy_dir / "records.jsonl")[:4]
    outcomes = get_runner("p3i").outcomes(streams, rows, BenchmarkConfig())
    want = Counter(f.outcome for o in outcomes.values() for f in o.fires)
    missed = sum(o.targets.count("missed") for o in outcomes.values())
    n_fires = sum(len(r["replies"]) for r in rows)
    assert 10 < n_fires and len(want) >= 2  # the toy run fires, with more than one outcome

    page, errors, _ = open_page(browser, html)
    assert errors == []
    assert shown(page) == (len(rows), n_fires)
    assert page.locator(".row").count() == len(rows)
    ids = page.eval_on_selector_all(".row", "rs => rs.map(r => r.dataset.id)")
    assert sorted(ids) == sorted(r["id"] for r in rows)
    assert (
        sum(int(x) for x in page.eval_on_selector_all(".row", "rs => rs.map(r => r.dataset.fires)"))
        == n_fires
    )
    for word in ("hit", "early", "redundant", "false_alarm", "wrong"):
        assert page.inner_text(f"#n-{word}") == str(want.get(word, 0))
    assert page.inner_text("#n-missed") == str(missed)
    # worst first: the first row has the most fires that are not hits plus missed targets
    bad = {
        i: len(o.fires) - [f.outcome for f in o.fires].count("hit") + o.targets.count("missed")
        for i, o in outcomes.items()
    }
    assert bad[ids[0]] == max(bad.values())

    # a filter: one task, then one outcome
    task = streams[0].task
    page.select_option("#f-task", task)
    by_task = [r for r in rows if next(s for s in streams if s.id == r["id"]).task == task]
    assert shown(page) == (len(by_task), sum(len(r["replies"]) for r in by_task))
    page.select_option("#f-task", "")
    page.select_option("#f-outcome", "false_alarm")
    with_fa = [i for i, o in outcomes.items() if any(f.outcome == "false_alarm" for f in o.fires)]
    assert shown(page)[0] == len(with_fa) == page.locator(".row").count()
    page.select_option("#f-outcome", "")

    # a row opened: its replies, times and texts as predictions.jsonl has them, thumbnails inline
    first = page.locator(".row").first
    first.click()
    row = next(r for r in rows if r["id"] == ids[0])
    lines = first.locator(".det .fire").all_inner_texts()[: len(row["replies"])]
    for line, reply in zip(lines, row["replies"], strict=True):
        assert f"{reply['time']:.1f} s" in line and reply["text"][:40] in line
    src = first.locator(".det img").first.get_attribute("src")
    assert src.startswith("data:image/jpeg;base64,")
    assert "http" not in html.read_text().split('id="data"')[0]  # nothing fetched from outside
    shot = tmp_path / "view.png"
    page.screenshot(path=str(shot))
    assert shot.stat().st_size > 10_000
    page.close()


def synthetic_run(root: Path, n: int, long_steps: int = 28_800) -> Path:
    """An eval.run folder of ``n`` streams on four toy videos (no model: rows drawn by a seeded
    rule), plus one EgoServe-day-long stream of ``long_steps`` steps whose video is absent."""
    import random

    base = generate_toy(root / "toy", n=4, seed=1, negative_share=0.0)
    rng = random.Random(0)
    streams, rows = [], []
    for i in range(n):
        b = base[i % 4]
        t = float(rng.randint(2, 17))
        s = Stream(
            id=f"syn-{i:04d}",
            source="toy",
            task=b.task,
            video=str(root / "toy" / b.video),
            clip_start=0.0,
            clip_end=20.0,
            instruction=b.instruction,
            targets=[Target(time=t, content="A red square appeared.", window=(t, t + 3))] if i % 5 else [],
        )
        p = [min(1.0, max(0.0, 0.3 + 0.6 * (abs(k - t) < 2) + rng.uniform(-0.2, 0.2))) for k in range(20)]
        streams.append(s)
        rows.append(_row(s.id, p, rng))
    long = Stream(
        id="syn-day",
        source="toy",
        task="event_monitoring",
        video=str(root / "absent.mp4"),
        clip_start=0.0,
        clip_end=float(long_steps),
        instruction="Tell me when something happens.",
        targets=[
            Target(time=float(k), content="Now.", window=(float(k), k + 30.0))
            for k in range(600, long_steps, 3600)
        ],
    )
    streams.append(long)
    rows.append(_row(long.id, [rng.random() ** 8 for _ in range(long_steps)], rng))
    run = root / "run"
    run.mkdir()
    write_jsonl(root / "records.jsonl", [s.to_dict() for s in streams])
    write_jsonl(run / "predictions.jsonl", rows)
    (run / "metrics.json").write_text(json.dumps({"protocol": "p3i", "prs_u": 12.5}))
    (run / "config.yaml").write_text(
        f"records: {root / 'records.jsonl'}\nthreshold: 0.5\ncheckpoint: null\nvideo_root: null\n"
        "model: {name: synthetic}\nbenchmark: {name: p3i, protocol: p3i}\n"
    )
    return run


def _row(sid: str, p: list[float], rng) -> dict:
    fired = [int(x >= 0.5) for x in p]
    replies = [
        {"time": float(k), "text": "A red square appeared.", "category": None}
        for k, f in enumerate(fired)
        if f
    ]
    return {"id": sid, "replies": replies, "p_response": p, "fired": fired}


def test_thousand_streams_size_and_load_time(tmp_path, browser, capsys):
    """1,000 streams of 20 s with thumbnails, and one 28,800-step day: the file stays under 12 MB
    and the page is ready in well under 10 s."""
    run = synthetic_run(tmp_path, 1000)
    start = time.perf_counter()
    assert main([f"out_dir={run}"]) == 0
    build_s = time.perf_counter() - start
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert figures["streams"] == 1001
    assert figures["without_thumbnails"] == 1 and "syn-day" in figures["without_thumbnails_why"]
    page, errors, load_s = open_page(browser, run / "view.html")
    assert errors == [] and shown(page)[0] == 1001
    page.fill("#f-id", "syn-day")
    assert shown(page)[0] == 1
    assert figures["bytes"] < 12 * 2**20 and load_s < 10.0
    print(
        json.dumps(
            {
                "bytes": figures["bytes"],
                "build_s": round(build_s, 1),
                "load_s": round(load_s, 2),
                "curve_bins": CURVE_BINS,
            }
        )
    )
    page.close()


def test_bad_folder_is_a_clear_error(tmp_path, capsys):
    assert main([f"out_dir={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert "no config.yaml: not an eval.run folder" in err and str(tmp_path) in err
    (tmp_path / "config.yaml").write_text("records: x\nthreshold: 0.5\nbenchmark: {name: p3i}\n")
    (tmp_path / "predictions.jsonl").write_text("")
    assert main([f"out_dir={tmp_path}"]) == 2
    assert "no predictions" in capsys.readouterr().err
    assert main(["outdir=x"]) == 2 and "usage" in capsys.readouterr().err
    assert main(["--help"]) == 0 and capsys.readouterr().out.startswith(
        "usage: python -m eval.app.view out_dir=DIR"
    )


HOSTILE = ("<!--<script>", "</script><script>alert(1)</script>", "a & b > c", "\u2028")


def test_embedded_json_holds_no_markup_and_parses_back():
    data = {"x": "".join(HOSTILE), "y": ["</SCRIPT>", "<!--"]}
    blob = embed_json(data)
    assert not set(blob) & set("<>&\u2028\u2029")
    assert json.loads(blob) == data
    page = render_html({"title": "@@DATA@@ </title>", "rows": [], **data})
    assert page.count("</script>") == 2 and page.count("<script") == 2  # the page's own two
    assert "<title>@@DATA@@ &lt;/title&gt;</title>" in page and page.count("@@DATA@@") == 3  # title, h1, data


def _run_view(run: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "eval.app.view", f"out_dir={run}", "thumbnails=0"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **env},
        check=False,
    )


def test_markup_in_replies_and_targets_cannot_blank_the_page(tmp_path, browser):
    """A reply, a target and an id holding ``<!--<script>`` and ``</script><script>``: every row
    still renders, no script of the data runs, and the texts show as text."""
    run = synthetic_run(tmp_path, 3, long_steps=40)
    rows = PredictionLog(run / "predictions.jsonl").rows()
    for k, row in enumerate(rows):
        for reply in row["replies"]:
            reply["text"] = HOSTILE[k % 2] + " reply"
    write_jsonl(run / "predictions.jsonl", rows)
    records = [s.to_dict() for s in load_streams(tmp_path / "records.jsonl")]
    for rec in records:
        rec["instruction"] = HOSTILE[0] + rec["instruction"]
        for t in rec["targets"]:
            t["content"] = HOSTILE[1]
    write_jsonl(tmp_path / "records.jsonl", records)
    done = _run_view(run)
    assert done.returncode == 0, done.stderr
    page, errors, _ = open_page(browser, run / "view.html")
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    assert errors == [] and shown(page)[0] == 4 and dialogs == []
    for k in range(4):
        page.locator(".row .h").nth(k).click()
    text = page.locator("#rows").inner_text()
    assert f"{HOSTILE[0]} reply" in text and f"{HOSTILE[1]} reply" in text  # shown as text
    replies = sum(len(row["replies"]) for k, row in enumerate(rows) if k % 2)
    targets = sum(len(rec["targets"]) for rec in records)
    assert targets == 2 and text.count(HOSTILE[1]) == replies + targets  # every reply and target
    page.close()


def test_a_run_folder_is_read_without_interpolation(tmp_path):
    """``${oc.env:...}`` in someone else's config.yaml stays that text in the page, never the value."""
    run = synthetic_run(tmp_path, 2, long_steps=40)
    saved = run / "config.yaml"
    text = saved.read_text().replace("checkpoint: null", "checkpoint: ${oc.env:VIEW_SECRET}")
    saved.write_text(text.replace("name: p3i,", "name: '${oc.env:VIEW_SECRET}',"))
    done = _run_view(run, VIEW_SECRET="s3cr3t-value")
    assert done.returncode == 0, done.stderr
    page = (run / "view.html").read_text()
    assert "s3cr3t-value" not in page + done.stdout + done.stderr
    assert "<title>${oc.env:VIEW_SECRET} on ${oc.env:VIEW_SECRET}</title>" in page


def test_predictions_of_records_changed_since_are_not_shown(tmp_path, capsys):
    """A records file rebuilt after the evaluation (same id, new target): the page would score old
    replies against new targets, so ``eval.app.view`` refuses, naming the file and the record."""
    from eval.provenance import RECORD_FIELD, record_fingerprint

    run = synthetic_run(tmp_path, 3, long_steps=40)
    streams = {s.id: s for s in load_streams(tmp_path / "records.jsonl")}
    rows = PredictionLog(run / "predictions.jsonl").rows()
    write_jsonl(
        run / "predictions.jsonl", [r | {RECORD_FIELD: record_fingerprint(streams[r["id"]])} for r in rows]
    )
    assert main([f"out_dir={run}", "thumbnails=0"]) == 0
    records = [s.to_dict() for s in streams.values()]
    records[1]["targets"][0]["time"] = 3.0
    write_jsonl(tmp_path / "records.jsonl", records)
    capsys.readouterr()
    assert main([f"out_dir={run}", "thumbnails=0"]) == 2
    err = capsys.readouterr().err
    assert f"file {tmp_path / 'records.jsonl'}" in err and "1 record(s) changed since" in err
    assert f"(first: {records[1]['id']})" in err


def test_header_leads_with_the_headline_and_timelines_have_axes_and_target_colours(tmp_path, browser):
    """The header: the headline metric with its clips, the per-task table, the two redundancy counts
    named apart; each timeline: a seconds axis, targets in a colour no outcome has."""
    from eval.app.view import COLOURS, TARGET_COLOUR, WORDS, tick_step

    run = synthetic_run(tmp_path, 12, long_steps=300)
    metrics = {
        "protocol": "p3i",
        "prs_b": 20.0,
        "redundant_replies": 6,
        "with_negatives": {"prs_u": 30.0, "prs_b": 31.4, "per_task": {"event_monitoring": {"prs_b": 31.4}}},
        "per_task": {
            "event_monitoring": {"prs_u": 12.5, "prs_b": 20.0, "prs_u_prime": 1.0, "prs_b_prime": 2.0}
        },
        "n": {"event_monitoring": 10},
        "negatives": {"n": 4, "silent": 0.0},
    }
    (run / "metrics.json").write_text(json.dumps(metrics))
    assert main([f"out_dir={run}", "thumbnails=0"]) == 0
    page, errors, _ = open_page(browser, run / "view.html")
    assert errors == []
    head = page.inner_text("#headline")
    assert head.startswith("with_negatives/prs_b 31.4") and "PRS-B, each negative counted" in head
    assert "13 clips: 9 with targets, 4 negatives; threshold 0.5" in head  # 1 in 5 synthetic rows has none
    table = page.eval_on_selector_all("#per-task tr", "rs => rs.map(r => r.innerText.split('\\t'))")
    assert table[0][:3] == ["task", "n", "with_negatives/prs_b"]
    assert table[1][:5] == ["event_monitoring", "10", "31.4", "12.5", "20"]
    assert table[2][0] == "negatives" and table[2][-1] == "0"
    # the two redundancy counts carry two names
    page.click("#every summary")
    assert page.inner_text("[data-key='redundant_replies']") == WORDS["redundant_replies"] + " 6"
    legend = page.inner_text("[data-outcome='redundant']")
    assert legend.startswith("redundant (another reply to a target already answered, PRS-U matching)")
    # a seconds axis under each timeline, ticks every tick_step seconds
    ticks = dict(
        page.eval_on_selector_all(
            ".row", "rs => rs.map(r => [r.dataset.id, r.querySelector('canvas').dataset.ticks])"
        )
    )
    assert ticks["syn-day"] == ",".join(str(k * tick_step(300)) for k in range(6)) == "0,60,120,180,240,300"
    assert ticks["syn-0001"] == "0,5,10,15,20"
    # a target's line is drawn in the target colour, not a hit's green
    assert TARGET_COLOUR not in COLOURS.values()
    rgb = page.evaluate(
        """() => { const row = [...document.querySelectorAll('.row')].find(r => r.dataset.id === 'syn-0001');
        const cv = row.querySelector('canvas'), t = cv._r.targets[0], d = window.devicePixelRatio || 1;
        const px = cv.getContext('2d').getImageData(Math.floor(cv._x(t.t) * d), 30 * d, 1, 1).data;
        return [px[0], px[1], px[2]]; }"""
    )
    assert "#" + "".join(f"{c:02x}" for c in rgb) == TARGET_COLOUR
    page.close()
