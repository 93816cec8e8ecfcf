"""The demo's streams (``eval.app`` serves them): one model and one lock, a request streamed
through the engine as server-sent events, a checkpoint loaded in place of the model held, and a
webcam's frames as the engine reads them (:class:`LiveFrames`). See ``eval.app`` for the whole."""

from __future__ import annotations

import base64
import io
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import OmegaConf

from data_builders.config import RenderConfig
from data_builders.frames import stream_frames
from data_builders.records import RecordError, Stream, load_streams, resolve_video
from data_builders.video import VideoError, decode_frame, fit_pixels, probe_video

#: The longest webcam stream (s): its step clock is laid out up to here.
WEBCAM_LIMIT_S = 3600.0
#: A webcam stream ends once no frame came for this long (s), so a page that stopped sending frees the model.
WEBCAM_IDLE_S = 30.0
#: While the engine waits for a webcam frame, the page is pinged this often (s): one gone stops the stream.
PING_S = 1.0

#: ``send(event, data)``: one server-sent event to the page; raises :class:`ClientGone` once it left.
Send = Callable[[str, dict], None]


class ClientGone(Exception):
    """The page closed its event stream: the running stream stops."""


class WebcamStopped(Exception):
    """A webcam stream's end: the page said stop, or sent no frame for :data:`WEBCAM_IDLE_S`."""


@dataclass(frozen=True)
class Request:
    """What one ``GET /stream`` asks for: a video path, a record id or the webcam, the instruction."""

    video: str = ""
    record: str = ""
    instruction: str = ""
    realtime: bool = False
    webcam: bool = False

    @classmethod
    def from_query(cls, q: dict[str, str]) -> Request:
        return cls(
            video=q.get("video", ""),
            record=q.get("record", ""),
            instruction=q.get("instruction", "").strip(),
            realtime=q.get("realtime") == "1",
            webcam=q.get("source") == "webcam",
        )


class LiveFrames:
    """A webcam's frames as the engine reads them: step k's frame is the k-th one posted, and reading
    it waits until it has come (the engine, with ``frame_chunk=1``, asks for one frame at a time). Its
    length is the step limit. While it waits it calls ``ping`` every :data:`PING_S` (a page gone
    raises :class:`ClientGone` there); after :meth:`stop` a read past the posted frames raises
    :class:`WebcamStopped`. Frames before the one read are dropped."""

    def __init__(self, limit: int, max_pixels: int, ping: Callable[[], None]):
        self.limit = limit
        self.max_pixels = max_pixels
        self.ping = ping
        self.frames: list[np.ndarray | None] = []
        self.dropped = 0  # frames before this one are None
        self.stopped = False
        self.changed = threading.Condition()

    def __len__(self) -> int:
        return self.limit

    def push(self, jpeg: bytes) -> int:
        """Add a posted frame (any image PIL reads), sized to the render's pixel budget; returns the
        frames posted so far. A bad image raises ``ValueError``, a stopped stream :class:`WebcamStopped`."""
        try:
            frame = decode_frame(jpeg)
        except Exception as exc:  # PIL's errors for bytes that are no image vary by format
            raise ValueError(f"webcam frame of {len(jpeg)} bytes is not an image ({exc})") from None
        h, w = fit_pixels(*frame.shape[:2], self.max_pixels)
        if (h, w) != frame.shape[:2]:
            from PIL import Image

            frame = np.asarray(Image.fromarray(frame).resize((w, h), Image.BILINEAR))
        with self.changed:
            if self.stopped:
                raise WebcamStopped("the webcam stream has ended")
            self.frames.append(frame)
            self.changed.notify_all()
            return len(self.frames)

    def stop(self) -> None:
        with self.changed:
            self.stopped = True
            self.changed.notify_all()

    def __getitem__(self, index: int | slice) -> np.ndarray:
        if isinstance(index, slice):
            return np.stack([self._wait(k) for k in range(*index.indices(self.limit))])
        return self._wait(index)

    def _wait(self, k: int) -> np.ndarray:
        idle = time.monotonic() + WEBCAM_IDLE_S
        while True:
            with self.changed:
                self.changed.wait_for(lambda: len(self.frames) > k or self.stopped, timeout=PING_S)
                if len(self.frames) > k:
                    for j in range(self.dropped, k):
                        self.frames[j] = None
                    self.dropped = max(self.dropped, k)
                    return self.frames[k]
                if self.stopped:
                    raise WebcamStopped("stopped")
            if time.monotonic() > idle:
                raise WebcamStopped(f"no frame for {WEBCAM_IDLE_S:g} s")
            self.ping()


class Demo:
    """One model, its renderer, the benchmark and the records; :meth:`stream` runs one request,
    :meth:`load` swaps the model. Counters for the page and the tests: ``running`` (streams in the
    engine now), ``most_running`` (the most at once, ever), ``steps_run`` (engine steps, all streams)."""

    def __init__(self, overrides: list[str]):
        from eval.config import records_path
        from eval.run import load_config

        self.overrides = [o for o in overrides if _key(o) != "checkpoint"]
        asked = [o.split("=", 1)[1] for o in overrides if _key(o) == "checkpoint"]
        cfg = load_config(self.overrides)  # all but the checkpoint: a bad value stops the start
        self.cfg = cfg
        self.records = records_path(cfg) if cfg.records is not None or cfg.data.dir is not None else None
        self.streams = {s.id: s for s in load_streams(self.records)} if self.records else {}
        self.lock = threading.Lock()
        self.uploads = Path(tempfile.mkdtemp(prefix="eval-app-"))
        self.model = self.renderer = self.render = None
        self.checkpoint: str | None = None
        self.error: str | None = None  # why no model is held
        self.webcams: dict[str, LiveFrames] = {}
        self.running = self.most_running = self.steps_run = 0
        self.load(asked[-1] if asked else "null")

    def load(self, checkpoint: str) -> str | None:
        """Load ``checkpoint`` (a dir, or ``null``: the tiny model) in place of the model held, under
        the stream lock (a running stream finishes first). Returns None, or why it did not load
        (``<dir>: <reason>``): the model held stays; with none held, every request is told why."""
        from eval.engine.render import TurnRenderer
        from eval.run import load_config, load_model

        checkpoint = checkpoint.strip()
        with self.lock:
            try:
                if not checkpoint:
                    raise ValueError("give a checkpoint dir, or null for the tiny model")
                cfg = load_config([*self.overrides, f"checkpoint={checkpoint}"])
                model, processor = load_model(cfg)
                render = RenderConfig(**OmegaConf.to_container(cfg.render, resolve=True))
                renderer = TurnRenderer(processor, render, cfg.benchmark.steps_per_second)
            except Exception as exc:  # whatever a folder makes loading raise is the page's message
                reason = str(exc) or type(exc).__name__
                reason = reason if not checkpoint or checkpoint in reason else f"{checkpoint}: {reason}"
                if self.model is None:
                    self.error = reason
                return reason
            self.cfg, self.model, self.render, self.renderer = cfg, model.eval(), render, renderer
            self.checkpoint, self.error = checkpoint, None
        return None

    def state(self) -> dict[str, Any]:
        """What the page shows before a stream (``GET /state``): records, model, counters."""
        return {
            "records": sorted(self.streams),
            "checkpoint": self.checkpoint,
            "error": self.error,
            "steps_per_second": self.cfg.benchmark.steps_per_second,
            "running": self.running,
            "most_running": self.most_running,
            "steps_run": self.steps_run,
        }

    def stream_of(self, video: str, record: str, instruction: str) -> tuple[Stream, Path]:
        """The stream a request asks for and its video file; bad input raises ``ValueError``."""
        if record:
            if record not in self.streams:
                raise ValueError(f"no record {record!r} in {self.records}")
            s = self.streams[record]
            if instruction.strip():
                s = replace(s, instruction=instruction.strip())
            return s, resolve_video(s, self.records, self.cfg.video_root)
        if not instruction.strip():
            raise ValueError("give an instruction: a video has none of its own")
        if not video:
            raise ValueError("give a video path, an upload or a record id")
        info = probe_video(video)
        s = Stream(
            id=Path(video).name,
            source="demo",
            task="demo",
            video=str(video),
            clip_start=0.0,
            clip_end=info.duration,
            instruction=instruction.strip(),
        )
        return s, Path(video)

    def stream(self, send: Send, request: Request) -> None:
        """Run one request, calling ``send(event, data)``: ``error`` (the reason) for bad input or no
        model, ``queued`` while another stream runs, then ``start``, one ``step`` per engine step and
        ``done``. Requests queue on the lock; a ``send`` that raises :class:`ClientGone` stops it."""
        try:
            if self.model is None:
                raise ValueError(self.error)
            if request.webcam:
                s, path = _webcam_stream(request.instruction), None
            else:
                s, path = self.stream_of(request.video, request.record, request.instruction)
        except (ValueError, VideoError, RecordError, OSError) as exc:
            return send("error", {"message": str(exc)})
        if not self.lock.acquire(blocking=False):
            send("queued", {"message": "another stream is running: queued"})
            self.lock.acquire()
        try:
            self._run(send, s, path, request)
        except ClientGone:
            pass
        finally:
            self.lock.release()

    def _run(self, send: Send, s: Stream, path: Path | None, request: Request) -> None:
        """Stream ``s`` (the lock held): its frames (the webcam's when ``path`` is None), then the steps."""
        if self.model is None:  # a load failed while this request waited (the model held stays)
            return send("error", {"message": self.error})
        sps = self.renderer.steps_per_second
        session = None
        if path is None:
            session = uuid.uuid4().hex
            frames = self.webcams[session] = LiveFrames(
                round(s.duration * sps), self.render.max_pixels, lambda: send("ping", {})
            )
        else:
            try:
                frames = stream_frames(s, path, self.render, sps)
            except (VideoError, OSError) as exc:
                return send("error", {"message": str(exc)})
        try:
            send("start", self._start(s, request, session))
            result = self._steps(send, s, frames, request.realtime and session is None)
            send("done", self._done(s, result, bool(request.record)))
        finally:
            self.webcams.pop(session, None)

    def _start(self, s: Stream, request: Request, session: str | None) -> dict[str, Any]:
        """The ``start`` event: the stream, its axis (no duration for the webcam) and, for a record,
        the targets and their windows on the clip's clock."""
        return {
            "id": s.id,
            "duration": None if session else s.duration,
            "threshold": self.cfg.threshold,
            "instruction": s.instruction,
            "steps_per_second": self.renderer.steps_per_second,
            "session": session,
            "targets": [
                {
                    "t": t.time - s.clip_start,
                    "w": None if t.window is None else [w - s.clip_start for w in t.window],
                    "x": t.content,
                }
                for t in s.targets
            ]
            if request.record
            else [],
        }

    def _steps(self, send: Send, s: Stream, frames, realtime: bool):
        """Run the engine over ``frames``, a ``step`` event after each step (with ``realtime``, no
        earlier than its time on the stream's clock); returns the stream's result. A webcam's end
        returns the steps run so far."""
        import torch

        from eval.engine.streaming import EngineConfig, StreamingEngine
        from rewards.turns import parse_turn

        live = isinstance(frames, LiveFrames)
        cfg = self.cfg
        engine = StreamingEngine(
            self.model,
            self.renderer,
            EngineConfig(
                threshold=cfg.threshold,
                max_new_tokens=cfg.max_new_tokens,
                frame_window=cfg.frame_window,
                compile=cfg.compile,
                frame_chunk=1 if live else EngineConfig.frame_chunk,
            ),
        )
        began = time.monotonic()

        def hook(eng, k: int) -> None:
            self.steps_run += 1
            step = eng.rows[0].result.steps[-1]
            rel = step.time - s.clip_start
            if realtime:
                time.sleep(max(0.0, began + rel - time.monotonic()))
            text = parse_turn(step.text, allowed=cfg.benchmark.categories).text if step.fired else None
            data = {"k": k, "t": rel, "p": step.p_response, "fired": step.fired, "text": text}
            send("step", data | {"frame": _jpeg(frames[k])})

        engine.step_hook = hook
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        try:
            with torch.inference_mode():
                [result] = engine.run([s], [frames])
        except WebcamStopped:
            result = engine.rows[0].result
        finally:
            self.running -= 1
        return result

    def _done(self, s: Stream, result, record: bool) -> dict[str, Any]:
        """The ``done`` event: the replies, the step count and, for a record, each fire's outcome."""
        from eval.runners import get_runner

        bench = self.cfg.benchmark
        runner = get_runner(bench.protocol)
        row = runner.prediction_row(s, result, bench)
        done: dict[str, Any] = {"replies": row["replies"], "steps": len(result.steps)}
        if record:
            o = runner.outcomes([s], [row], bench)[s.id]
            done["outcomes"] = [f.outcome for f in o.fires]
            done["targets"] = o.targets
        return done


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def _webcam_stream(instruction: str) -> Stream:
    """The webcam's stream: its clock from 0 to :data:`WEBCAM_LIMIT_S`; no video file."""
    if not instruction:
        raise ValueError("give an instruction: the webcam has none of its own")
    return Stream(
        id="webcam",
        source="demo",
        task="demo",
        video="webcam",
        clip_start=0.0,
        clip_end=WEBCAM_LIMIT_S,
        instruction=instruction,
    )


def _jpeg(frame) -> str:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(frame).save(buf, format="JPEG", quality=80)
    return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode()
