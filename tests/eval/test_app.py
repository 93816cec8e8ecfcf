"""eval.app: the real server on 127.0.0.1 with the tiny model, driven in headless Chromium.

- a toy record's first reply (time and text) equals eval.run's prediction; a bad video's message;
  the next request still works; a screenshot;
- an upload through the page's file input: its first reply equals eval.run's for that video and
  instruction; real time: no step event arrives before its stream time;
- a checkpoint that does not load: its message on the page at load and at every request, the
  server serving; loading a good one from the page; a failed load keeps the model held;
- queueing: a second request is told it is queued and starts only after the first's last step; the
  engine never runs two streams at once; a page closed mid-stream stops its stream and frees the lock;
- the webcam (Chromium's fake camera): the page's step count and curve grow, the server runs one
  engine step per step shown, and Stop ends the stream; the webcam's frame queue alone.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from pathlib import Path
from urllib.parse import urlencode

import numpy as np
import pytest

from data_builders.records import load_streams
from data_builders.synthetic.toy import write_mp4
from eval.app import Demo, serve
from eval.run import evaluate, load_config
from eval.store import PredictionLog

FIRING = 0.47
SHORT_S = 4  # the short clip's length (s): 4 steps at 1 step/s
SAY = "Tell me when something happens."


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """Debian's Chromium, headless, with a fake camera that the page may use without asking."""
    from playwright.sync_api import sync_playwright

    chromium = Path("/usr/bin/chromium")
    assert chromium.exists(), f"{chromium} is missing: `make setup` installs Debian's chromium"
    flags = ["--disable-gpu", "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream"]
    with sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("profile")),
            executable_path=str(chromium),
            args=flags,
            viewport={"width": 1100, "height": 760},
        )
        yield ctx
        ctx.close()


@pytest.fixture
def page(browser):
    page = browser.new_page()
    yield page
    if not page.is_closed():
        page.close()


@pytest.fixture(scope="module")
def overrides(tmp_path_factory, toy_dir) -> list[str]:
    """The demo's and eval.run's overrides, but the checkpoint."""
    tmp = tmp_path_factory.mktemp("app")
    return [
        f"records={toy_dir / 'records.jsonl'}",
        f"paths.cache_dir={tmp / 'cache'}",
        f"paths.runs_dir={tmp / 'runs'}",
        "render.max_pixels=4096",
        "max_new_tokens=6",
        f"threshold={FIRING}",
    ]


@pytest.fixture(scope="module")
def predicted(tiny_checkpoint, overrides, tmp_path_factory) -> dict:
    """eval.run's prediction row of the first toy record."""
    out = tmp_path_factory.mktemp("eval") / "out"
    cfg = load_config(
        [f"checkpoint={tiny_checkpoint}", *overrides, f"out_dir={out}", "limit=1", "view=false"]
    )
    evaluate(cfg, echo=False)
    [first] = PredictionLog(out / "predictions.jsonl").rows()
    assert first["replies"], "the toy record fires"
    return first


@pytest.fixture(scope="module")
def served(tiny_checkpoint, overrides):
    """(demo, port) of a server holding the tiny checkpoint."""
    demo = Demo([f"checkpoint={tiny_checkpoint}", *overrides])
    server = serve(demo, "127.0.0.1", 0)
    host, port = server.server_address[:2]
    assert host == "127.0.0.1"
    yield demo, port
    server.shutdown()


@pytest.fixture(scope="module")
def short_video(tmp_path_factory) -> Path:
    """A 4 s mp4 (2 fps): grey, a red square from second 2."""
    frames = [np.full((64, 64, 3), 100, np.uint8) for _ in range(2 * SHORT_S)]
    for f in frames[4:]:
        f[20:40, 20:40] = (220, 30, 30)
    path = tmp_path_factory.mktemp("short") / "short.mp4"
    write_mp4(path, frames, 2)
    return path


def events(port: int, **query: str):
    """A raw client of ``GET /stream``: (event, data, arrival time.monotonic()) as they come."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", "/stream?" + urlencode(query))
    event = None
    try:
        for raw in conn.getresponse():
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                event = line[len("event: ") :]
            elif line.startswith("data: "):
                yield event, json.loads(line[len("data: ") :]), time.monotonic()
    finally:
        conn.close()


def wait_until(check, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.05)


@pytest.mark.slow  # the demo served to headless chromium
def test_demo_in_chromium(served, predicted, tmp_path, page):
    demo, port = served
    page.goto(f"http://127.0.0.1:{port}/")
    page.wait_for_function("document.querySelectorAll('#record option').length > 1")
    page.select_option("#record", predicted["id"])
    page.click("#go")
    page.wait_for_selector("#replies .reply")
    reply = predicted["replies"][0]
    assert page.inner_text("#replies .reply b") == f"{reply['time']:.1f} s"
    assert page.inner_text("#replies .reply .text") == reply["text"]
    page.wait_for_selector("body[data-done='1']")
    assert page.locator("#replies .reply").count() == len(predicted["replies"])
    assert page.locator("#replies .tag").count() == len(predicted["replies"])  # outcomes at the end
    assert page.inner_text("#steps") == f"{len(predicted['fired'])} steps"

    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"not a video")
    page.select_option("#record", "")
    page.fill("#video", str(bad))
    page.fill("#instruction", SAY)
    page.click("#go")
    page.wait_for_selector("body[data-errors='1']")
    assert str(bad) in page.inner_text("#err")

    page.fill("#video", "")
    page.fill("#instruction", "")
    page.select_option("#record", predicted["id"])
    page.click("#go")
    page.wait_for_selector("body[data-done='2']")
    assert page.inner_text("#replies .reply .text") == reply["text"]
    page.screenshot(path=str(tmp_path / "app.png"))
    assert (tmp_path / "app.png").stat().st_size > 5000


@pytest.mark.slow  # the demo served to headless chromium
def test_upload_and_real_time(served, predicted, toy_dir, short_video, page):
    demo, port = served
    [record] = [s for s in load_streams(toy_dir / "records.jsonl") if s.id == predicted["id"]]
    assert (record.clip_start, record.clip_end) == (0.0, 20.0)  # the whole video: what an upload streams
    page.goto(f"http://127.0.0.1:{port}/")
    page.set_input_files("#file", str(toy_dir / record.video))
    page.fill("#instruction", record.instruction)
    page.click("#go")
    page.wait_for_selector("body[data-done='1']")
    replies = page.evaluate("S.done.replies")
    assert [(r["time"], r["text"]) for r in replies] == [(r["time"], r["text"]) for r in predicted["replies"]]
    reply = predicted["replies"][0]
    assert page.inner_text("#replies .reply b") == f"{reply['time']:.1f} s"
    assert page.inner_text("#replies .reply .text") == reply["text"]

    page.set_input_files("#file", [])
    page.fill("#video", str(short_video))
    page.check("#realtime")
    page.click("#go")
    page.wait_for_selector("body[data-done='2']")
    steps = page.evaluate("S.steps.map(s => [s.t, s.arrived])")
    assert [t for t, _ in steps] == [float(k) for k in range(SHORT_S)]
    late = [(t, arrived) for t, arrived in steps if arrived < t]
    assert not late, f"step events before their stream time (t, arrived s): {late}"


@pytest.mark.slow  # the demo served to headless chromium
def test_checkpoint_that_does_not_load(tiny_checkpoint, overrides, short_video, tmp_path, page):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    weightless = tmp_path / "weightless"
    weightless.mkdir()
    (weightless / "config.json").write_text((tiny_checkpoint / "config.json").read_text())
    demo = Demo([f"checkpoint={broken}", *overrides])
    assert demo.model is None and demo.error.startswith(f"{broken / 'config.json'}: not valid JSON")
    server = serve(demo, "127.0.0.1", 0)
    try:
        page.goto(f"http://127.0.0.1:{server.server_address[1]}/")
        page.wait_for_selector("body[data-errors='1']")  # on load
        assert page.inner_text("#err") == demo.error
        assert page.inner_text("#model") == "no model loaded"
        page.fill("#video", str(short_video))
        page.fill("#instruction", SAY)
        page.click("#go")
        page.wait_for_selector("body[data-errors='2']")  # on a request
        assert page.inner_text("#err") == demo.error

        page.fill("#checkpoint", str(weightless))
        page.click("#load")
        page.wait_for_selector("body[data-loads='1']")
        assert page.inner_text("#err").startswith(f"{weightless}: no model.safetensors")
        assert demo.model is None and demo.error == page.inner_text("#err")

        page.fill("#checkpoint", str(tiny_checkpoint))
        page.click("#load")
        page.wait_for_selector("body[data-loads='2']")
        assert page.inner_text("#model") == f"model: {tiny_checkpoint}"
        assert page.inner_text("#err") == "" and demo.error is None
        page.click("#go")
        page.wait_for_selector("body[data-done='1']")
        assert page.inner_text("#steps") == f"{SHORT_S} steps"

        page.fill("#checkpoint", str(broken))
        page.click("#load")
        page.wait_for_selector("body[data-loads='3']")
        assert page.inner_text("#err").startswith(f"{broken / 'config.json'}: not valid JSON")
        assert page.inner_text("#model") == f"model: {tiny_checkpoint}"  # the model held stays
        page.click("#go")
        page.wait_for_selector("body[data-done='2']")
        assert page.inner_text("#err") == ""
    finally:
        server.shutdown()


@pytest.mark.slow  # the demo served to headless chromium
def test_queue_and_a_page_that_goes_away(served, predicted, short_video, page):
    """A record in real time on the page; a raw client's request meanwhile is queued; the page
    closes mid-stream: its stream stops at a next step and the queued one starts after its last."""
    demo, port = served
    total = len(predicted["fired"])
    page.goto(f"http://127.0.0.1:{port}/")
    page.wait_for_function("document.querySelectorAll('#record option').length > 1")
    page.select_option("#record", predicted["id"])
    page.check("#realtime")
    before = demo.steps_run
    page.click("#go")
    page.wait_for_function("S && S.steps.length >= 1")
    second: list[tuple[str, dict, int]] = []  # (event, data, engine steps run when it came)

    def client() -> None:
        for event, data, _ in events(port, video=str(short_video), instruction=SAY):
            second.append((event, data, demo.steps_run))

    raw = threading.Thread(target=client)
    raw.start()
    wait_until(lambda: second)
    assert second[0][:2] == ("queued", {"message": "another stream is running: queued"})
    assert demo.running == 1 and second[0][2] - before < total  # the page's stream still runs
    page.wait_for_function("S.steps.length >= 2")
    page.close()
    raw.join(60)
    kinds = [e for e, *_ in second]
    assert kinds == ["queued", "start", *["step"] * SHORT_S, "done"], kinds
    ran = demo.steps_run - before - SHORT_S  # the page's stream's steps
    assert 2 <= ran < total  # stopped part way, at a step after the close
    assert second[1][2] - before >= ran  # the second started after the page's last step
    assert demo.most_running == 1

    wait_until(lambda: not demo.lock.locked())
    after = events(port, video=str(short_video), instruction=SAY)
    assert next(after)[0] == "start"  # the lock is free: not queued
    after.close()
    wait_until(lambda: not demo.lock.locked())
    assert demo.most_running == 1


@pytest.mark.slow  # the demo served to headless chromium
def test_webcam(served, page):
    demo, port = served
    page.goto(f"http://127.0.0.1:{port}/")
    page.click("#cam")
    page.wait_for_selector("body[data-errors='1']")  # no instruction: the webcam has none of its own
    assert page.inner_text("#err") == "give an instruction: the webcam has none of its own"
    page.fill("#instruction", SAY)
    before = demo.steps_run
    page.click("#cam")
    page.wait_for_function("S && S.steps.length >= 2", timeout=30000)
    curve = page.evaluate("document.getElementById('curve').toDataURL()")
    shown = page.evaluate("S.steps.length")
    page.wait_for_function(f"S.steps.length >= {shown + 2}", timeout=30000)
    assert page.evaluate("document.getElementById('curve').toDataURL()") != curve  # the curve grew
    assert page.inner_text("#steps") == f"{page.evaluate('S.steps.length')} steps"
    assert page.get_attribute("#frame", "src").startswith("data:image/jpeg;base64,")
    page.click("#cam")  # stop
    page.wait_for_selector("body[data-done='1']")
    steps = page.evaluate("S.steps.map(s => s.t)")
    assert len(steps) >= shown + 2 and steps == [float(k) for k in range(len(steps))]
    assert page.evaluate("S.done.steps") == len(steps) == demo.steps_run - before
    assert page.evaluate("S.posted") >= len(steps)
    assert page.inner_text("#steps") == f"{len(steps)} steps"
    wait_until(lambda: not demo.lock.locked() and not demo.webcams)


def test_webcam_frames(monkeypatch):
    """LiveFrames without a browser: frames sized to the pixel budget, a read that waits pings the
    page, and a stop, a silent page or a page gone end the read; a bad image is refused."""
    import io

    from PIL import Image

    from eval import app_streams
    from eval.app_streams import ClientGone, LiveFrames, WebcamStopped

    monkeypatch.setattr(app_streams, "PING_S", 0.02)
    monkeypatch.setattr(app_streams, "WEBCAM_IDLE_S", 0.2)
    pings = []
    frames = LiveFrames(limit=3600, max_pixels=4096, ping=lambda: pings.append(1))
    jpeg = io.BytesIO()
    Image.new("RGB", (640, 480), (200, 30, 30)).save(jpeg, format="JPEG")
    assert len(frames) == 3600 and frames.push(jpeg.getvalue()) == 1 and frames.push(jpeg.getvalue()) == 2
    assert frames[0:1].shape == (1, 55, 73, 3) and frames[1].shape == (
        55,
        73,
        3,
    )  # fit_pixels(480, 640, 4096)
    assert frames.frames[0] is None  # read past: dropped
    with pytest.raises(ValueError, match="webcam frame of 4 bytes is not an image"):
        frames.push(b"junk")
    with pytest.raises(WebcamStopped, match="no frame for 0.2 s"):
        frames[2]
    assert len(pings) >= 3

    def page_gone() -> None:
        raise ClientGone()

    gone = LiveFrames(limit=10, max_pixels=4096, ping=page_gone)
    with pytest.raises(ClientGone):
        gone[0]
    frames.stop()
    with pytest.raises(WebcamStopped, match="stopped"):
        frames[2]
    with pytest.raises(WebcamStopped):
        frames.push(jpeg.getvalue())
