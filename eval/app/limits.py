"""How many connections the demo server (``eval.app.server``) holds, and for how long one may take
to send its request, so that a crowd of slow connections cannot starve the page.

- **Caps** (:class:`Connections`): at most ``max_connections`` open at once, and
  ``max_connections_per_ip`` from one address. A connection past a cap is answered ``503`` at once
  and closed, before any thread is started for it. When the server is full, a new connection first
  takes the place of the one that has waited longest for its headers, if that one has waited more
  than :data:`EVICT_AFTER_S` (a browser sends its headers with the connection; an idle one is an
  attacker's or a dead client's).
- **Deadline** (:class:`DeadlineReader`): the request line, the headers and the body must arrive
  within ``request_timeout_s`` of the connection's start however slowly they trickle (a byte every
  second reset the old per-read timeout for ever); a body gets one second more per
  ``min_body_kib_s`` KiB. The connection is closed when it passes.

A connection serves one request (HTTP/1.0: the answer ends it), so no idle keep-alive connection
is ever held.
"""

from __future__ import annotations

import io
import json
import socket
import threading
import time
from collections import Counter

#: A connection that has waited this long for its headers (s) gives its place to a new one when the
#: server is full.
EVICT_AFTER_S = 1.0


class Connections:
    """The server's open connections, under the two caps (see the module's docstring)."""

    def __init__(self, total: int, per_ip: int):
        self.total, self.per_ip = total, per_ip
        self._lock = threading.Lock()
        self._open: dict[socket.socket, list] = {}  # socket -> [address, opened (monotonic), headers in]

    def admit(self, sock: socket.socket, ip: str) -> str | None:
        """None once ``sock`` (from ``ip``) is counted in; else why it is refused."""
        with self._lock:
            if Counter(ip_ for ip_, _, _ in self._open.values())[ip] >= self.per_ip:
                return f"{self.per_ip} connections from {ip} are open already (max_connections_per_ip)"
            if len(self._open) >= self.total and not self._evict():
                return f"the server holds {self.total} connections already (max_connections)"
            self._open[sock] = [ip, time.monotonic(), False]
        return None

    def _evict(self) -> bool:
        """Close the connection that has waited longest for its headers, if longer than
        :data:`EVICT_AFTER_S`; whether one was closed. Called under the lock."""
        waiting = [(opened, s) for s, (_, opened, headers) in self._open.items() if not headers]
        if not waiting:
            return False
        opened, sock = min(waiting, key=lambda w: w[0])
        if time.monotonic() - opened < EVICT_AFTER_S:
            return False
        del self._open[sock]
        try:
            sock.shutdown(socket.SHUT_RDWR)  # its thread reads the end and closes it
        except OSError:
            pass
        return True

    def headers_in(self, sock: socket.socket) -> bool:
        """``sock`` sent its request line and headers: it is no longer one to make room with.
        False if it made room already (its headers end where the connection was cut)."""
        with self._lock:
            if sock not in self._open:
                return False
            self._open[sock][2] = True
            return True

    def close(self, sock: socket.socket) -> None:
        with self._lock:
            self._open.pop(sock, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._open)


def refuse(sock: socket.socket, why: str, headers: dict[str, str]) -> None:
    """Answer ``503`` with ``why`` without waiting on the client (a full socket drops it)."""
    body = json.dumps({"error": why}).encode()
    head = {
        "Content-Type": "application/json",
        "Content-Length": str(len(body)),
        "Retry-After": "1",
        "Connection": "close",
    }
    lines = [f"{k}: {v}" for k, v in (head | headers).items()]
    message = "\r\n".join(["HTTP/1.0 503 Service Unavailable", *lines, "", ""]).encode() + body
    try:
        sock.setblocking(False)
        sock.send(message)
    except OSError:
        pass


class DeadlineReader(io.RawIOBase):
    """A connection's reads, each bounded by the request's deadline and by ``idle_s``; past the
    deadline a read raises ``TimeoutError`` (http.server then closes the connection)."""

    def __init__(self, sock: socket.socket, timeout_s: float, idle_s: float):
        self.sock, self.timeout_s, self.idle_s = sock, timeout_s, idle_s
        self.deadline = time.monotonic() + timeout_s

    def readable(self) -> bool:
        return True

    def extend(self, seconds: float) -> None:
        """Give the body ``seconds`` more."""
        self.deadline += seconds

    def readinto(self, buffer) -> int:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(
                f"the request did not arrive within its {self.timeout_s:g} s (request_timeout_s)"
            )
        self.sock.settimeout(min(left, self.idle_s))
        try:
            return self.sock.recv_into(buffer)
        finally:
            self.sock.settimeout(self.idle_s)
