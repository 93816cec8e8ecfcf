"""The demo's streams (``eval.app.server`` serves them): one model and one lock, a request streamed
through the engine as server-sent events, a checkpoint loaded in place of the model held, and a
webcam's frames as the engine reads them (:class:`LiveFrames`). See ``eval.app.server`` for the whole.

A request names only what the server was started with: a video in the records' video folders, the
upload folder or ``allow_dirs``; a checkpoint (a plain folder path, never Hydra override syntax) in
the start checkpoint's folder or ``allow_dirs`` (:mod:`eval.app.guard`). An upload is deleted once
its stream ends, and the upload folder when the server stops (:meth:`Demo.close`). Whatever the
engine raises ends the stream with an ``error`` event and frees the lock."""

from __future__ import annotations

import base64
import io
import logging
import os
import shutil
import tempfile
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import OmegaConf

from data_builders.config import RenderConfig
from data_builders.frames import stream_frames
from data_builders.record_io import load_streams, resolve_video
from data_builders.records import RecordError, Stream, check_plain_text
from data_builders.video import MAX_ASPECT_RATIO, VideoError, fit_pixels, probe_video
from eval.app.guard import inside, plain_path, resolved_dirs

log = logging.getLogger("eval.app.server")

#: The longest webcam stream (s): its step clock is laid out up to here.
WEBCAM_LIMIT_S = 3600.0
#: A webcam stream ends once no frame came for this long (s), so a page that stopped sending frees the model.
WEBCAM_IDLE_S = 30.0
#: While the engine waits for a webcam frame, the page is pinged this often (s): one gone stops the stream.
PING_S = 1.0

#: Frames posted and not yet read that a webcam stream keeps: a page posting faster than the engine
#: steps has its oldest waiting frame dropped (the stream stays live; ``LiveFrames.dropped`` counts).
MAX_QUEUED_FRAMES = 8
#: The largest webcam frame (pixels), read from the image's header before anything is decoded.
MAX_FRAME_PIXELS = 3840 * 2160
#: The shortest side (px) of a webcam frame once sized to the render's pixel budget: the image
#: processor takes a side of 1 or 3 px for the colour channels.
MIN_FRAME_SIDE = 8
#: The image formats a webcam frame may come in (the page posts JPEG).
FRAME_FORMATS = ("JPEG", "PNG")

#: ``send(event, data)``: one server-sent event to the page; raises :class:`ClientGone` once it left.
Send = Callable[[str, dict], None]


class ClientGone(Exception):
    """The page closed its event stream: the running stream stops."""


class WebcamStopped(Exception):
    """A webcam stream's end: the page said stop, or sent no frame for :data:`WEBCAM_IDLE_S`."""


class FrameRefused(ValueError):
    """A posted webcam frame the checks refuse (not an image, too many pixels, an aspect ratio or a
    side the model cannot take): the poster gets a 400 and the stream ends with it as its error."""


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
    """A webcam's frames as the engine reads them: step k's frame is the k-th one read from the
    queue of posted frames, and reading it waits until one has come (the engine, with
    ``frame_chunk=1``, asks for one frame at a time; asking again for the frame just read returns
    it). Its length is the step limit. At most :data:`MAX_QUEUED_FRAMES` wait: past that the oldest
    is dropped. While it waits it calls ``ping`` every :data:`PING_S` (a page gone raises
    :class:`ClientGone` there); after :meth:`stop` a read past the posted frames raises
    :class:`WebcamStopped`, and after a refused frame :class:`FrameRefused`."""

    def __init__(self, limit: int, max_pixels: int, ping: Callable[[], None]):
        self.limit = limit
        self.max_pixels = max_pixels
        self.ping = ping
        self.pending: deque[np.ndarray] = deque()
        self.read = -1  # the index of ``current``, the frame read last
        self.current: np.ndarray | None = None
        self.posted = self.dropped = 0
        self.stopped = False
        self.refused: str | None = None
        self.changed = threading.Condition()

    def __len__(self) -> int:
        return self.limit

    def push(self, blob: bytes) -> int:
        """Add a posted frame (JPEG or PNG), sized to the render's pixel budget; returns the frames
        posted so far. A frame the checks refuse raises :class:`FrameRefused` (and ends the stream),
        a stopped stream :class:`WebcamStopped`."""
        if self.stopped or self.refused:
            raise WebcamStopped("the webcam stream has ended")
        try:
            frame = self.checked(blob)
        except FrameRefused as exc:
            with self.changed:
                self.refused = str(exc)
                self.changed.notify_all()
            raise
        with self.changed:
            if self.stopped:
                raise WebcamStopped("the webcam stream has ended")
            if len(self.pending) >= MAX_QUEUED_FRAMES:
                self.pending.popleft()
                self.dropped += 1
            self.pending.append(frame)
            self.posted += 1
            self.changed.notify_all()
            return self.posted

    def checked(self, blob: bytes) -> np.ndarray:
        """The ``(H, W, 3)`` frame of ``blob`` sized to the pixel budget, or :class:`FrameRefused`:
        its size is read from the header and checked before the pixels are decoded, then its sized
        shape gets the checks a video's frames get (aspect ratio, shortest side)."""
        from PIL import Image

        what = f"webcam frame of {len(blob)} bytes"
        try:
            img = Image.open(io.BytesIO(blob), formats=FRAME_FORMATS)
        except Exception as exc:  # PIL's errors for bytes that are no image vary by format
            raise FrameRefused(f"{what} is not a JPEG or PNG image ({exc})") from None
        with img:
            w, h = img.size
            if w * h > MAX_FRAME_PIXELS:
                raise FrameRefused(f"{what}: {w} x {h} px is over the {MAX_FRAME_PIXELS} pixel limit")
            sh, sw = fit_pixels(h, w, self.max_pixels)
            if max(sw, sh) > MAX_ASPECT_RATIO * min(sw, sh) or min(sw, sh) < MIN_FRAME_SIDE:
                raise FrameRefused(
                    f"{what}: {w} x {h} px (sized to {sw} x {sh}); the model takes an aspect ratio up to "
                    f"{MAX_ASPECT_RATIO}:1 and sides of {MIN_FRAME_SIDE} px or more"
                )
            try:
                rgb = img.convert("RGB")
            except Exception as exc:
                raise FrameRefused(f"{what}: {w} x {h} px does not decode ({exc})") from None
        if (sh, sw) != (h, w):
            rgb = rgb.resize((sw, sh), Image.BILINEAR)
        return np.asarray(rgb)

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
                if k == self.read:
                    return self.current
                if k != self.read + 1:
                    raise IndexError(
                        f"webcam frame {k} asked after frame {self.read}: frames are read in order"
                    )
                self.changed.wait_for(lambda: self.pending or self.stopped or self.refused, timeout=PING_S)
                if self.refused:
                    raise FrameRefused(self.refused)
                if self.pending:
                    self.current, self.read = self.pending.popleft(), k
                    return self.current
                if self.stopped:
                    raise WebcamStopped("stopped")
            if time.monotonic() > idle:
                raise WebcamStopped(f"no frame for {WEBCAM_IDLE_S:g} s")
            self.ping()


class Demo:
    """One model, its renderer, the benchmark and the records; :meth:`stream` runs one request,
    :meth:`load` swaps the model. Counters for the page and the tests: ``running`` (streams in the
    engine now), ``most_running`` (the most at once, ever), ``steps_run`` (engine steps, all streams)."""

    def __init__(self, overrides: list[str], allow_dirs: tuple[str, ...] = ()):
        from eval.run import load_config

        self.overrides = [o for o in overrides if _key(o) != "checkpoint"]
        asked = [o.split("=", 1)[1] for o in overrides if _key(o) == "checkpoint"]
        cfg = load_config(self.overrides)  # all but the checkpoint: a bad value stops the start
        self.cfg = cfg
        self.note: str | None = None  # why no records were read (none were named)
        self.records, self.streams = self._records(cfg)
        self.lock = threading.Lock()
        self.uploads = Path(tempfile.mkdtemp(prefix="eval-app-")).resolve()
        self.allow_dirs = resolved_dirs(list(allow_dirs))
        videos = {resolve_video(s, self.records, cfg.video_root).parent for s in self.streams.values()}
        self.video_dirs = resolved_dirs([*sorted(videos), self.uploads, *self.allow_dirs])
        start = asked[-1].strip() if asked else "null"
        parent = [] if start in ("null", "") or "${" in start else [Path(start).expanduser().parent]
        self.checkpoint_dirs = resolved_dirs([*parent, *self.allow_dirs])
        self.model = self.renderer = self.render = None
        self.checkpoint: str | None = None
        self.error: str | None = None  # why no model is held
        self.webcams: dict[str, LiveFrames] = {}
        self.running = self.most_running = self.steps_run = 0
        self.load(start, page=False)

    def _records(self, cfg) -> tuple[Path | None, dict[str, Stream]]:
        """The records and their streams. Records are optional: when no ``records=``, ``data``,
        ``data.*`` or ``split=`` override names them and the default split was not built, the demo
        starts without (:attr:`note` says why); a named set that does not load stops the start."""
        from eval.config import records_path

        named = any(
            _key(o) in ("records", "split", "data") or _key(o).startswith("data.") for o in self.overrides
        )
        try:
            path = records_path(cfg)
            return path, {s.id: s for s in load_streams(path)}
        except (FileNotFoundError, ValueError) as exc:
            if named or isinstance(exc, RecordError):
                raise
            self.note = f"no records ({exc}); a video path, an upload and the webcam need none"
            return None, {}

    def close(self) -> int:
        """Delete the upload folder (the server stops); returns the uploads it held."""
        held = sum(1 for _ in self.uploads.glob("*")) if self.uploads.is_dir() else 0
        shutil.rmtree(self.uploads, ignore_errors=True)
        return held

    def load(self, checkpoint: str, page: bool = True) -> str | None:
        """Load ``checkpoint`` (a dir, or ``null``: the tiny model) in place of the model held, under
        the stream lock (a running stream finishes first). Returns None, or why it did not load
        (``<dir>: <reason>``): the model held stays; with none held, every request is told why.
        It must be a plain path (:func:`~eval.app.guard.plain_path`) and, asked by the ``page``, in
        :attr:`checkpoint_dirs`."""
        from engine.render import TurnRenderer
        from eval.run import load_config, load_model

        checkpoint = checkpoint.strip()
        with self.lock:
            try:
                if not checkpoint:
                    raise ValueError("give a checkpoint dir, or null for the tiny model")
                checkpoint = plain_path("checkpoint", checkpoint)
                if page and checkpoint != "null":
                    inside("checkpoint", checkpoint, self.checkpoint_dirs)
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
        """The stream a request asks for and its video file; bad input raises ``ValueError`` (an
        instruction holding a control token of the turn format among it, naming the token)."""
        check_plain_text(instruction, "instruction")
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
        if not inside("video", video, self.video_dirs).is_file():
            raise ValueError(f"video {video}: not a file")
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
        """Run one request, calling ``send(event, data)``: ``error`` (the reason) for bad input, no
        model or whatever the engine raised, ``queued`` while another stream runs, then ``start``, one
        ``step`` per engine step and ``done``. Requests queue on the lock; a ``send`` that raises
        :class:`ClientGone` stops it. An upload it names is deleted once it ends."""
        try:
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
            except Exception as exc:  # the engine's failure, whatever it is, is the page's message
                log.error("eval.app.server: stream %s failed", s.id, exc_info=True)
                message = str(exc) if isinstance(exc, FrameRefused) else f"{s.id}: the engine failed ({exc})"
                _tell(send, "error", {"message": message})
            finally:
                self.lock.release()
        finally:
            self._drop_upload(request.video)

    def _drop_upload(self, video: str) -> None:
        """Delete ``video`` if it is one of the upload folder's files (its stream has ended)."""
        if video and Path(os.path.realpath(video)).parent == self.uploads:
            Path(os.path.realpath(video)).unlink(missing_ok=True)

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

        from data_builders.turn_grammar import parse_turn
        from engine.streaming import EngineConfig, StreamingEngine

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
                step=cfg.engine_step,
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
        from benchmarks.runners import get_runner

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


def _tell(send: Send, event: str, data: dict) -> None:
    """``send`` for a last event: a page already gone is no error."""
    try:
        send(event, data)
    except ClientGone:
        pass


def _webcam_stream(instruction: str) -> Stream:
    """The webcam's stream: its clock from 0 to :data:`WEBCAM_LIMIT_S`; no video file."""
    if not instruction:
        raise ValueError("give an instruction: the webcam has none of its own")
    check_plain_text(instruction, "instruction")
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
