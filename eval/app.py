"""The live demo: a video, a record of a built benchmark or the browser's webcam, streamed causally
through one model in the browser.

    python -m eval.app checkpoint=DIR port=7860
    python -m eval.app checkpoint=null records=/tmp/toy/records.jsonl        # the tiny model, any machine
    python -m eval.app checkpoint=DIR host=0.0.0.0 port=7860 threshold=0.4   # open it wider

Every ``key=value`` but ``host`` and ``port`` is an ``eval.run`` override (``conf/eval.yaml``:
``checkpoint``, ``records``, ``threshold``, ``benchmark``, ``render``...), composed the same way,
so the demo streams at the benchmark's step rate with the frame size the checkpoint was trained
with. It listens on 127.0.0.1 unless ``host=`` says otherwise. ``docs/app.md`` shows the page.

The page (:data:`eval.app_page.PAGE`, no outside asset): a checkpoint to load, a video path (or an
uploaded file), a record id or the webcam, the instruction (empty: the record's own; a video and the
webcam need one), real time or as fast as it can go. While the stream runs it shows the current
frame, the step count, P(</Response>) against the threshold as a live curve, and each reply as it
fires with its time; for a record, the targets and their windows on the same axis and, once the
stream ends, each fire's outcome from the scorer (:meth:`eval.runners.ProtocolRunner.outcomes`, as
``eval.view`` draws it).

The server is the standard library's threaded HTTP server, with the steps as server-sent events
(``GET /stream``); :class:`eval.app_streams.Demo` runs them. One process holds one model and one
lock: requests queue (the page says so) and never run two streams at once; a client that goes away
stops its stream at the next step. Loading another checkpoint (``POST /checkpoint``) takes the same
lock, so it waits for a running stream; a checkpoint that does not load (at start or later) is a
message on the page naming the folder and the reason, the model held before stays, and with none
held every request gets that message until one loads. An unreadable video, a missing record or an
empty instruction is an ``error`` event with the reason, shown on the page, and the server goes on
serving.

The webcam: the page grabs a frame of ``getUserMedia``'s camera (127.0.0.1 is a secure context)
every step (1 frame/s at 1 step/s) and posts it (``POST /frame``); the engine, with
``frame_chunk=1``, steps on each frame as it arrives (:class:`eval.app_streams.LiveFrames`) until
the page says stop (``POST /stop``), goes away, or sends nothing for
:data:`eval.app_streams.WEBCAM_IDLE_S`.

Chosen over Gradio: Gradio 6 brings a web framework, a front-end bundle and dozens of packages for
what one page and one event stream do here, and its queue and streaming semantics would stand
between the engine's steps and the page; the standard library adds nothing to install.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from data_builders.records import RecordError
from eval.app_page import PAGE
from eval.app_streams import ClientGone, Demo, Request, WebcamStopped

__all__ = ["Demo", "handler", "main", "serve"]

#: Request body limit of an upload (bytes).
MAX_UPLOAD = 512 * 2**20
#: Request body limit of one webcam frame (bytes; the page posts a JPEG of a few tens of KB).
MAX_FRAME = 8 * 2**20


class Handler(BaseHTTPRequestHandler):
    """The demo server's requests: the page, its state, the event stream and the posts (an upload,
    a checkpoint to load, a webcam frame, a webcam stop). :func:`handler` binds it to a :class:`Demo`."""

    demo: Demo

    def log_message(self, *args):  # quiet: the page shows what happens
        pass

    def _reply(self, code: int, body: bytes, kind: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, code: int, data: Any) -> None:
        self._reply(code, json.dumps(data).encode(), "application/json")

    def _body(self, limit: int) -> bytes | None:
        """The request body, or None once a 400 is sent for its size."""
        n = int(self.headers.get("Content-Length", 0))
        if n <= 0 or n > limit:
            self._json(400, {"error": f"a body of {n} bytes: 1 to {limit}"})
            return None
        return self.rfile.read(n)

    def do_GET(self):  # noqa: N802 (http.server's name)
        url = urlparse(self.path)
        if url.path == "/":
            return self._reply(200, PAGE.encode(), "text/html; charset=utf-8")
        if url.path == "/state":
            return self._json(200, self.demo.state())
        if url.path != "/stream":
            return self._reply(404, b"not found", "text/plain")
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()

        def send(event: str, data: dict) -> None:
            try:
                self.wfile.write(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())
                self.wfile.flush()
            except OSError as exc:
                raise ClientGone() from exc

        try:
            self.demo.stream(send, Request.from_query({k: v[0] for k, v in parse_qs(url.query).items()}))
        except ClientGone:
            pass

    def do_POST(self):  # noqa: N802
        url = urlparse(self.path)
        if url.path == "/upload":
            return self._upload()
        if url.path == "/checkpoint":
            return self._checkpoint()
        if url.path in ("/frame", "/stop"):
            return self._webcam(url.path, parse_qs(url.query).get("session", [""])[0])
        return self._reply(404, b"not found", "text/plain")

    def _webcam(self, path: str, session: str) -> None:
        """``/frame``: a frame for the webcam stream ``session``; ``/stop``: its end."""
        frames = self.demo.webcams.get(session)
        if frames is None:
            return self._json(404, {"error": f"no webcam stream {session!r} is running"})
        if path == "/stop":
            frames.stop()
            return self._json(200, {"stopped": session})
        body = self._body(MAX_FRAME)
        if body is None:
            return None
        try:
            return self._json(200, {"frames": frames.push(body)})
        except ValueError as exc:
            return self._json(400, {"error": str(exc)})
        except WebcamStopped as exc:
            return self._json(409, {"error": str(exc)})

    def _upload(self) -> None:
        body = self._body(MAX_UPLOAD)
        if body is None:
            return
        name = Path(self.headers.get("X-Filename", "upload.mp4")).name or "upload.mp4"
        path = self.demo.uploads / f"{time.time_ns()}-{name}"
        path.write_bytes(body)
        self._json(200, {"path": str(path)})

    def _checkpoint(self) -> None:
        """``{"checkpoint": DIR}``: load it (after a running stream); the model held and why not."""
        body = self._body(2**16)
        if body is None:
            return
        try:
            asked = json.loads(body)["checkpoint"]
        except (ValueError, KeyError, TypeError):
            return self._json(400, {"error": 'expected {"checkpoint": "DIR"}'})
        error = self.demo.load(str(asked))
        self._json(200, {"checkpoint": self.demo.checkpoint, "error": error})


def handler(demo: Demo) -> type[Handler]:
    """:class:`Handler` bound to ``demo``."""
    return type("DemoHandler", (Handler,), {"demo": demo})


def serve(demo: Demo, host: str = "127.0.0.1", port: int = 7860) -> ThreadingHTTPServer:
    """A running server (its own thread); ``server.shutdown()`` stops it."""
    server = ThreadingHTTPServer((host, port), handler(demo))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv in (["--help"], ["-h"]):
        print(
            "usage: python -m eval.app [checkpoint=DIR|null] [records=PATH] [host=127.0.0.1] [port=7860] [key=value ...]"
        )
        return 0
    opts = dict(a.split("=", 1) for a in argv if a.split("=", 1)[0] in ("host", "port"))
    rest = [a for a in argv if a.split("=", 1)[0] not in ("host", "port")]
    try:
        demo = Demo(rest)
    except (ValueError, RecordError, FileNotFoundError, OSError) as exc:
        print(f"eval.app: {exc}", file=sys.stderr)
        return 2
    if demo.error:  # served all the same: the page shows why, and loads another
        print(f"eval.app: {demo.error}", file=sys.stderr)
    server = serve(demo, opts.get("host", "127.0.0.1"), int(opts.get("port", 7860)))
    host, port = server.server_address[:2]
    url = f"http://{host}:{port}/"
    print(json.dumps({"url": url, "records": len(demo.streams), "checkpoint": demo.checkpoint}), flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
