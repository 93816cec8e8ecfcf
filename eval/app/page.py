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
the browser tests."""

PAGE = r"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>proactive assistant demo</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:14px;color:#222}
#form input[type=text]{width:320px}#form>*{margin:0 8px 6px 0}
#frame{width:256px;height:192px;object-fit:contain;background:#111;border:1px solid #ccc}
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
<div id="main"><img id="frame" alt=""><canvas id="curve" width="640" height="200"></canvas></div>
<div id="replies"></div>
<video id="camvideo" muted playsinline hidden></video><canvas id="grab" hidden></canvas>
<script>
const $=id=>document.getElementById(id);
const C={hit:'#2ca02c',early:'#ff7f0e',late:'#9467bd',redundant:'#8c8c8c',false_alarm:'#d62728',wrong:'#e377c2',unclassified:'#1f77b4'};
let es=null,S=null,cam=null;
const TOKEN=new URLSearchParams(location.search).get('token')||'';
if(TOKEN)history.replaceState(null,'',location.pathname);
function post(path,body,type,name){const h={'Content-Type':type||'application/json'};if(name)h['X-Filename']=encodeURIComponent(name);if(TOKEN)h.Authorization='token '+TOKEN;
  return fetch(path,{method:'POST',headers:h,body:body===undefined?'{}':body});}
function get(path){return fetch(path,TOKEN?{headers:{Authorization:'token '+TOKEN}}:{});}
function count(k){document.body.dataset[k]=String(Number(document.body.dataset[k]||0)+1);}
function fail(m){$('err').textContent=m;$('status').textContent='';count('errors');}
function model(c){$('model').textContent=c==null?'no model loaded':'model: '+c;}
get('/state').then(r=>r.json()).then(st=>{model(st.checkpoint);if(st.error)fail(st.error);
  for(const i of st.records){const o=document.createElement('option');o.textContent=i;$('record').appendChild(o);}});
function esc(s){return String(s==null?'':s).replace(/[&<>]/g,c=>({'&':'&amp;','<':'&lt;','>':'&gt;'}[c]));}
function draw(){const cv=$('curve'),g=cv.getContext('2d'),w=cv.width,h=cv.height;g.clearRect(0,0,w,h);if(!S)return;
  const last=S.steps.length?S.steps[S.steps.length-1].t:0,D=S.duration||Math.max(10,last+5);
  const X=t=>t/Math.max(D,1e-9)*(w-1),Y=p=>h-6-p*(h-20);
  for(const t of S.targets){if(t.w){g.fillStyle='#d8f0d8';g.fillRect(X(t.w[0]),0,Math.max(2,X(t.w[1])-X(t.w[0])),h);}
    g.strokeStyle='#2ca02c';g.lineWidth=2;g.beginPath();g.moveTo(X(t.t),0);g.lineTo(X(t.t),h);g.stroke();g.lineWidth=1;}
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
  es.addEventListener('step',e=>{const d=JSON.parse(e.data);d.arrived=(performance.now()-t0)/1000;S.steps.push(d);$('frame').src=d.frame;
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
</script></body></html>
"""
