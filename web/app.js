/* choir's web page: plain DOM code against the server's own API, no build step.
 * Every request carries the API key typed at the top (when there is one), and
 * every failure ends up in the tab's alert box: the page never fails silently.
 * window.choirUi holds timings and counters so that a browser test can check
 * what the page did, not just how it looks. */
'use strict';
(function () {
  const $ = (id) => document.getElementById(id);
  const ui = (window.choirUi = { speech: null, transcript: null, enhance: null, metricsUpdates: 0, metrics: null });
  const KEY_STORE = 'choir.apiKey';
  const HISTORY = 120;

  /* ---- API plumbing ------------------------------------------------------ */

  function authHeaders(extra) {
    const h = Object.assign({}, extra || {});
    const key = $('api-key').value.trim();
    if (key) h.Authorization = 'Bearer ' + key;
    return h;
  }

  /* Turns a failed response into an Error whose message is the server's own
   * (OpenAI's {"error": {"message"}} shape), with the status and hints. */
  async function apiError(res) {
    let body = '';
    try { body = await res.text(); } catch (e) { /* keep the status line */ }
    let msg = body.trim();
    try {
      const j = JSON.parse(body);
      if (j && j.error && j.error.message) msg = j.error.message;
    } catch (e) { /* not JSON: show the text as it is */ }
    let text = 'Error ' + res.status + (res.statusText ? ' ' + res.statusText : '') + ': ' + (msg || 'no details');
    if (!/[.!?]$/.test(text)) text += '.';
    const retry = res.headers.get('Retry-After');
    if (retry) text += ' (retry after ' + retry + ' s)';
    if (res.status === 401) text += ' Enter the API key at the top of the page.';
    const err = new Error(text);
    err.status = res.status;
    return err;
  }

  async function api(path, init) {
    init = init || {};
    init.headers = authHeaders(init.headers);
    let res;
    try {
      res = await fetch(path, init);
    } catch (e) {
      throw new Error('Cannot reach the server (' + e.message + ').');
    }
    if (!res.ok) throw await apiError(res);
    return res;
  }

  function showMsg(id, text, kind) {
    const el = $(id);
    el.textContent = text || '';
    el.hidden = !text;
    el.className = 'msg ' + (kind || 'error');
  }

  function fmtBytes(n) {
    if (!isFinite(n)) return '–';
    const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (Math.abs(n) >= 1024 && i < u.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : String(Math.round(n))) + ' ' + u[i];
  }

  function fmtSeconds(s) {
    if (!isFinite(s)) return '–';
    return s < 1 ? (s * 1000).toFixed(0) + ' ms' : s.toFixed(2) + ' s';
  }

  function fmtClock(s) {
    const m = Math.floor(s / 60);
    return String(m).padStart(2, '0') + ':' + (s - 60 * m).toFixed(2).padStart(5, '0');
  }

  /* Points an element at a new Blob/MediaSource URL, releasing the old one
   * so that repeated tries do not keep every recording in memory. */
  function setObjectUrl(el, attr, obj) {
    const old = el.getAttribute(attr);
    if (old && old.startsWith('blob:')) URL.revokeObjectURL(old);
    el.setAttribute(attr, URL.createObjectURL(obj));
  }

  /* Runs `fn` with the form's submit button disabled, showing its failure
   * in the tab's alert box in place of its progress line. */
  async function busy(button, msgId, statsId, fn) {
    button.disabled = true;
    button.setAttribute('aria-busy', 'true');
    showMsg(msgId, '');
    try {
      await fn();
    } catch (e) {
      $(statsId).textContent = '';
      showMsg(msgId, e.message || String(e));
    } finally {
      button.disabled = false;
      button.removeAttribute('aria-busy');
    }
  }

  /* ---- tabs -------------------------------------------------------------- */

  const tabs = Array.from(document.querySelectorAll('[role=tab]'));

  function selectTab(tab, focus) {
    for (const t of tabs) {
      const on = t === tab;
      t.setAttribute('aria-selected', on ? 'true' : 'false');
      t.tabIndex = on ? 0 : -1;
      $(t.getAttribute('aria-controls')).hidden = !on;
    }
    if (focus) tab.focus();
    history.replaceState(null, '', '#' + tab.id.slice(4));
  }

  tabs.forEach((t, i) => {
    t.addEventListener('click', () => selectTab(t, false));
    t.addEventListener('keydown', (e) => {
      let j = -1;
      if (e.key === 'ArrowRight') j = (i + 1) % tabs.length;
      else if (e.key === 'ArrowLeft') j = (i + tabs.length - 1) % tabs.length;
      else if (e.key === 'Home') j = 0;
      else if (e.key === 'End') j = tabs.length - 1;
      if (j >= 0) { e.preventDefault(); selectTab(tabs[j], true); }
    });
  });

  /* ---- models and health --------------------------------------------------- */

  let models = [];
  /* 'key' while the server refuses the API calls for want of a key: the
   * status pill says so instead of "ready" (the page itself needs none). */
  let access = 'unknown';

  async function loadModels() {
    try {
      const res = await api('/v1/models');
      models = (await res.json()).data || [];
      access = 'ok';
    } catch (e) {
      models = [];
      access = e.status === 401 ? 'key' : 'unknown';
      for (const id of ['speak-msg', 'stt-msg', 'sts-msg']) {
        showMsg(id, 'Cannot list the models: ' + e.message);
        $(id).dataset.from = 'models';
      }
      for (const sel of document.querySelectorAll('select[data-task]')) sel.textContent = '';
      showVoices();
      pollHealth();
      return;
    }
    pollHealth();
    for (const sel of document.querySelectorAll('select[data-task]')) {
      const task = sel.dataset.task;
      const keep = sel.value;
      sel.textContent = '';
      const fit = models.filter((m) => (m.tasks || []).includes(task));
      for (const m of fit) sel.add(new Option(m.id + (m.kind ? ' (' + m.kind + ')' : ''), m.id));
      if (fit.some((m) => m.id === keep)) sel.value = keep;
      const msgId = { tts: 'speak-msg', stt: 'stt-msg', sts: 'sts-msg' }[task];
      if (!fit.length) showMsg(msgId, 'No model on this server does ' + task.toUpperCase() + '.', 'note');
      else if ($(msgId).dataset.from === 'models') showMsg(msgId, '');
      $(msgId).dataset.from = fit.length ? '' : 'models';
    }
    showVoices();
  }

  /* The voice list offers the chosen model's own voices, nothing else. */
  function showVoices() {
    const m = models.find((x) => x.id === $('speak-model').value);
    const voices = (m && m.voices) || [];
    const list = $('voice-list');
    list.textContent = '';
    for (const v of voices) list.appendChild(new Option(v, v));
    const input = $('speak-voice');
    if (voices.length && !voices.includes(input.value)) input.value = voices.includes('af_heart') ? 'af_heart' : voices[0];
  }
  $('speak-model').addEventListener('change', showVoices);

  async function pollHealth() {
    const pill = $('server-state');
    try {
      const res = await fetch('/health');
      const j = await res.json().catch(() => ({}));
      if (res.ok && access === 'key') {
        pill.textContent = 'API key needed';
        pill.className = 'pill warn';
        return;
      }
      pill.textContent = res.ok ? 'ready' : (j.status || 'HTTP ' + res.status);
      pill.className = 'pill ' + (res.ok ? 'ok' : 'warn');
    } catch (e) {
      pill.textContent = 'unreachable';
      pill.className = 'pill bad';
    }
  }

  /* ---- speak: streamed TTS into an <audio> element ------------------------- */

  $('speak-speed').addEventListener('input', (e) => { $('speak-speed-out').value = Number(e.target.value).toFixed(2); });

  function appendBuffer(sb, bytes) {
    return new Promise((resolve, reject) => {
      const done = () => { sb.removeEventListener('error', fail); resolve(); };
      const fail = () => { sb.removeEventListener('updateend', done); reject(new Error('the browser refused the audio data')); };
      sb.addEventListener('updateend', done, { once: true });
      sb.addEventListener('error', fail, { once: true });
      sb.appendBuffer(bytes);
    });
  }

  function bufferedSeconds(audio) {
    const b = audio.buffered;
    return b.length ? b.end(b.length - 1) : 0;
  }

  /* MP3 frames are self-delimiting, so the chunked body can go straight into
   * a MediaSource buffer as it arrives and the element plays the first
   * sentence while the engine still works on the next. Without MediaSource
   * the whole body is collected first. */
  async function speak() {
    const audio = $('speak-audio');
    const link = $('speak-download');
    const model = $('speak-model').value;
    if (!model) throw new Error('Pick a text-to-speech model first.');
    const text = $('speak-text').value.trim();
    if (!text) throw new Error('Type some text to speak.');
    const useMse = typeof MediaSource !== 'undefined' && MediaSource.isTypeSupported('audio/mpeg');
    const t0 = performance.now();
    const rec = (ui.speech = {
      mode: useMse ? 'mediasource' : 'whole', chunks: 0, bytes: 0, firstChunkMs: null,
      firstBufferedMs: null, playingMs: null, doneMs: null, error: null,
    });
    const since = () => performance.now() - t0;
    audio.onplaying = () => { if (rec.playingMs === null) rec.playingMs = since(); };
    link.hidden = true;
    $('speak-stats').textContent = 'Synthesising…';
    const res = await api('/v1/audio/speech', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({
        model, input: text, voice: $('speak-voice').value.trim() || undefined,
        speed: Number($('speak-speed').value), response_format: 'mp3', stream_format: 'audio',
      }),
    });
    const parts = [];
    const reader = res.body.getReader();
    try {
      if (useMse) {
        const ms = new MediaSource();
        setObjectUrl(audio, 'src', ms);
        await new Promise((r) => ms.addEventListener('sourceopen', r, { once: true }));
        const sb = ms.addSourceBuffer('audio/mpeg');
        sb.mode = 'sequence';
        audio.play().catch(() => { /* autoplay refused: the controls still work */ });
        for (;;) {
          const { done, value } = await reader.read();
          if (done) break;
          if (rec.firstChunkMs === null) rec.firstChunkMs = since();
          rec.chunks++;
          rec.bytes += value.length;
          parts.push(value);
          await appendBuffer(sb, value);
          if (rec.firstBufferedMs === null && bufferedSeconds(audio) > 0) rec.firstBufferedMs = since();
          $('speak-stats').textContent = 'Receiving… ' + fmtBytes(rec.bytes) + ', ' + bufferedSeconds(audio).toFixed(1) + ' s buffered';
        }
        rec.doneMs = since();
        if (ms.readyState === 'open') ms.endOfStream();
      } else {
        for (;;) {
          const { done, value } = await reader.read();
          if (done) break;
          if (rec.firstChunkMs === null) rec.firstChunkMs = since();
          rec.chunks++;
          rec.bytes += value.length;
          parts.push(value);
        }
        rec.doneMs = since();
        setObjectUrl(audio, 'src', new Blob(parts, { type: 'audio/mpeg' }));
        audio.play().catch(() => {});
      }
    } catch (e) {
      rec.error = e.message;
      throw new Error('The speech stream broke off: ' + e.message);
    }
    if (!rec.bytes) throw new Error('The server answered with no audio.');
    setObjectUrl(link, 'href', new Blob(parts, { type: 'audio/mpeg' }));
    link.hidden = false;
    $('speak-stats').textContent = 'First audio after ' + fmtSeconds(rec.firstChunkMs / 1000) + ', all of it after ' +
      fmtSeconds(rec.doneMs / 1000) + ' (' + fmtBytes(rec.bytes) + ' in ' + rec.chunks + ' chunks).';
  }

  $('speak-form').addEventListener('submit', (e) => {
    e.preventDefault();
    busy($('speak-go'), 'speak-msg', 'speak-stats', speak);
  });

  /* ---- transcribe: upload or microphone, SSE stream of text --------------- */

  let recorded = null; /* a WAV Blob from the microphone, used instead of the file */
  let recorder = null;

  function encodeWav(chunks, rate) {
    const n = chunks.reduce((a, c) => a + c.length, 0);
    const view = new DataView(new ArrayBuffer(44 + 2 * n));
    const str = (o, s) => { for (let i = 0; i < s.length; i++) view.setUint8(o + i, s.charCodeAt(i)); };
    str(0, 'RIFF'); view.setUint32(4, 36 + 2 * n, true); str(8, 'WAVE');
    str(12, 'fmt '); view.setUint32(16, 16, true); view.setUint16(20, 1, true); view.setUint16(22, 1, true);
    view.setUint32(24, rate, true); view.setUint32(28, 2 * rate, true); view.setUint16(32, 2, true); view.setUint16(34, 16, true);
    str(36, 'data'); view.setUint32(40, 2 * n, true);
    let o = 44;
    for (const c of chunks) {
      for (let i = 0; i < c.length; i++, o += 2) {
        const v = Math.max(-1, Math.min(1, c[i]));
        view.setInt16(o, v < 0 ? v * 0x8000 : v * 0x7fff, true);
      }
    }
    return new Blob([view], { type: 'audio/wav' });
  }

  /* The microphone is captured as raw samples and sent as WAV, a format the
   * server always decodes (MediaRecorder's webm/opus may not be). */
  async function toggleRecording() {
    const btn = $('stt-record');
    if (recorder) {
      recorder.stop();
      return;
    }
    const ctx = new AudioContext();
    const stream = await navigator.mediaDevices.getUserMedia({ audio: true });
    const src = ctx.createMediaStreamSource(stream);
    const proc = ctx.createScriptProcessor(4096, 1, 1);
    const chunks = [];
    proc.onaudioprocess = (e) => chunks.push(new Float32Array(e.inputBuffer.getChannelData(0)));
    src.connect(proc);
    proc.connect(ctx.destination);
    const started = performance.now();
    const tick = setInterval(() => { $('stt-rec-state').textContent = 'Recording… ' + ((performance.now() - started) / 1000).toFixed(1) + ' s'; }, 200);
    btn.textContent = 'Stop recording';
    btn.setAttribute('aria-pressed', 'true');
    recorder = {
      stop() {
        clearInterval(tick);
        proc.disconnect();
        src.disconnect();
        stream.getTracks().forEach((t) => t.stop());
        recorded = encodeWav(chunks, ctx.sampleRate);
        ctx.close();
        recorder = null;
        btn.textContent = 'Record from microphone';
        btn.setAttribute('aria-pressed', 'false');
        $('stt-rec-state').textContent = 'Recorded ' + ((performance.now() - started) / 1000).toFixed(1) + ' s; press Transcribe.';
        setObjectUrl($('stt-audio'), 'src', recorded);
        $('stt-audio').hidden = false;
      },
    };
  }

  if (!(navigator.mediaDevices && navigator.mediaDevices.getUserMedia) || !window.isSecureContext) {
    $('stt-record').disabled = true;
    $('stt-rec-state').textContent = 'The microphone needs a secure page (https or localhost).';
  }
  $('stt-record').addEventListener('click', () => {
    toggleRecording().catch((e) => showMsg('stt-msg', 'Cannot record: ' + e.message));
  });
  $('stt-file').addEventListener('change', () => {
    recorded = null;
    const f = $('stt-file').files[0];
    $('stt-audio').hidden = !f;
    if (f) setObjectUrl($('stt-audio'), 'src', f);
  });

  /* Reads a text/event-stream body, calling onEvent with each JSON payload. */
  async function readSse(res, onEvent) {
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = '';
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      buf += value;
      let cut;
      while ((cut = buf.search(/\r?\n\r?\n/)) >= 0) {
        const block = buf.slice(0, cut);
        buf = buf.slice(cut).replace(/^\r?\n\r?\n/, '');
        const data = block.split(/\r?\n/).filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trimStart()).join('\n');
        if (!data || data === '[DONE]') continue;
        let ev;
        try { ev = JSON.parse(data); } catch (e) { throw new Error('the server sent an event that is not JSON: ' + data.slice(0, 80)); }
        onEvent(ev);
      }
    }
  }

  function showSegments(segments) {
    const table = $('stt-segments');
    const body = table.tBodies[0];
    body.textContent = '';
    for (const s of segments) {
      const tr = body.insertRow();
      tr.insertCell().textContent = fmtClock(s.start);
      tr.insertCell().textContent = fmtClock(s.end);
      tr.insertCell().textContent = (s.text || '').trim();
    }
    table.hidden = !segments.length;
  }

  async function transcribe() {
    const model = $('stt-model').value;
    if (!model) throw new Error('Pick a speech-to-text model first.');
    const file = recorded || $('stt-file').files[0];
    if (!file) throw new Error('Choose an audio file or record one first.');
    const wantTimes = $('stt-timestamps').checked;
    const form = () => {
      const fd = new FormData();
      fd.append('model', model);
      fd.append('file', file, file.name || 'recording.wav');
      const lang = $('stt-language').value.trim();
      if (lang) fd.append('language', lang);
      return fd;
    };
    const out = $('stt-text');
    out.textContent = '';
    showSegments([]);
    const t0 = performance.now();
    const rec = (ui.transcript = { deltas: 0, firstDeltaMs: null, doneMs: null, text: '', segments: [] });
    $('stt-stats').textContent = 'Transcribing…';
    const fd = form();
    fd.append('stream', 'true');
    fd.append('response_format', wantTimes ? 'verbose_json' : 'json');
    const res = await api('/v1/audio/transcriptions', { method: 'POST', body: fd });
    let failed = null;
    await readSse(res, (ev) => {
      if (ev.type === 'error' || ev.error) {
        failed = (ev.error && ev.error.message) || 'the transcription failed';
        return;
      }
      if (ev.segments) rec.segments.push(...ev.segments);
      if (ev.type === 'transcript.text.delta') {
        if (rec.firstDeltaMs === null) rec.firstDeltaMs = performance.now() - t0;
        rec.deltas++;
        rec.text += ev.delta || '';
        out.textContent = rec.text;
      } else if (ev.type === 'transcript.text.done') {
        /* The deltas already spell the transcript; the final text is only
         * needed when none came (and some servers repeat the deltas in it). */
        if (!rec.deltas && ev.text != null) rec.text = ev.text;
        out.textContent = rec.text;
      }
      if (rec.segments.length) showSegments(rec.segments);
    });
    if (failed) throw new Error('Transcription failed: ' + failed);
    rec.doneMs = performance.now() - t0;
    if (!rec.text.trim()) out.textContent = '(no speech found)';
    /* The timestamps came with the text (the stream's events carry the
     * segments): one request, one transcription. */
    $('stt-stats').textContent = 'First words after ' + fmtSeconds((rec.firstDeltaMs || rec.doneMs) / 1000) +
      ', done after ' + fmtSeconds(rec.doneMs / 1000) + ' (' + rec.deltas + ' pieces' +
      (rec.segments.length ? ', ' + rec.segments.length + ' segments' : '') + ').';
  }

  $('stt-form').addEventListener('submit', (e) => {
    e.preventDefault();
    busy($('stt-go'), 'stt-msg', 'stt-stats', transcribe);
  });

  /* ---- enhance: upload, then before/after players --------------------------- */

  $('sts-file').addEventListener('change', () => {
    const f = $('sts-file').files[0];
    if (f) setObjectUrl($('sts-before'), 'src', f);
  });

  async function enhance() {
    const model = $('sts-model').value;
    if (!model) throw new Error('Pick an enhancement model first.');
    const file = $('sts-file').files[0];
    if (!file) throw new Error('Choose a recording to enhance.');
    const fd = new FormData();
    fd.append('model', model);
    fd.append('file', file, file.name);
    fd.append('response_format', 'wav');
    const t0 = performance.now();
    $('sts-stats').textContent = 'Enhancing…';
    const prev = $('sts-after').getAttribute('src');
    if (prev) URL.revokeObjectURL(prev);
    $('sts-after').removeAttribute('src');
    const res = await api('/v1/audio/enhancements', { method: 'POST', body: fd });
    const blob = await res.blob();
    ui.enhance = { bytes: blob.size, ms: performance.now() - t0 };
    setObjectUrl($('sts-after'), 'src', blob);
    $('sts-stats').textContent = 'Enhanced in ' + fmtSeconds(ui.enhance.ms / 1000) + ' (' + fmtBytes(blob.size) + ' of WAV).';
  }

  $('sts-form').addEventListener('submit', (e) => {
    e.preventDefault();
    busy($('sts-go'), 'sts-msg', 'sts-stats', enhance);
  });

  /* ---- engine: /metrics every two seconds ----------------------------------- */

  /* Prometheus text format: `name{a="b",...} value` per line. */
  function parseMetrics(text) {
    const series = [];
    for (const line of text.split('\n')) {
      if (!line || line[0] === '#') continue;
      const m = /^([A-Za-z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
      if (!m) continue;
      const labels = {};
      const re = /(\w+)="((?:[^"\\]|\\.)*)"/g;
      let l;
      while ((l = re.exec(m[2] || ''))) labels[l[1]] = l[2].replace(/\\(.)/g, '$1');
      const v = m[3] === '+Inf' ? Infinity : m[3] === '-Inf' ? -Infinity : Number(m[3]);
      series.push({ name: m[1], labels, value: v });
    }
    return series;
  }

  const pick = (s, name, labels) => s.filter((x) => x.name === name &&
    Object.entries(labels || {}).every(([k, v]) => x.labels[k] === v));
  const sum = (s, name) => pick(s, name).reduce((a, x) => a + x.value, 0);
  const one = (s, name, labels) => { const p = pick(s, name, labels); return p.length ? p[0].value : NaN; };

  const samples = []; /* one metrics snapshot per poll, newest last */

  function svgEl(tag, attrs) {
    const el = document.createElementNS('http://www.w3.org/2000/svg', tag);
    for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
    return el;
  }

  function clearChart(svg) {
    for (const el of Array.from(svg.childNodes)) if (el.nodeName !== 'title') svg.removeChild(el);
  }

  function lineChart(svg, lines, w, h) {
    clearChart(svg);
    let max = 0;
    for (const ln of lines) for (const v of ln.values) if (isFinite(v)) max = Math.max(max, v);
    if (max <= 0) max = 1;
    svg.appendChild(svgEl('line', { x1: 0, y1: h - 0.5, x2: w, y2: h - 0.5, class: 'axis' }));
    for (const ln of lines) {
      const pts = ln.values.map((v, i) => [(w * i) / Math.max(1, HISTORY - 1), h - 2 - ((h - 4) * (isFinite(v) ? v : 0)) / max]);
      if (!pts.length) continue;
      svg.appendChild(svgEl('polyline', { points: pts.map((p) => p[0].toFixed(1) + ',' + p[1].toFixed(1)).join(' '), class: 'series ' + ln.cls }));
    }
    const label = svgEl('text', { x: 2, y: 10, class: 'scale' });
    label.textContent = lines[0] && lines[0].fmt ? lines[0].fmt(max) : String(max);
    svg.appendChild(label);
  }

  function batchChart(svg, s) {
    clearChart(svg);
    const buckets = pick(s, 'choir_batch_size_bucket').map((x) => ({ le: Number(x.labels.le === '+Inf' ? Infinity : x.labels.le), n: x.value }));
    buckets.sort((a, b) => a.le - b.le);
    const bars = buckets.map((b, i) => ({ label: isFinite(b.le) ? String(b.le) : '+', n: b.n - (i ? buckets[i - 1].n : 0) }));
    const w = 300, h = 80, max = Math.max(1, ...bars.map((b) => b.n));
    const bw = bars.length ? w / bars.length : w;
    bars.forEach((b, i) => {
      const bh = ((h - 16) * b.n) / max;
      const r = svgEl('rect', { x: i * bw + 2, y: h - 12 - bh, width: Math.max(1, bw - 4), height: bh, class: 'bar' });
      const t = svgEl('title', {});
      t.textContent = b.n + ' batches of size ≤ ' + b.label;
      r.appendChild(t);
      svg.appendChild(r);
      const lab = svgEl('text', { x: i * bw + bw / 2, y: h - 2, class: 'tick' });
      lab.textContent = b.label;
      svg.appendChild(lab);
    });
    const total = bars.reduce((a, b) => a + b.n, 0);
    const mean = one(s, 'choir_batch_size_sum') / one(s, 'choir_batch_size_count');
    $('m-batch-text').textContent = total ? total + ' batches, mean size ' + mean.toFixed(2) : 'No batches yet.';
  }

  function showModels(s) {
    const body = $('models-table').tBodies[0];
    body.textContent = '';
    const ids = new Set(models.map((m) => m.id));
    for (const x of pick(s, 'choir_model_loaded')) ids.add(x.labels.model);
    for (const id of ids) {
      const m = models.find((x) => x.id === id) || {};
      const loaded = one(s, 'choir_model_loaded', { model: id });
      const tr = body.insertRow();
      tr.insertCell().textContent = id;
      tr.insertCell().textContent = m.kind || '–';
      tr.insertCell().textContent = (m.tasks || []).join(', ') || '–';
      tr.insertCell().textContent = isFinite(loaded) ? (loaded ? 'yes' : 'no') : '–';
      const n = one(s, 'choir_model_requests_total', { model: id });
      tr.insertCell().textContent = isFinite(n) ? String(n) : '–';
    }
  }

  function showMetrics(s) {
    const budget = one(s, 'choir_memory_budget_bytes');
    const reserved = one(s, 'choir_memory_reserved_bytes');
    const weights = one(s, 'choir_weights_resident_bytes');
    const q = (p) => one(s, 'choir_request_seconds_quantile', { quantile: p });
    const m = {
      budget, reserved, weights,
      arena: one(s, 'choir_arena_peak_bytes'),
      queue: one(s, 'choir_queue_depth'),
      running: one(s, 'choir_running_requests'),
      completed: one(s, 'choir_requests_completed_total'),
      failed: one(s, 'choir_requests_failed_total'),
      rejected: sum(s, 'choir_requests_rejected_total'),
      batches: one(s, 'choir_batches_total'),
      degraded: one(s, 'choir_degraded'),
      p50: q('0.5'), p95: q('0.95'), p99: q('0.99'),
    };
    ui.metrics = m;
    const used = reserved + (isFinite(weights) ? weights : 0);
    $('mem-meter').value = budget > 0 ? Math.min(1, used / budget) : 0;
    $('mem-text').textContent = budget > 0
      ? fmtBytes(used) + ' of ' + fmtBytes(budget) + ' in use (' + ((100 * used) / budget).toFixed(1) + '%)'
      : 'No budget reported.';
    $('m-budget').textContent = fmtBytes(budget);
    $('m-reserved').textContent = fmtBytes(reserved);
    $('m-weights').textContent = fmtBytes(weights);
    $('m-arena').textContent = fmtBytes(m.arena);
    for (const k of ['queue', 'running', 'completed', 'failed', 'rejected', 'batches']) $('m-' + k).textContent = isFinite(m[k]) ? String(m[k]) : '–';
    $('m-degraded').textContent = m.degraded > 0 ? 'yes' : 'no';
    for (const k of ['p50', 'p95', 'p99']) $('m-' + k).textContent = m.completed > 0 ? fmtSeconds(m[k]) : '–';
    samples.push(m);
    if (samples.length > HISTORY) samples.shift();
    lineChart($('chart-queue'), [{ values: samples.map((x) => x.queue), cls: 'queue', fmt: (v) => 'max ' + v }], 300, 60);
    lineChart($('chart-latency'), ['p50', 'p95', 'p99'].map((k) => ({ values: samples.map((x) => x[k]), cls: k, fmt: (v) => fmtSeconds(v) })), 300, 60);
    batchChart($('chart-batch'), s);
    showModels(s);
  }

  async function pollMetrics() {
    try {
      const res = await api('/metrics');
      showMetrics(parseMetrics(await res.text()));
      ui.metricsUpdates++;
      showMsg('engine-msg', '');
      $('engine-updated').textContent = 'Updated ' + new Date().toLocaleTimeString() + '.';
    } catch (e) {
      showMsg('engine-msg', 'Cannot read /metrics: ' + e.message);
    }
  }

  /* ---- start ---------------------------------------------------------------- */

  const keyInput = $('api-key');
  try { keyInput.value = sessionStorage.getItem(KEY_STORE) || ''; } catch (e) { /* storage off */ }
  keyInput.addEventListener('change', () => {
    try { sessionStorage.setItem(KEY_STORE, keyInput.value.trim()); } catch (e) { /* storage off */ }
    loadModels();
    pollMetrics();
  });
  $('key-form').addEventListener('submit', (e) => e.preventDefault());

  const start = tabs.find((t) => t.id === 'tab-' + location.hash.slice(1));
  if (start) selectTab(start, false);
  pollHealth();
  loadModels().then(pollMetrics);
  setInterval(pollHealth, 5000);
  setInterval(pollMetrics, 2000);
})();
