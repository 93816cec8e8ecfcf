"""The live demo's page (``eval.app.server`` serves it at ``/``): one HTML file, no outside asset.

A checkpoint field (``POST /checkpoint``), the source (a video path, an upload through ``POST
/upload``, a record of ``GET /state``'s list, or the webcam), the instruction and the real-time
switch. A stream is an ``EventSource`` on ``GET /stream``: the current frame, the step count, the
curve of P(</Response>) against the threshold with the targets and their windows, and the replies
with their times (their outcomes once a record's stream ends). The webcam's frames are grabbed from
``getUserMedia`` into a canvas once per step and posted as JPEG (``POST /frame``); ``Stop`` posts
``/stop``. The token of the page's address (``/?token=...``) is taken from it (the address bar
then shows ``/``) and sent with each ``fetch`` as ``Authorization: token ...``; the event stream
carries the cookie the page's answer set. ``document.body.dataset`` counts ``errors``, ``done`` streams and checkpoint ``loads``,
and ``S`` holds the stream's events (each step with ``arrived``: seconds since the request), for
the browser tests. Opened fresh, the empty video box says what to do first (:data:`HINT`) and the
empty plot what it will show; the plot has a seconds axis, and its colours are the viewer's
(``eval.app.view``: a target brown, a hit green)."""

import json

from eval.app.view import COLOURS, TARGET_COLOUR, TICK_STEPS, WINDOW_COLOUR

#: What the empty video box says before the first stream: what to do first.
HINT = {
    "records": "Pick a record under \u201cor record\u201d, then press Run: its frames play here.",
    "none": "Type a video path, upload a video or press Webcam, then Run: the frames play here.",
}

TEMPLATE = r"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>proactive assistant demo</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:14px;color:#222}
#form input[type=text]{width:320px}#form>*{margin:0 8px 6px 0}
#box{position:relative;width:256px;height:192px;background:#111;border:1px solid #ccc}
#frame{width:256px;height:192px;object-fit:contain;display:block}
#hint{position:absolute;inset:0;display:flex;align-items:center;justify-content:center;text-align:center;padding:18px;color:#eee;font-size:14px}
#legend span{margin-right:12px;color:#555}#legend i{display:inline-block;width:14px;height:3px;vertical-align:middle;margin-right:4px}
#main{display:flex;gap:14px;align-items:flex-start}#curve{border:1px solid #ccc}
#err{color:#b00;font-weight:600}#status,#model,#steps{color:#555}
.reply{margin:3px 0}.reply b{display:inline-block;min-width:60px}
.tag{padding:0 4px;border-radius:3px;color:#fff;font-size:12px;margin-left:6px}
</style></head><body>
<h3>Proactive streaming assistant</h3>
<div id="form">
<label>checkpoint <input type="text" id="checkpoint" placeholder="a checkpoint dir, or null: the tiny model"></label>
<button id="load">Load</button> <span id="model"></span><br>
<label>video path <input type="text" id="video"></label>
<label>or upload <input type="file" id="file" accept="video/*"></label>
<label>or record <select id="record"><option value="">-</option></select></label><br>
<label>instruction <input type="text" id="instruction" placeholder="empty: the record's own"></label>
<label><input type="checkbox" id="realtime"> real time</label>
<button id="go">Run</button> <button id="cam">Webcam</button> <span id="status"></span> <span id="steps"></span>
<div id="err"></div>
</div>
<div id="main"><div id="box"><img id="frame" alt=""><div id="hint"></div></div><div><canvas id="curve" width="640" height="200"></canvas>
<div id="legend"><span><i style="background:#1f77b4"></i>P(&lt;/Response&gt;)</span><span><i style="background:#999"></i>threshold (dashed)</span>
<span><i style="background:@@TARGET@@"></i>target</span><span><i style="background:@@WINDOW@@;height:10px"></i>its window</span><span>&#9660; a reply (coloured by outcome at a record's end)</span></div></div></div>
<div id="replies"></div>
<video id="camvideo" muted playsinline hidden></video><canvas id="grab" hidden></canvas>
<script>
const $=id=>document.getElementById(id);
const C=@@COLOURS@@,TICKS=@@TICKS@@,HINT=@@HINT@@;
$('hint').textContent=HINT.none;
let es=null,S=null,cam=null;
const TOKEN=new URLSearchParams(location.search).get('token')||'';
if(TOKEN)history.replaceState(null,'',location.pathname);
function post(path,body,type,name){const h={'Content-Type':type||'application/json'};if(name)h['X-Filename']=encodeURIComponent(name);if(TOKEN)h.Authorization='token '+TOKEN;
  return fetch(path,{method:'POST',headers:h,body:body===undefined?'{}':body});}
function get(path){return fetch(path,TOKEN?{headers:{Authorization:'token '+TOKEN}}:{});}
function count(k){document.body.dataset[k]=String(Number(document.body.dataset[k]||0)+1);}
function fail(m){$('err').textContent=m;$('status').textContent='';count('errors');}
function model(c){$('model').textContent=c==null?'no model loaded':'model: '+c;}
get('/state').then(r=>r.json()).then(st=>{model(st.checkpoint);if(st.error)fail(st.error);if(st.records.length)$('hint').textContent=HINT.records;
  for(const i of st.records){const o=document.createElement('option');o.textContent=i;$('record').appendChild(o);}});
function esc(s){return String(s==null?'':s).replace(/[&<>]/g,c=>({'&':'&amp;','<':'&lt;','>':'&gt;'}[c]));}
function empty(g,w,h){g.fillStyle='#777';g.font='14px system-ui,sans-serif';g.textAlign='center';
  g.fillText('P(</Response>) of each second is drawn here as a stream runs,',w/2,h/2-10);
  g.fillText('against the threshold; a \u25bc marks each reply.',w/2,h/2+10);g.textAlign='start';}
// the seconds axis: a tick and its label every step of TICKS (eval.app.view.tick_step's)
function axis(g,X,D,w,h){const step=TICKS.find(s=>D/s<=8)||TICKS[TICKS.length-1],ticks=[];
  g.strokeStyle='#999';g.fillStyle='#555';g.font='11px system-ui,sans-serif';g.beginPath();g.moveTo(0,h+0.5);g.lineTo(w,h+0.5);g.stroke();
  for(let k=0;k*step<=D+1e-9;k++){const t=k*step,x=Math.round(X(t))+0.5,l=t+' s';ticks.push(t);
    g.beginPath();g.moveTo(x,h);g.lineTo(x,h+4);g.stroke();g.fillText(l,Math.min(x+2,w-g.measureText(l).width-1),h+14);}
  g.canvas.dataset.ticks=ticks.join(',');}
function draw(){const cv=$('curve'),g=cv.getContext('2d'),w=cv.width,h=cv.height-18;g.clearRect(0,0,w,cv.height);if(!S)return empty(g,w,h);
  const last=S.steps.length?S.steps[S.steps.length-1].t:0,D=S.duration||Math.max(10,last+5);
  const X=t=>t/Math.max(D,1e-9)*(w-1),Y=p=>h-6-p*(h-20);axis(g,X,D,w,h);
  for(const t of S.targets){if(t.w){g.fillStyle=C.window;g.fillRect(X(t.w[0]),0,Math.max(2,X(t.w[1])-X(t.w[0])),h);}
    g.strokeStyle=C.target;g.lineWidth=2;g.beginPath();g.moveTo(X(t.t),0);g.lineTo(X(t.t),h);g.stroke();g.lineWidth=1;}
  g.strokeStyle='#999';g.setLineDash([4,4]);g.beginPath();g.moveTo(0,Y(S.threshold));g.lineTo(w,Y(S.threshold));g.stroke();g.setLineDash([]);
  g.strokeStyle='#1f77b4';g.beginPath();S.steps.forEach((s,i)=>{i?g.lineTo(X(s.t),Y(s.p)):g.moveTo(X(s.t),Y(s.p));});g.stroke();
  S.fires.forEach((f,i)=>{g.fillStyle=S.outcomes?C[S.outcomes[i]]:'#d62728';const x=X(f.t);g.beginPath();g.moveTo(x-5,1);g.lineTo(x+5,1);g.lineTo(x,13);g.fill();});}
function follow(params){
  if(es)es.close();$('err').textContent='';$('replies').textContent='';$('steps').textContent='';S=null;draw();
  const t0=performance.now();es=new EventSource('/stream?'+new URLSearchParams(params));$('status').textContent='starting';
  es.addEventListener('queued',e=>{$('status').textContent=JSON.parse(e.data).message;});
  es.addEventListener('error',e=>{if(e.data)fail(JSON.parse(e.data).message);es.close();stopCam(false);});
  es.addEventListener('start',e=>{S=Object.assign(JSON.parse(e.data),{steps:[],fires:[],posted:0,t0});
    $('status').textContent='streaming '+S.id;if(S.session)grabEvery(1000/S.steps_per_second);});
  es.addEventListener('step',e=>{const d=JSON.parse(e.data);d.arrived=(performance.now()-t0)/1000;S.steps.push(d);$('frame').src=d.frame;$('hint').style.display='none';
    if(d.fired){S.fires.push(d);const r=document.createElement('div');r.className='reply';r.innerHTML='<b>'+d.t.toFixed(1)+' s</b> <span class="text">'+esc(d.text)+'</span>';$('replies').appendChild(r);}
    $('status').textContent='streaming '+S.id+': '+d.t.toFixed(1)+' s';$('steps').textContent=S.steps.length+' steps';draw();});
  es.addEventListener('done',e=>{const d=JSON.parse(e.data);es.close();stopCam(false);S.done=d;$('status').textContent='done: '+S.fires.length+' replies';
    if(d.outcomes){S.outcomes=d.outcomes;[...$('replies').children].forEach((r,i)=>{r.insertAdjacentHTML('beforeend','<span class="tag" style="background:'+C[d.outcomes[i]]+'">'+d.outcomes[i].replace('_',' ')+'</span>');});}
    count('done');draw();});
}
function run(video){follow({video:video||'',record:$('record').value,instruction:$('instruction').value,realtime:$('realtime').checked?'1':'0'});}
$('go').addEventListener('click',()=>{const f=$('file').files[0];stopCam(true);
  if(!f)return run($('video').value);
  post('/upload',f,'application/octet-stream',f.name).then(r=>r.json()).then(j=>j.error?fail(j.error):run(j.path));});
$('load').addEventListener('click',()=>{const c=$('checkpoint').value;$('err').textContent='';$('model').textContent='loading '+c+' (after a running stream)';
  post('/checkpoint',JSON.stringify({checkpoint:c})).then(r=>r.json())
    .then(j=>{model(j.checkpoint);if(j.error)fail(j.error);count('loads');});});
function grab(){const v=$('camvideo'),c=$('grab');if(!cam||!S||!S.session||!v.videoWidth)return;
  c.width=320;c.height=Math.round(320*v.videoHeight/v.videoWidth);c.getContext('2d').drawImage(v,0,0,c.width,c.height);
  const session=S.session;c.toBlob(b=>{S.posted++;post('/frame?session='+session,b,'image/jpeg');},'image/jpeg',0.85);}
function grabEvery(ms){if(!cam)return;grab();cam.timer=setInterval(grab,ms);}
function stopCam(tell){if(!cam)return;clearInterval(cam.timer);cam.media.getTracks().forEach(t=>t.stop());cam=null;$('cam').textContent='Webcam';
  if(!tell)return;if(S&&S.session)post('/stop?session='+S.session);else if(es)es.close();}
$('cam').addEventListener('click',async()=>{if(cam)return stopCam(true);$('err').textContent='';
  try{cam={media:await navigator.mediaDevices.getUserMedia({video:true,audio:false}),timer:null};}
  catch(e){cam=null;return fail('webcam: '+e.name+': '+e.message);}
  const v=$('camvideo');v.srcObject=cam.media;await v.play();$('cam').textContent='Stop webcam';
  follow({source:'webcam',instruction:$('instruction').value});});
draw();
</script></body></html>
"""

#: The page, with the viewer's colours, tick steps and the hints filled in.
PAGE = (
    TEMPLATE.replace("@@COLOURS@@", json.dumps(COLOURS | {"target": TARGET_COLOUR, "window": WINDOW_COLOUR}))
    .replace("@@TICKS@@", json.dumps(list(TICK_STEPS)))
    .replace("@@HINT@@", json.dumps(HINT))
    .replace("@@TARGET@@", TARGET_COLOUR)
    .replace("@@WINDOW@@", WINDOW_COLOUR)
)
