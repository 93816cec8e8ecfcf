"""Shared test helpers for eval: a local OpenAI-compatible chat endpoint on 127.0.0.1."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


class ChatServer:
    """Answers ``/v1/chat/completions`` with ``answer(prompt)``; keeps every request and its headers.
    A context manager: serving from ``__enter__`` to ``__exit__``."""

    def __init__(self, answer: Callable[[str], str]):
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self.prompts: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(body)
                outer.headers.append(dict(self.headers))
                prompt = body["messages"][0]["content"]
                outer.prompts.append(prompt)
                data = json.dumps(
                    {"choices": [{"message": {"role": "assistant", "content": answer(prompt)}}]}
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> ChatServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def chat_server() -> type[ChatServer]:
    return ChatServer
