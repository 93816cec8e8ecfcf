"""An OpenAI-compatible chat-completions client that cannot hang: the judge's and the memory's.

- one **total deadline per request** (``timeout_s``, ``--judge-timeout``, default 60 s) covering
  connect, send and every byte of the reply, so a server that drips one byte every few seconds is
  cut off at the deadline (a per-read socket timeout would wait forever); an https endpoint's TLS
  handshake is bounded per read by the same number of seconds;
- **bounded retries** (``tries``, 3 in all) with exponential backoff (0.5 s, 1 s, ...) for
  transient failures only: timeouts, connection errors, a bad status line or a cut reply, HTTP
  408, 429 and 5xx;
- HTTP 401, 403 and 404 **fail at once** with :class:`ChatFatal` naming the status (a wrong key,
  URL or model does not get better by asking again);
- any other failure (another 4xx, a reply that is not a chat completion: a JSON list, a truncated
  or non-UTF-8 body) raises :class:`ChatError` for that request only;
- after one request used all its tries the endpoint counts as **down**: later requests fail at
  once with :class:`ChatUnavailable` (so a dead server costs one request's retries, not one per
  prompt).

The API key is read from the environment variable named ``key_env`` and never logged.
"""

from __future__ import annotations

import http.client
import io
import json
import math
import os
import socket
import time
import urllib.parse
from typing import Any

FATAL_STATUSES = frozenset({401, 403, 404})
MAX_REPLY_BYTES = 4 << 20


class ChatError(RuntimeError):
    """A request that got no usable answer (the caller counts the item unrated)."""


class ChatUnavailable(ChatError):
    """The endpoint did not answer after every try (or was already found down)."""


class ChatFatal(ChatError):
    """The endpoint refused the request for good (401/403/404): stop and tell the user."""


class _Transient(Exception):
    pass


class _DeadlineReader(io.RawIOBase):
    """Reads a socket, each read bounded by the time left to a fixed deadline."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock, self.deadline = sock, deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[override]
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the reply did not arrive before the deadline")
        self.sock.settimeout(left)
        return self.sock.recv_into(buffer)


class _DeadlineSocket:
    """The parts of a socket ``http.client`` uses, every one bounded by the deadline."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock, self.deadline = sock, deadline

    def sendall(self, data: bytes) -> None:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request could not be sent before the deadline")
        self.sock.settimeout(left)
        self.sock.sendall(data)

    def makefile(self, mode: str = "rb", *_: Any, **__: Any) -> io.BufferedReader:
        return io.BufferedReader(_DeadlineReader(self.sock, self.deadline))

    def close(self) -> None:
        """Nothing: ``http.client`` closes the connection before the body is read; the client closes
        the socket itself when the request is over."""


class ChatClient:
    """``POST {base_url}/chat/completions`` with one user message; :meth:`complete` returns the text."""

    def __init__(
        self,
        base_url: str,
        model: str,
        key_env: str = "JUDGE_API_KEY",
        timeout_s: float = 60.0,
        max_tokens: int | None = 512,
        tries: int = 3,
        backoff_s: float = 0.5,
    ) -> None:
        if not base_url or not model:
            raise ValueError("the HTTP endpoint needs a base URL and a model name")
        if not (isinstance(timeout_s, (int, float)) and math.isfinite(timeout_s) and timeout_s > 0):
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout_s!r}")
        if tries < 1:
            raise ValueError(f"tries must be at least 1, got {tries}")
        url = urllib.parse.urlsplit(base_url.rstrip("/") + "/chat/completions")
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"the endpoint URL must be http(s)://host[:port]/path, got {base_url!r}")
        self.url, self.parts = url.geturl(), url
        self.model, self.key_env, self.timeout_s = model, key_env, float(timeout_s)
        self.max_tokens, self.tries, self.backoff_s = max_tokens, tries, backoff_s
        self.requests_sent = 0
        self.failures = 0
        self.down: str | None = None

    def complete(self, prompt: str) -> str:
        """The reply text; raises :class:`ChatFatal`, :class:`ChatUnavailable` or :class:`ChatError`."""
        if self.down is not None:
            raise ChatUnavailable(f"{self.url} is down ({self.down})")
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": "user", "content": prompt}],
            "temperature": 0.0,
        }
        if self.max_tokens:
            body["max_tokens"] = self.max_tokens
        last = ""
        for attempt in range(self.tries):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                return self._once(json.dumps(body).encode())
            except _Transient as exc:
                self.failures += 1
                last = str(exc)
        self.down = f"no answer after {self.tries} tries, last: {last}"
        raise ChatUnavailable(f"{self.url}: {self.down}")

    def _once(self, payload: bytes) -> str:
        deadline = time.monotonic() + self.timeout_s
        conn_cls = http.client.HTTPSConnection if self.parts.scheme == "https" else http.client.HTTPConnection
        conn = conn_cls(self.parts.hostname, self.parts.port, timeout=self.timeout_s)
        headers = {"Content-Type": "application/json", "Connection": "close"}
        key = os.environ.get(self.key_env) if self.key_env else None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        path = self.parts.path + (f"?{self.parts.query}" if self.parts.query else "")
        self.requests_sent += 1
        raw = None
        try:
            conn.connect()
            raw = conn.sock
            conn.sock = _DeadlineSocket(raw, deadline)  # type: ignore[assignment]
            conn.request("POST", path, body=payload, headers=headers)
            response = conn.getresponse()
            data = response.read(MAX_REPLY_BYTES + 1)
            if response.length and len(data) <= MAX_REPLY_BYTES:  # Content-Length not reached
                raise http.client.IncompleteRead(data, response.length)
        except (OSError, http.client.HTTPException) as exc:  # timeouts are OSErrors
            raise _Transient(f"{type(exc).__name__}: {exc}") from None
        finally:
            conn.close()
            if raw is not None:
                raw.close()
        status = response.status
        if status in FATAL_STATUSES:
            raise ChatFatal(
                f"{self.url} answered HTTP {status} {response.reason}: check the URL, the model name and "
                f"the key in ${self.key_env}"
            )
        if status in (408, 429) or status >= 500:
            raise _Transient(f"HTTP {status} {response.reason}")
        if status != 200:
            raise ChatError(f"{self.url} answered HTTP {status} {response.reason}")
        return _content(data, self.url)


def _content(data: bytes, url: str) -> str:
    """The first choice's message text of a chat-completion body (None content reads as "")."""
    if len(data) > MAX_REPLY_BYTES:
        raise ChatError(f"{url}: the reply is larger than {MAX_REPLY_BYTES} bytes")
    try:
        reply = json.loads(data.decode("utf-8"))
        content = reply["choices"][0]["message"]["content"]
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, IndexError, TypeError) as exc:
        raise ChatError(f"{url}: not a chat completion ({type(exc).__name__}: {str(exc)[:80]})") from None
    if content is not None and not isinstance(content, str):
        raise ChatError(f"{url}: the message content is not text")
    return content or ""


class HttpBackend(ChatClient):
    """An OpenAI-compatible ``POST {base_url}/chat/completions`` endpoint (:class:`ChatClient`)."""

    name = "http"

    def cache_identity(self) -> dict[str, Any]:
        """What decides an answer besides the prompt: the endpoint, the model and the reply cap
        (temperature is always 0)."""
        return {"backend": self.name, "url": self.url, "model": self.model, "max_tokens": self.max_tokens}
