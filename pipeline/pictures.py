"""The README's two pictures, taken from a trained checkpoint: ``docs/view.png`` (the viewer of its
evaluation) and ``docs/app.png`` (the live demo streaming a record it answers once, on time).

    python -m pipeline.pictures            (or: make pictures; after make demo, whose SFT checkpoint it takes)
    python -m pipeline.pictures checkpoint=runs/toy_sft/final records=data/toy/test/records.jsonl out=/tmp/pics

1. Evaluate the checkpoint on the records (``eval.run``, into ``<runs>/pictures/<checkpoint name>/``,
   resumable), which writes the viewer page ``view.html``.
2. Open that page in headless Chromium (Debian's ``/usr/bin/chromium``, driven by Playwright) and
   save its first screen as ``<out>/view.png``.
3. Pick the demo's record (:func:`pick_record`): one whose replies are a single hit, else the one
   with the most hits and the fewest other replies.
4. Serve the demo (``eval.app.server``, 127.0.0.1, a free port) with the checkpoint and the records,
   stream that record in the page and save it once the stream ends as ``<out>/app.png``.

Defaults: ``make demo``'s SFT checkpoint (``runs/demo/sft/final``) and test records
(``runs/demo/data/toy/test/records.jsonl``), ``out=docs``. Any other ``key=value`` is an ``eval.run``
override, used by the evaluation and the demo alike (e.g. ``threshold=0.4``). A missing checkpoint,
records file or Chromium is one line (exit 2). Prints one JSON line: the two files, their bytes, the
record and its replies' outcomes.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from benchmarks.runners import get_runner
from data_builders.records import RecordError
from data_builders.splits import RECORDS_JSONL
from eval.app.view import load_run

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
DEFAULTS = {
    "checkpoint": "runs/demo/sft/final",
    "records": f"runs/demo/data/toy/test/{RECORDS_JSONL}",
    "out": "docs",
}
#: The browser window the pictures are taken in (CSS pixels).
VIEW_SIZE = {"width": 1100, "height": 900}
APP_SIZE = {"width": 1100, "height": 620}
USAGE = (
    "usage: python -m pipeline.pictures [checkpoint=DIR] [records=FILE] [out=DIR] [runs=DIR] "
    "[eval.run overrides, e.g. threshold=0.4]"
)


def pick_record(out_dir: Path) -> tuple[str, list[str]]:
    """The id of the evaluated record the demo shows, and its replies' outcomes: the first (by id) with
    targets whose replies are one ``hit``; else the most hits less other replies (ties: by id)."""
    _, bench, streams, rows, _ = load_run(out_dir)
    outcomes = get_runner(bench.protocol).outcomes(streams, rows, bench)
    with_targets = sorted(s.id for s in streams if s.targets)
    if not with_targets:
        raise RecordError("no record with targets to show", file=out_dir / "gt.jsonl")
    words = {i: [f.outcome for f in outcomes[i].fires] for i in with_targets}
    once = [i for i in with_targets if words[i] == ["hit"]]
    if once:
        return once[0], words[once[0]]
    best = max(with_targets, key=lambda i: 2 * words[i].count("hit") - len(words[i]))  # the first of ties
    return best, words[best]


def evaluate_for_pictures(checkpoint: str, records: str, runs: Path, extra: list[str]) -> Path:
    """Step 1: the evaluation folder of ``checkpoint`` on ``records`` (``view.html`` in it)."""
    from eval.run import evaluate, evaluated_name, load_config

    base = [f"records={records}", f"checkpoint={checkpoint}", "logger=none", *extra]
    out = runs / "pictures" / evaluated_name(load_config(base))
    evaluate(load_config([*base, f"out_dir={out}", "timelines=0"]), echo=False)
    return out


def _shot(page, path: Path) -> int:
    """Save the page's window as ``path`` (whole or not at all); its bytes."""
    tmp = path.with_name(f".{path.stem}.tmp.png")
    page.screenshot(path=str(tmp), type="png")
    os.replace(tmp, path)
    return path.stat().st_size


def shoot_view(browser, out_dir: Path, path: Path) -> int:
    """Step 2: the viewer page's first screen as ``path``."""
    page = browser.new_page(viewport=VIEW_SIZE)
    page.goto((out_dir / "view.html").resolve().as_uri())
    page.wait_for_selector("body[data-ready='1']")
    page.wait_for_function(
        "[...document.querySelectorAll('.row canvas')].slice(0, 3).every(c => c.dataset.ticks)"
    )
    size = _shot(page, path)
    page.close()
    return size


def shoot_app(browser, overrides: list[str], record: str, path: Path) -> int:
    """Step 4: the demo streaming ``record`` to its end, as ``path``."""
    from eval.app.server import AppConfig, Demo, serve

    demo = Demo(overrides)
    server = serve(demo, AppConfig(port=0, send_timeout_s=30.0))
    try:
        page = browser.new_page(viewport=APP_SIZE)
        page.goto(server.url)
        page.wait_for_function("document.querySelectorAll('#record option').length > 1")
        page.select_option("#record", record)
        page.click("#go")
        page.wait_for_selector("body[data-done='1']", timeout=600_000)
        if page.evaluate("document.body.dataset.errors"):
            raise RecordError(f"the demo failed: {page.inner_text('#err')}", record=record)
        size = _shot(page, path)
        page.close()
        return size
    finally:
        server.shutdown()
        demo.close()


def take(args: dict[str, str], extra: list[str]) -> dict:
    """Steps 1 to 4; the figures printed."""
    from playwright.sync_api import sync_playwright

    checkpoint, records, out = args["checkpoint"], args["records"], Path(args["out"])
    for given, what in ((checkpoint, "checkpoint"), (records, "records")):
        if not Path(given).exists():
            raise FileNotFoundError(
                f"{what} {given} does not exist: run `make demo` first, or name one ({USAGE})"
            )
    if not Path(CHROMIUM).exists():
        raise FileNotFoundError(f"{CHROMIUM} does not exist: `make setup` installs Debian's chromium")
    out.mkdir(parents=True, exist_ok=True)
    folder = evaluate_for_pictures(checkpoint, records, Path(args.get("runs", "runs")), extra)
    record, outcomes = pick_record(folder)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            view = shoot_view(browser, folder, out / "view.png")
            app = shoot_app(
                browser, [f"checkpoint={checkpoint}", f"records={records}", *extra], record, out / "app.png"
            )
        finally:
            browser.close()
    return {
        "view": str(out / "view.png"),
        "view_bytes": view,
        "app": str(out / "app.png"),
        "app_bytes": app,
        "record": record,
        "outcomes": outcomes,
        "evaluation": str(folder),
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv in (["--help"], ["-h"]):
        print(USAGE)
        return 0
    bad = [a for a in argv if "=" not in a]
    if bad:
        print(f"pipeline.pictures: not key=value: {bad[0]}\n{USAGE}", file=sys.stderr)
        return 2
    own = {"checkpoint", "records", "out", "runs"}
    args = DEFAULTS | {k: v for k, v in (a.split("=", 1) for a in argv) if k in own}
    extra = [a for a in argv if a.split("=", 1)[0] not in own]
    from infra.entry import quiet_libraries

    quiet_libraries()
    try:
        figures = take(args, extra)
    except (RecordError, ValueError, FileNotFoundError) as exc:
        print(f"pipeline.pictures: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
