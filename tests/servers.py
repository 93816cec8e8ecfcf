"""Fixtures the evaluation, benchmark and engine tests share (a plugin of tests/conftest.py): a local
OpenAI-compatible chat endpoint and misbehaving servers on 127.0.0.1, and EgoServe files in the
official release / EgoMemo output structure (invented values)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

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


class RawServer:
    """A TCP server on 127.0.0.1 whose every connection is handed, after its request is read, to
    ``handle(conn, n, stop)`` (``n``: the connection's number from 1; ``stop``: an event set at
    ``__exit__``), which writes whatever bytes it likes, misbehaving on purpose. Handlers are
    bounded loops that also end once ``stop`` is set."""

    def __init__(self, handle: Callable[[socket.socket, int, threading.Event], None]):
        self.handle = handle
        self.connections = 0
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            threading.Thread(target=self._one, args=(conn, self.connections), daemon=True).start()

    def _one(self, conn: socket.socket, n: int) -> None:
        with conn:
            conn.settimeout(5)
            try:
                read_request(conn)
                self.handle(conn, n, self.stop)
            except OSError:
                pass

    def __enter__(self) -> RawServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(timeout=2)
        self.sock.close()


def read_request(conn: socket.socket) -> bytes:
    """Read one HTTP request (headers and a Content-Length body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(4096)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        (
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        ),
        0,
    )
    while len(body) < length:
        chunk = conn.recv(4096)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


@pytest.fixture
def raw_server() -> type[RawServer]:
    return RawServer


# ---------------------------------------------------------------------------------------------
# EgoServe files in the structure of the official release and of EgoMemo's inference output


RESPONSE = "proactive_response_gpt_5"
SUFFIX = {
    "egolife": "-qwenvl_3_8b_instruct_restart",
    "holoassist": "-qwenvl_3_8b_instruct",
    "captaincook4d": "_qwenvl_3_8b_instruct",
}
MAIN = {
    "safety": "Instant Proactive Service",
    "tool_use": "Instant Proactive Service",
    "next_step_guidance": "Short-Term Proactive Service",
    "error_recovery": "Short-Term Proactive Service",
    "resource_reminder": "Short-Term Proactive Service",
    "habit_coaching": "Long-Term Proactive Service",
    "memory_link_contextual": "Long-Term Proactive Service",
    "routine_optimization": "Long-Term Proactive Service",
    "memory_recall": "Episodic Proactive Service",
    "task_reminder": "Episodic Proactive Service",
}


def dialogue(text: str) -> list[dict]:
    return [{"role": "assistant", "utterance": text}, {"role": "user", "utterance": "Okay."}]


def _key(name) -> str:
    return "_".join(str(name).lower().replace("-", " ").split())


def service(sub: str, window, text: str = "Mind the pan.", main: str | None = None) -> dict:
    """One service as EgoMemo's inference writes it (``sub`` is written as given)."""
    return {
        "service_main_type": main if main is not None else MAIN.get(_key(sub), "Instant Proactive Service"),
        "service_sub_type": sub,
        "confidence": "high",
        "trigger_time_window": window,
        "trigger_evidence": "invented evidence",
        "user_prompt": text,
    }


def entry(*services: dict, form: str = "finalized", ts: float = 0.0) -> dict:
    """One entry of a response file; ``form``: finalized (EgoLife's first call), list, raw."""
    if form == "finalized":
        response = {"finalized_services": {"decision": "proactive", "services": list(services)}}
    elif form == "list":
        response = list(services)
    else:
        response = services[0]
    return {"frame_timestamp": ts, "selected_captions": [], "gemini_response": response, "prompt_used": "..."}


def counts(view: dict) -> dict[str, tuple[int, int, int]]:
    """(matched, n_pred, n_gt) per active subtype of a result (or its strict view)."""
    return {k: (v["matched"], v["n_pred"], v["n_gt"]) for k, v in view["per_subtype"].items()}


class EgoServeTree:
    """A release folder (``EgoServe_release/``) and a prediction folder (``predictions/``) built
    event by event; :meth:`write` puts them on disk, :meth:`args` gives eval.score's options.
    ``tree.service``, ``tree.entry``, ``tree.counts`` are the module's helpers."""

    service = staticmethod(service)
    entry = staticmethod(entry)
    dialogue = staticmethod(dialogue)
    counts = staticmethod(counts)

    def __init__(self, root: Path):
        self.root = root
        self.gt_root, self.pred_root = root / "EgoServe_release", root / "predictions"
        self.egolife: dict[str, dict[str, list]] = {}
        self.holoassist: dict[str, dict] = {}
        self.captaincook4d: list[dict] = []
        self.files: dict[Path, object] = {}

    # ground truth
    def ego_event(self, person, file, sub_type, window, text="Mind the pan.", **extra):
        ev = {"event_id": f"e{len(self.files)}", "sub_type": sub_type, "current_time_window": window}
        ev |= {"proactive_dialogue": dialogue(text)} | extra
        self.egolife.setdefault(person, {}).setdefault(file, []).append(ev)
        return self

    def holo_event(self, video, horizon, sub, window, text="Mind the pan.", **extra):
        video_gt = self.holoassist.setdefault(video, {"instant": {}, "short_term": {}})
        event = {
            "clip_id": video,
            "time_window": window,
            "observation": "invented",
            "dialogue": dialogue(text),
        }
        video_gt.setdefault(horizon, {}).setdefault(sub, []).append(event | extra)
        return self

    def cc_item(self, rec, start, end, sub="Error-Recovery", text="Mind the pan.", main=None, **extra):
        recs = [r for r in self.captaincook4d if r["recording_id"] == rec]
        if not recs:
            self.captaincook4d.append({"recording_id": rec, "activity_id": 1, "dialogue": {"items": []}})
            recs = self.captaincook4d[-1:]
        item = {"step_id": 1.0, "description": "invented", "start_time": start, "end_time": end}
        item |= {"error_tag": "Order Error", "dialogue": dialogue(text)}
        item["service_type"] = {"main": main or "Short-Term Proactive Service", "sub": sub}
        recs[0]["dialogue"]["items"].append(item | extra)
        return self

    # predictions (EgoMemo's folders)
    def pred(self, dataset, unit, *entries, day=None, suffix=None, response=RESPONSE):
        folder = (
            self.pred_root / RELEASE_PRED[dataset] / f"{unit}{SUFFIX[dataset] if suffix is None else suffix}"
        )
        path = (folder / f"DAY{day}" if day is not None else folder) / f"{response}.json"
        self.files.setdefault(path, [])
        self.files[path].extend(entries)
        return self

    def raw(self, relative: str, text: str):
        self.files[self.root / relative] = text
        return self

    def write(self) -> EgoServeTree:
        for person, files in self.egolife.items():
            for name, events in files.items():
                _dump(self.gt_root / "EgoLife" / person / f"{name}.json", events)
        if self.holoassist:
            _dump(self.gt_root / "HoloAssist" / "holoassist_service_annotations.json", self.holoassist)
        if self.captaincook4d:
            _dump(
                self.gt_root / "CaptainCook4D" / "captaincook4d_service_annotations.json", self.captaincook4d
            )
        for path, data in self.files.items():
            _dump(path, data)
        return self

    def gt(self, dataset: str) -> Path:
        return self.gt_root / RELEASE_GT[dataset]

    def args(self, *datasets: str) -> list[str]:
        out = []
        for ds in datasets:
            out += ["--gt", str(self.gt(ds)), "--pred", str(self.pred_root / RELEASE_PRED[ds])]
        return out


RELEASE_GT = {
    "egolife": "EgoLife",
    "holoassist": "HoloAssist/holoassist_service_annotations.json",
    "captaincook4d": "CaptainCook4D/captaincook4d_service_annotations.json",
}
RELEASE_PRED = {
    "egolife": "egolife_results",
    "holoassist": "holoassist_rebuttal",
    "captaincook4d": "captioncook4d_rebuttal",
}


def _dump(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data, indent=1))


@pytest.fixture
def tree(tmp_path) -> EgoServeTree:
    return EgoServeTree(tmp_path)


def score_cli(capsys, *argv: str) -> tuple[int, dict | None, str]:
    """``python -m eval.score`` in process: exit code, the last-line JSON (or None), stderr."""
    from eval.score import main

    code = main(list(argv))
    out, err = capsys.readouterr()
    last = out.strip().splitlines()[-1] if out.strip() else None
    return code, (json.loads(last) if last else None), err


@pytest.fixture
def egoserve(capsys):
    """``egoserve(*argv)``: eval.score --protocol egoserve, asserting exit 0; (result JSON, stderr)."""

    def run(*argv: str) -> tuple[dict, str]:
        code, res, err = score_cli(capsys, "--protocol", "egoserve", *argv)
        assert code == 0, err
        return res, err

    return run


# Headless Chromium for the browser tests (test_view.py, test_app.py): Debian's, from `make setup`.
CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """Debian's Chromium, headless, with a fresh profile (``make setup`` installs it)."""
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), f"{CHROMIUM} is missing: `make setup` installs Debian's chromium"
    profile = tmp_path_factory.mktemp("profile")
    with sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, args=FLAGS, viewport={"width": 1100, "height": 760}
        )
        yield ctx
        ctx.close()
