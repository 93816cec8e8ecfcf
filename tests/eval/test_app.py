"""eval.app: the real server on 127.0.0.1 with the tiny model, driven in headless Chromium: a toy
record's first reply (time and text) equals eval.run's prediction; a bad video's message; the next
request still works; a screenshot."""

from __future__ import annotations

import pytest

from eval.app import Demo, serve
from eval.run import evaluate, load_config
from eval.store import PredictionLog

FIRING = 0.47


@pytest.fixture
def page(browser):
    page = browser.new_page()
    yield page
    page.close()


@pytest.mark.slow  # an evaluation, then the demo served to chromium (90-100 s on a loaded 2-core machine)
def test_demo_in_chromium(tiny_checkpoint, toy_dir, tmp_path, page):
    common = [
        f"checkpoint={tiny_checkpoint}",
        f"records={toy_dir / 'records.jsonl'}",
        f"paths.cache_dir={tmp_path / 'cache'}",
        f"paths.runs_dir={tmp_path / 'runs'}",
        "render.max_pixels=4096",
        "max_new_tokens=6",
        f"threshold={FIRING}",
    ]
    evaluate(load_config([*common, f"out_dir={tmp_path / 'out'}", "limit=2", "view=false"]), echo=False)
    [first, _] = PredictionLog(tmp_path / "out" / "predictions.jsonl").rows()
    assert first["replies"], "the toy record fires"
    demo = Demo(common)
    server = serve(demo, "127.0.0.1", 0)
    try:
        host, port = server.server_address[:2]
        assert host == "127.0.0.1"
        page.goto(f"http://127.0.0.1:{port}/")
        page.wait_for_function("document.querySelectorAll('#record option').length > 1")
        page.select_option("#record", first["id"])
        page.click("#go")
        page.wait_for_selector("#replies .reply")
        reply = first["replies"][0]
        assert page.inner_text("#replies .reply b") == f"{reply['time']:.1f} s"
        assert page.inner_text("#replies .reply .text") == reply["text"]
        page.wait_for_selector("body[data-done='1']")
        assert page.locator("#replies .reply").count() == len(first["replies"])
        assert page.locator("#replies .tag").count() == len(first["replies"])  # outcomes at the end

        bad = tmp_path / "bad.mp4"
        bad.write_bytes(b"not a video")
        page.select_option("#record", "")
        page.fill("#video", str(bad))
        page.fill("#instruction", "Tell me when something happens.")
        page.click("#go")
        page.wait_for_selector("body[data-errors='1']")
        assert str(bad) in page.inner_text("#err")

        page.fill("#video", "")
        page.fill("#instruction", "")
        page.select_option("#record", first["id"])
        page.click("#go")
        page.wait_for_selector("body[data-done='2']")
        assert page.inner_text("#replies .reply .text") == reply["text"]
        page.screenshot(path=str(tmp_path / "app.png"))
        assert (tmp_path / "app.png").stat().st_size > 5000
    finally:
        server.shutdown()
