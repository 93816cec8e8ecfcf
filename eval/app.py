"""The live demo: a video, or a record of a built benchmark, streamed causally through one model in
the browser.

    python -m eval.app checkpoint=DIR port=7860
    python -m eval.app checkpoint=null records=/tmp/toy/records.jsonl        # the tiny model, any machine
    python -m eval.app checkpoint=DIR host=0.0.0.0 port=7860 threshold=0.4   # open it wider

Every ``key=value`` but ``host`` and ``port`` is an ``eval.run`` override (``conf/eval.yaml``:
``checkpoint``, ``records``, ``threshold``, ``benchmark``, ``render``...), composed the same way,
so the demo streams at the benchmark's step rate with the frame size the checkpoint was trained
with. It listens on 127.0.0.1 unless ``host=`` says otherwise.

The page (one inline HTML file, no outside asset): a video path (or an uploaded file) or a record
id, the instruction (empty: the record's own; a video needs one), real time or as fast as it can
go. While the stream runs it shows the current frame, P(</Response>) against the threshold as a
live curve, and each reply as it fires with its time; for a record, the targets and their windows
on the same axis and, once the stream ends, each fire's outcome from the scorer
(:meth:`eval.runners.ProtocolRunner.outcomes`, as ``eval.view`` draws it).

The server is the standard library's threaded HTTP server, with the steps as server-sent events
(``GET /stream``). One process holds one model and one lock: requests queue (the page says so)
and never run two streams at once; a client that goes away stops its stream at the next step. An
unreadable video, a missing record or an empty instruction is an ``error`` event with the reason,
shown on the page, and the server goes on serving. No webcam source: a browser camera needs a
secure context or localhost and a frame upload path, left for later.

Chosen over Gradio: Gradio 6 brings a web framework, a front-end bundle and dozens of packages for
what one page and one event stream do here, and its queue and streaming semantics would stand
between the engine's steps and the page; the standard library adds nothing to install.
"""

from __future__ import annotations

import base64
import io
import json
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from omegaconf import OmegaConf

from data_builders.config import RenderConfig
from data_builders.frames import stream_frames
from data_builders.records import RecordError, Stream, load_streams, resolve_video
from data_builders.video import VideoError, probe_video

#: Request body limit of an upload (bytes).
MAX_UPLOAD = 512 * 2**20


class ClientGone(Exception):
    """The page closed its event stream: the running stream stops."""


class Demo:
    """One model, its renderer, the benchmark and the records; :meth:`stream` runs one request."""

    def __init__(self, overrides: list[str]):
        from eval.model import load_model_and_processor
        from eval.render import TurnRenderer
        from eval.run import load_config, model_config, records_path

        cfg = load_config(overrides)
        self.cfg = cfg
        self.model, processor = load_model_and_processor(model_config(cfg), cache_dir=cfg.paths.cache_dir)
        self.model.eval()
        self.render = RenderConfig(**OmegaConf.to_container(cfg.render, resolve=True))
        self.renderer = TurnRenderer(processor, self.render, cfg.benchmark.steps_per_second)
        self.records = records_path(cfg) if cfg.records is not None or cfg.data.dir is not None else None
        self.streams = {s.id: s for s in load_streams(self.records)} if self.records else {}
        self.lock = threading.Lock()
        self.uploads = Path(tempfile.mkdtemp(prefix="eval-app-"))

    def stream_of(self, video: str, record: str, instruction: str) -> tuple[Stream, Path]:
        """The stream a request asks for and its video file; bad input raises ``ValueError``."""
        if record:
            if record not in self.streams:
                raise ValueError(f"no record {record!r} in {self.records}")
            s = self.streams[record]
            if instruction.strip():
                s = _with(s, instruction)
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

    def stream(self, send, video: str, record: str, instruction: str, realtime: bool) -> None:
        """Run one request, calling ``send(event, data)`` per step; the lock makes requests queue."""
        import torch

        from eval.runners import get_runner
        from eval.streaming import EngineConfig, StreamingEngine

        try:
            s, path = self.stream_of(video, record, instruction)
            frames = stream_frames(s, path, self.render, self.renderer.steps_per_second)
        except (ValueError, VideoError, RecordError, OSError) as exc:
            send("error", {"message": str(exc)})
            return
        if not self.lock.acquire(blocking=False):
            send("queued", {"message": "another stream is running: queued"})
            self.lock.acquire()
        try:
            bench = self.cfg.benchmark
            send(
                "start",
                {
                    "id": s.id,
                    "duration": s.duration,
                    "threshold": self.cfg.threshold,
                    "instruction": s.instruction,
                    "targets": [
                        {
                            "t": t.time - s.clip_start,
                            "w": None if t.window is None else [w - s.clip_start for w in t.window],
                            "x": t.content,
                        }
                        for t in s.targets
                    ]
                    if record
                    else [],
                },
            )
            engine = StreamingEngine(
                self.model,
                self.renderer,
                EngineConfig(threshold=self.cfg.threshold, max_new_tokens=self.cfg.max_new_tokens),
            )
            began = time.monotonic()

            def hook(eng, k: int) -> None:
                step = eng.rows[0].result.steps[-1]
                rel = step.time - s.clip_start
                if realtime:
                    time.sleep(max(0.0, began + rel - time.monotonic()))
                text = None
                if step.fired:
                    [reply] = eng.rows[0].result.replies(bench.categories)[-1:] or [None]
                    text = reply.text if reply is not None else step.text
                send(
                    "step",
                    {
                        "k": k,
                        "t": rel,
                        "p": step.p_response,
                        "fired": step.fired,
                        "text": text,
                        "frame": _jpeg(frames[k]),
                    },
                )

            engine.step_hook = hook
            with torch.inference_mode():
                [result] = engine.run([s], [frames])
            runner = get_runner(bench.protocol)
            row = runner.prediction_row(s, result, bench)
            done: dict[str, Any] = {"replies": row["replies"]}
            if record:
                o = runner.outcomes([s], [row], bench)[s.id]
                done["outcomes"] = [f.outcome for f in o.fires]
                done["targets"] = o.targets
            send("done", done)
        except ClientGone:
            pass
        finally:
            self.lock.release()


def _with(s: Stream, instruction: str) -> Stream:
    from dataclasses import replace

    return replace(s, instruction=instruction.strip())


def _jpeg(frame) -> str:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(frame).save(buf, format="JPEG", quality=80)
    return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode()


def handler(demo: Demo) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet: the page shows what happens
            pass

        def _reply(self, code: int, body: bytes, kind: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):  # noqa: N802 (http.server's name)
            url = urlparse(self.path)
            if url.path == "/":
                return self._reply(200, PAGE.encode(), "text/html; charset=utf-8")
            if url.path == "/records":
                return self._reply(200, json.dumps(sorted(demo.streams)).encode(), "application/json")
            if url.path != "/stream":
                return self._reply(404, b"not found", "text/plain")
            q = {k: v[0] for k, v in parse_qs(url.query).items()}
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
                demo.stream(
                    send,
                    q.get("video", ""),
                    q.get("record", ""),
                    q.get("instruction", ""),
                    q.get("realtime") == "1",
                )
            except ClientGone:
                pass

        def do_POST(self):  # noqa: N802
            if urlparse(self.path).path != "/upload":
                return self._reply(404, b"not found", "text/plain")
            n = int(self.headers.get("Content-Length", 0))
            if n <= 0 or n > MAX_UPLOAD:
                return self._reply(
                    400,
                    json.dumps({"error": f"upload of {n} bytes: 1 to {MAX_UPLOAD}"}).encode(),
                    "application/json",
                )
            name = Path(self.headers.get("X-Filename", "upload.mp4")).name or "upload.mp4"
            path = demo.uploads / f"{time.time_ns()}-{name}"
            path.write_bytes(self.rfile.read(n))
            return self._reply(200, json.dumps({"path": str(path)}).encode(), "application/json")

    return Handler


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
    server = serve(demo, opts.get("host", "127.0.0.1"), int(opts.get("port", 7860)))
    host, port = server.server_address[:2]
    print(json.dumps({"url": f"http://{host}:{port}/", "records": len(demo.streams)}), flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.shutdown()
    return 0


PAGE = r"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>proactive assistant demo</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:14px;color:#222}
#form input[type=text]{width:320px}#form>*{margin:0 8px 6px 0}
#frame{width:256px;height:192px;object-fit:contain;background:#111;border:1px solid #ccc}
#main{display:flex;gap:14px;align-items:flex-start}#curve{border:1px solid #ccc}
#err{color:#b00;font-weight:600}#status{color:#555}
.reply{margin:3px 0}.reply b{display:inline-block;min-width:60px}
.tag{padding:0 4px;border-radius:3px;color:#fff;font-size:12px;margin-left:6px}
</style></head><body>
<h3>Proactive streaming assistant</h3>
<div id="form">
<label>video path <input type="text" id="video"></label>
<label>or upload <input type="file" id="file" accept="video/*"></label>
<label>or record <select id="record"><option value="">-</option></select></label><br>
<label>instruction <input type="text" id="instruction" placeholder="empty: the record's own"></label>
<label><input type="checkbox" id="realtime"> real time</label>
<button id="go">Run</button> <span id="status"></span> <div id="err"></div>
</div>
<div id="main"><img id="frame" alt=""><canvas id="curve" width="640" height="200"></canvas></div>
<div id="replies"></div>
<script>
const $=id=>document.getElementById(id);
const C={hit:'#2ca02c',early:'#ff7f0e',late:'#9467bd',redundant:'#8c8c8c',false_alarm:'#d62728',wrong:'#e377c2',unclassified:'#1f77b4'};
fetch('/records').then(r=>r.json()).then(ids=>{for(const i of ids){const o=document.createElement('option');o.textContent=i;$('record').appendChild(o);}});
let es=null,S=null;
function esc(s){return String(s==null?'':s).replace(/[&<>]/g,c=>({'&':'&amp;','<':'&lt;','>':'&gt;'}[c]));}
function draw(){const cv=$('curve'),g=cv.getContext('2d'),w=cv.width,h=cv.height;g.clearRect(0,0,w,h);if(!S)return;
  const X=t=>t/Math.max(S.duration,1e-9)*(w-1),Y=p=>h-6-p*(h-20);
  for(const t of S.targets){if(t.w){g.fillStyle='#d8f0d8';g.fillRect(X(t.w[0]),0,Math.max(2,X(t.w[1])-X(t.w[0])),h);}
    g.strokeStyle='#2ca02c';g.lineWidth=2;g.beginPath();g.moveTo(X(t.t),0);g.lineTo(X(t.t),h);g.stroke();g.lineWidth=1;}
  g.strokeStyle='#999';g.setLineDash([4,4]);g.beginPath();g.moveTo(0,Y(S.threshold));g.lineTo(w,Y(S.threshold));g.stroke();g.setLineDash([]);
  g.strokeStyle='#1f77b4';g.beginPath();S.steps.forEach((s,i)=>{i?g.lineTo(X(s.t),Y(s.p)):g.moveTo(X(s.t),Y(s.p));});g.stroke();
  S.fires.forEach((f,i)=>{g.fillStyle=S.outcomes?C[S.outcomes[i]]:'#d62728';const x=X(f.t);g.beginPath();g.moveTo(x-5,1);g.lineTo(x+5,1);g.lineTo(x,13);g.fill();});}
function run(video){
  if(es)es.close();$('err').textContent='';$('replies').textContent='';S=null;draw();
  const q=new URLSearchParams({video:video||'',record:$('record').value,instruction:$('instruction').value,realtime:$('realtime').checked?'1':'0'});
  es=new EventSource('/stream?'+q);$('status').textContent='starting';
  es.addEventListener('queued',e=>{$('status').textContent=JSON.parse(e.data).message;});
  es.addEventListener('error',e=>{if(e.data){$('err').textContent=JSON.parse(e.data).message;$('status').textContent='';
    document.body.dataset.errors=String(Number(document.body.dataset.errors||0)+1);}es.close();});
  es.addEventListener('start',e=>{S=Object.assign(JSON.parse(e.data),{steps:[],fires:[]});$('status').textContent='streaming '+S.id;});
  es.addEventListener('step',e=>{const d=JSON.parse(e.data);S.steps.push(d);$('frame').src=d.frame;
    if(d.fired){S.fires.push(d);const r=document.createElement('div');r.className='reply';r.innerHTML='<b>'+d.t.toFixed(1)+' s</b> <span class="text">'+esc(d.text)+'</span>';$('replies').appendChild(r);}
    $('status').textContent='streaming '+S.id+': '+d.t.toFixed(1)+' s';draw();});
  es.addEventListener('done',e=>{const d=JSON.parse(e.data);es.close();$('status').textContent='done: '+S.fires.length+' replies';
    if(d.outcomes){S.outcomes=d.outcomes;[...$('replies').children].forEach((r,i)=>{r.insertAdjacentHTML('beforeend','<span class="tag" style="background:'+C[d.outcomes[i]]+'">'+d.outcomes[i].replace('_',' ')+'</span>');});}
    document.body.dataset.done=String(Number(document.body.dataset.done||0)+1);draw();});
}
$('go').addEventListener('click',()=>{const f=$('file').files[0];
  if(!f)return run($('video').value);
  fetch('/upload',{method:'POST',headers:{'X-Filename':f.name},body:f}).then(r=>r.json()).then(j=>j.error?($('err').textContent=j.error):run(j.path));});
</script></body></html>
"""


if __name__ == "__main__":
    sys.exit(main())
