"""The live demo: a video, a record of a built benchmark or the browser's webcam, streamed causally
through one model in the browser, with P(</Response>) and each reply as it fires.

    python -m eval.app.server checkpoint=DIR port=7860                              # open the URL it prints
    python -m eval.app.server checkpoint=null records=/tmp/toy/records.jsonl        # the tiny model, any machine
    python -m eval.app.server checkpoint=DIR host=0.0.0.0 port=7860 threshold=0.4   # open it wider (token required)

This module is the HTTP server: every ``key=value`` but the server's own
(:class:`eval.app.guard.AppConfig`) is an ``eval.run`` override, every request passes
:class:`eval.app.guard.Guard`, the page is :data:`eval.app.page.PAGE` and
:class:`eval.app.streams.Demo` runs the streams (server-sent events, ``GET /stream``). What the page
shows, the options, the guard and the webcam: ``docs/app.md``.
"""

from __future__ import annotations

import io
import json
import signal
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

from data_builders.records import RecordError
from eval.app.guard import WILDCARD, AppConfig, Guard, host_names
from eval.app.limits import Connections, DeadlineReader, refuse
from eval.app.page import PAGE
from eval.app.streams import ClientGone, Demo, Request, WebcamStopped

__all__ = ["AppConfig", "Demo", "handler", "main", "serve"]

#: Request body limit of one webcam frame (bytes; the page posts a JPEG of a few tens of KB).
MAX_FRAME = 8 * 2**20
#: Request body limit of a JSON post (bytes).
MAX_JSON = 2**16
#: The body type each post takes. None of them is one a page of another origin may send without
#: asking first (``text/plain``, a form's types), and this server answers no such question.
POST_TYPES = {
    "/checkpoint": ("application/json",),
    "/stop": ("application/json",),
    "/upload": ("application/octet-stream", "video/"),
    "/frame": ("image/jpeg", "image/png"),
}
#: Headers on every answer: no caching, no sniffing, no framing by another page, no referrer.
SAFE_HEADERS = {
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": "frame-ancestors 'none'",
    "Referrer-Policy": "no-referrer",
}
#: Seconds one read of a request may wait (each read is bounded by the request's deadline too:
#: ``request_timeout_s``).
READ_TIMEOUT_S = 30.0
#: Connections the kernel queues while the server accepts (the listen backlog).
BACKLOG = 128
#: The send buffer of a stream's socket (bytes; the kernel doubles it): fixed, so a client that stops
#: reading has at most this much of its events queued, and the stall shows within a few events.
STREAM_SNDBUF = 64 * 2**10
#: The chunk an upload is written to disk in (bytes).
UPLOAD_CHUNK = 2**20


class Handler(BaseHTTPRequestHandler):
    """The demo server's requests: the page, its state, the event stream and the posts (an upload,
    a checkpoint to load, a webcam frame, a webcam stop). Each passes :class:`~eval.app.guard.Guard`
    first. :func:`handler` binds it to a :class:`Demo`, a guard and the app's keys."""

    demo: Demo
    guard: Guard
    app: AppConfig
    timeout = READ_TIMEOUT_S
    cookie = False  # the token came in the query: the answer sets the page's cookie

    def log_message(self, *args):  # quiet: the page shows what happens
        pass

    def setup(self) -> None:
        """The connection's reads, bounded by the request's deadline (``eval.app.limits``)."""
        super().setup()
        self.reader = DeadlineReader(self.connection, self.app.request_timeout_s, READ_TIMEOUT_S)
        self.rfile = io.BufferedReader(self.reader)

    def parse_request(self) -> bool:
        """http.server's parse; a connection closed to make room is not answered."""
        parsed = super().parse_request()
        if not self.server.connections.headers_in(self.connection):
            self.close_connection = True
            return False
        return parsed

    def _head(self, code: int, kind: str, length: int | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        if length is not None:
            self.send_header("Content-Length", str(length))
        for key, value in SAFE_HEADERS.items():
            self.send_header(key, value)
        if self.cookie:
            self.send_header("Set-Cookie", self.guard.set_cookie())
        self.end_headers()

    def _reply(self, code: int, body: bytes, kind: str) -> None:
        self._head(code, kind, len(body))
        self.wfile.write(body)

    def _json(self, code: int, data: Any) -> None:
        self._reply(code, json.dumps(data).encode(), "application/json")

    def _admitted(self, query: dict[str, list[str]]) -> bool:
        """The guard's checks; a refusal is answered (403) and the connection closed."""
        refusal = self.guard.refusal(self.headers, query)
        if refusal is not None:
            self.close_connection = True
            self._json(403, {"error": refusal})
            return False
        self.cookie = bool(query.get("token"))
        return True

    def _length(self, limit: int) -> int | None:
        """The body's announced length, or None once it is refused (411 without, 413 past ``limit``)."""
        raw = self.headers.get("Content-Length")
        try:
            n = int(raw)
        except (TypeError, ValueError):
            self.close_connection = True
            self._json(411, {"error": f"a body needs its Content-Length (got {str(raw)[:40]!r})"})
            return None
        if n < 0 or n > limit:
            self.close_connection = True
            self._json(413 if n > 0 else 400, {"error": f"a body of {n} bytes: this post takes 0 to {limit}"})
            return None
        self.reader.extend(n / (self.app.min_body_kib_s * 2**10))
        return n

    def _body(self, limit: int) -> bytes | None:
        """The request body, or None once it is refused for its size."""
        n = self._length(limit)
        return None if n is None else self.rfile.read(n)

    def do_GET(self):  # noqa: N802 (http.server's name)
        url = urlparse(self.path)
        if not self._admitted(parse_qs(url.query)):
            return None
        if url.path == "/":
            return self._reply(200, PAGE.encode(), "text/html; charset=utf-8")
        if url.path == "/state":
            return self._json(200, self.demo.state())
        if url.path != "/stream":
            return self._json(404, {"error": f"no page {url.path[:80]!r}"})
        return self._stream(url.query)

    def _stream(self, query: str) -> None:
        """``GET /stream``: the request's events as they come. A send that makes no progress for
        ``send_timeout_s`` (a client that stopped reading) ends the stream and frees the lock."""
        self._head(200, "text/event-stream")
        self.connection.settimeout(self.app.send_timeout_s)
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, STREAM_SNDBUF)

        def send(event: str, data: dict) -> None:
            try:
                self.wfile.write(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())
                self.wfile.flush()
            except OSError as exc:  # gone, or no progress for send_timeout_s
                raise ClientGone() from exc

        try:
            self.demo.stream(send, Request.from_query({k: v[0] for k, v in parse_qs(query).items()}))
        except ClientGone:
            pass
        self.close_connection = True

    def do_POST(self):  # noqa: N802
        url = urlparse(self.path)
        query = parse_qs(url.query)
        if not self._admitted(query):
            return None
        if url.path not in POST_TYPES:
            return self._json(404, {"error": f"no post {url.path[:80]!r}"})
        kind = (self.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
        if not kind.startswith(POST_TYPES[url.path]):
            self.close_connection = True
            return self._json(
                415, {"error": f"{url.path} takes {' or '.join(POST_TYPES[url.path])}, not {kind[:60]!r}"}
            )
        if url.path == "/upload":
            return self._upload()
        if url.path == "/checkpoint":
            return self._checkpoint()
        return self._webcam(url.path, query.get("session", [""])[0])

    def _webcam(self, path: str, session: str) -> None:
        """``/frame``: a frame for the webcam stream ``session``; ``/stop``: its end."""
        frames = self.demo.webcams.get(session)
        if frames is None:
            return self._json(404, {"error": f"no webcam stream {session[:40]!r} is running"})
        body = self._body(MAX_FRAME if path == "/frame" else MAX_JSON)
        if body is None:
            return None
        if path == "/stop":
            frames.stop()
            return self._json(200, {"stopped": session})
        try:
            return self._json(200, {"frames": frames.push(body), "dropped": frames.dropped})
        except ValueError as exc:
            return self._json(400, {"error": str(exc)})
        except WebcamStopped as exc:
            return self._json(409, {"error": str(exc)})

    def _upload(self) -> None:
        """The body written to the upload folder in chunks (at most ``max_upload_mb``); a body cut
        short or a write that fails leaves no file."""
        n = self._length(int(self.app.max_upload_mb * 2**20))
        if n is None:
            return None
        name = Path(unquote(self.headers.get("X-Filename", ""))).name
        safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in name)[-80:] or "upload.mp4"
        path = self.demo.uploads / f"{time.time_ns()}-{safe}"
        try:
            with path.open("xb") as out:
                left = n
                while left:
                    chunk = self.rfile.read(min(UPLOAD_CHUNK, left))
                    if not chunk:
                        raise ConnectionError(f"the upload ended after {n - left} of {n} bytes")
                    out.write(chunk)
                    left -= len(chunk)
        except OSError as exc:
            path.unlink(missing_ok=True)
            self.close_connection = True
            return self._json(
                400 if isinstance(exc, ConnectionError | TimeoutError) else 507, {"error": str(exc)}
            )
        return self._json(200, {"path": str(path)})

    def _checkpoint(self) -> None:
        """``{"checkpoint": DIR}``: load it (after a running stream); the model held and why not."""
        body = self._body(MAX_JSON)
        if body is None:
            return
        try:
            asked = json.loads(body)["checkpoint"]
            if not isinstance(asked, str):
                raise TypeError
        except (ValueError, KeyError, TypeError):
            return self._json(400, {"error": 'expected {"checkpoint": "DIR"}'})
        error = self.demo.load(asked)
        self._json(200, {"checkpoint": self.demo.checkpoint, "error": error})


def handler(demo: Demo, guard: Guard, app: AppConfig) -> type[Handler]:
    """:class:`Handler` bound to ``demo``, ``guard`` and ``app``."""
    return type("DemoHandler", (Handler,), {"demo": demo, "guard": guard, "app": app})


class _Server(ThreadingHTTPServer):
    """One thread per connection, under the caps of ``connections`` (``eval.app.limits``): a
    connection past them is answered 503 and closed at once, no thread started."""

    daemon_threads = True
    request_queue_size = BACKLOG
    connections: Connections

    def process_request(self, request, client_address) -> None:
        why = self.connections.admit(request, client_address[0])
        if why is not None:
            refuse(request, why, SAFE_HEADERS)
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def handle_error(self, request, client_address) -> None:
        if not isinstance(sys.exc_info()[1], OSError):  # a client gone mid-answer is no error
            super().handle_error(request, client_address)

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.connections.close(request)


class _Server6(_Server):
    address_family = socket.AF_INET6


def serve(demo: Demo, app: AppConfig | None = None, token: str | None = None) -> ThreadingHTTPServer:
    """A running server (its own thread) on ``app.host:app.port``; ``server.url`` is the page's
    address with the token, ``server.guard`` its checks; ``server.shutdown()`` stops it."""
    app = app or AppConfig()
    server = (_Server6 if ":" in app.host else _Server)((app.host.strip("[]"), app.port), Handler)
    port = server.server_address[1]
    server.connections = Connections(app.max_connections, app.max_connections_per_ip)
    guard = Guard(host_names(app.host, app.allow_hosts), port, token)
    server.RequestHandlerClass = handler(demo, guard, app)
    shown = socket.gethostname() if app.host in WILDCARD else app.host
    shown = f"[{shown.strip('[]')}]" if ":" in shown else shown
    server.url = f"http://{shown}:{port}/?token={guard.token}"
    server.guard = guard
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _print_config(app: AppConfig, rest: list[str], resolve: bool) -> int:
    """``--cfg job``: the app's keys and the composed ``eval.run`` config as YAML; nothing starts."""
    from dataclasses import asdict

    from omegaconf import OmegaConf

    from eval.run import load_config

    cfg = load_config(rest)
    app_keys = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(app).items()}
    print(OmegaConf.to_yaml(OmegaConf.merge(app_keys, cfg), resolve=resolve), end="")
    return 0


def _stop(signum, frame) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv in (["--help"], ["-h"]):
        print(
            "usage: python -m eval.app.server [checkpoint=DIR|null] [records=PATH] [host=127.0.0.1] [port=7860] "
            "[allow_dirs=[DIR,...]] [allow_hosts=[NAME,...]] [send_timeout_s=5] [max_upload_mb=512] "
            "[request_timeout_s=10] [min_body_kib_s=256] [max_connections=64] [max_connections_per_ip=16] "
            "[key=value ...] [--cfg job [--resolve]]"
        )
        return 0
    show = "--cfg" in argv
    resolve = "--resolve" in argv
    argv = [a for a in argv if a not in ("--cfg", "job", "--resolve")]
    try:
        app, rest = AppConfig.split(argv)
        if show:
            return _print_config(app, rest, resolve)
        demo = Demo(rest, app.allow_dirs)
    except (ValueError, RecordError, FileNotFoundError, OSError) as exc:
        print(f"eval.app.server: {exc}", file=sys.stderr)
        return 2
    return _serve_until_stopped(demo, app)


def _serve_until_stopped(demo: Demo, app: AppConfig) -> int:
    """Serve until Ctrl-C or SIGTERM, then delete the uploads; the start and the end are JSON lines."""
    from PIL import Image

    from eval.app.streams import MAX_FRAME_PIXELS

    Image.MAX_IMAGE_PIXELS = MAX_FRAME_PIXELS  # the decompression-bomb guard of anything decoded here
    for note in (demo.note, demo.error):  # served all the same: the page shows why, and loads another
        if note:
            print(f"eval.app.server: {note}", file=sys.stderr)
    for signum in (
        signal.SIGINT,
        signal.SIGTERM,
    ):  # also when started with SIGINT ignored (in the background)
        signal.signal(signum, _stop)
    try:
        server = serve(demo, app)
    except OSError as exc:
        demo.close()
        print(f"eval.app.server: cannot listen on {app.host}:{app.port} ({exc})", file=sys.stderr)
        return 2
    start = {"url": server.url, "records": len(demo.streams), "checkpoint": demo.checkpoint}
    print(json.dumps(start), flush=True)
    stopped = "SIGINT"
    try:
        threading.Event().wait()
    except KeyboardInterrupt as exc:
        stopped = str(exc) or "SIGINT"  # str(exc) is "" for Python's own Ctrl-C
    finally:
        server.shutdown()
        removed = demo.close()
    print(
        json.dumps({"stopped": stopped, "steps_run": demo.steps_run, "uploads_removed": removed}), flush=True
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
