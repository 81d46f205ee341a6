// Drives choir's web page in headless Chromium against a running `choir serve`
// (started by tests/sh_ui.sh). Checks what a person would: the API key gate
// shows a message, typed text becomes audio that the <audio> element receives
// before synthesis ends, an uploaded jfk.wav becomes a transcript with
// timestamps, an enhancement gives an "after" recording, and the engine panel
// counts the requests. Also (issue 19): without the key the status says so,
// the voice list is the model's, one request transcribes (segments over SSE),
// and every tab fits a 390-px screen. A screenshot of each tab goes to OUT_DIR.
//
// env: CHOIR_URL (http://127.0.0.1:PORT), CHOIR_API_KEY, OUT_DIR, JFK_WAV,
//      STS_WAV (optional), CHROMIUM (default /usr/bin/chromium),
//      WANT_TTS / WANT_STS ("1" when such a model is served),
//      CHOIR_UI_FROM_DISK (a web/ directory: serve the page from it instead of
//      the binary, for editing the page without rebuilding).
import { chromium } from 'playwright-core';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, extname } from 'node:path';

const env = (k, d) => process.env[k] ?? d;
const URL_BASE = env('CHOIR_URL');
const KEY = env('CHOIR_API_KEY', '');
const OUT = env('OUT_DIR');
const WANT_TTS = env('WANT_TTS') === '1';
const WANT_STS = env('WANT_STS') === '1';
const SLOW = 300_000; // random-weight models on a shared CPU: generous, but bounded

function check(cond, msg) {
  if (!cond) throw new Error('check failed: ' + msg);
}

const profile = mkdtempSync(join(tmpdir(), 'choir-ui-chromium-'));
// A persistent context on a fresh, empty profile directory is how playwright
// takes --user-data-dir.
const browser = await chromium.launchPersistentContext(profile, {
  executablePath: env('CHROMIUM', '/usr/bin/chromium'),
  headless: true,
  viewport: { width: 1100, height: 900 },
  args: [
    '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync', '--autoplay-policy=no-user-gesture-required',
  ],
});
let failed = false;
const page = browser.pages()[0] || (await browser.newPage());
const consoleErrors = [];
page.on('console', (m) => { if (m.type() === 'error') consoleErrors.push(m.text()); });
page.on('pageerror', (e) => consoleErrors.push('page error: ' + e.message));
let transcriptionPosts = 0;
page.on('request', (r) => {
  if (r.method() === 'POST' && new URL(r.url()).pathname === '/v1/audio/transcriptions') transcriptionPosts++;
});

async function shot(name) {
  await page.screenshot({ path: join(OUT, name + '.png'), fullPage: true });
  console.log('screenshot: ' + join(OUT, name + '.png'));
}
const ui = (expr) => page.evaluate(expr);
const waitUi = (expr, timeout) => page.waitForFunction(expr, null, { timeout: timeout ?? SLOW, polling: 100 });
const visibleText = async (sel) => ((await page.locator(sel).isVisible()) ? (await page.locator(sel).textContent()) : '');

try {
  const fromDisk = env('CHOIR_UI_FROM_DISK');
  if (fromDisk) {
    const types = { '.html': 'text/html', '.js': 'text/javascript', '.css': 'text/css' };
    await page.route(/\/(ui\/.*)?$/, (route) => {
      const p = new URL(route.request().url()).pathname;
      const name = p === '/' || p === '/ui' || p === '/ui/' ? 'index.html' : p.slice(4);
      try {
        route.fulfill({ body: readFileSync(join(fromDisk, name)), contentType: types[extname(name)] });
      } catch (e) {
        route.fulfill({ status: 404, body: 'not found' });
      }
    });
  }

  // The page itself needs no key; the API does, and says so on the page.
  const resp = await page.goto(URL_BASE + '/');
  check(resp.ok(), 'GET / answered ' + resp.status());
  check((await page.title()) === 'choir', 'page title');
  const pill = () => document.getElementById('server-state').textContent;
  if (KEY) {
    // Not "ready" with empty menus: the status says a key is needed.
    await waitUi(() => document.getElementById('server-state').textContent === 'API key needed', 10_000)
      .catch(async () => { throw new Error('the status pill shows "' + (await ui(pill)) + '" without the key'); });
    check((await page.locator('#stt-model option').count()) === 0, 'model menus empty without the key');
    await page.locator('#speak-msg').waitFor({ state: 'visible', timeout: 10_000 });
    const msg = await page.locator('#speak-msg').textContent();
    check(/401/.test(msg) && /API key/.test(msg), 'missing key shows a 401 message, got: ' + msg);
    await shot('0-missing-key');
    await page.fill('#api-key', KEY);
    await page.press('#api-key', 'Tab');
  }
  await waitUi(() => document.getElementById('server-state').textContent === 'ready', 10_000);
  await waitUi(() => document.querySelectorAll('#stt-model option').length > 0, 10_000);
  await waitUi(() => window.choirUi.metricsUpdates > 0 && window.choirUi.metrics, 10_000);
  const before = await ui(() => window.choirUi.metrics.completed);
  let requests = 0;

  // Speak: the audio element must hold audio before the stream has ended.
  if (WANT_TTS) {
    // The voice list is the chosen model's voices, no others.
    const offered = await ui(() => [...document.querySelectorAll('#voice-list option')].map((o) => o.value));
    const listed = await page.evaluate(async (key) => {
      const res = await fetch('/v1/models', { headers: key ? { Authorization: 'Bearer ' + key } : {} });
      const m = (await res.json()).data.find((x) => x.id === document.getElementById('speak-model').value);
      return m.voices || [];
    }, KEY);
    console.log('voices offered: ' + offered.join(', '));
    check(listed.length > 0 && JSON.stringify(offered) === JSON.stringify(listed),
      'voices offered ' + JSON.stringify(offered) + ' are the model\'s ' + JSON.stringify(listed));
    await page.fill('#speak-text', 'Hello there. This is the second sentence, said after the first.');
    await page.fill('#speak-voice', 'af_heart');
    await page.click('#speak-go');
    await waitUi(() => window.choirUi.speech && (window.choirUi.speech.doneMs !== null || window.choirUi.speech.error) &&
      !document.getElementById('speak-go').disabled);
    const sp = await ui(() => window.choirUi.speech);
    console.log('speech: ' + JSON.stringify(sp));
    check(!(await visibleText('#speak-msg')), 'speech error shown: ' + (await visibleText('#speak-msg')));
    check(sp.bytes > 1000, 'speech bytes ' + sp.bytes);
    check(sp.firstBufferedMs !== null && sp.firstBufferedMs < sp.doneMs,
      'the audio element had data (' + sp.firstBufferedMs + ' ms) before synthesis ended (' + sp.doneMs + ' ms)');
    await waitUi(() => document.getElementById('speak-audio').currentTime > 0 || document.getElementById('speak-audio').ended, 20_000)
      .catch(() => console.log('note: the audio element did not advance (no audio output in this browser?)'));
    const sp2 = await ui(() => window.choirUi.speech);
    console.log('speech: playing after ' + sp2.playingMs + ' ms; stream ended after ' + sp2.doneMs + ' ms');
    check(sp2.playingMs !== null && sp2.playingMs < sp2.doneMs, 'playback started before synthesis ended');
    await shot('1-speak');
    requests++;

    // An API error is shown on the page, in the server's words.
    await page.fill('#speak-voice', 'no_such_voice');
    await page.click('#speak-go');
    await page.locator('#speak-msg').waitFor({ state: 'visible', timeout: 30_000 });
    const bad = await page.locator('#speak-msg').textContent();
    console.log('speech error shown: ' + bad);
    check(/no_such_voice/.test(bad) && /^Error 4\d\d /.test(bad), 'bad voice error message, got: ' + bad);
    await shot('1-speak-error');
    await page.fill('#speak-voice', 'af_heart');
  } else {
    console.log('SKIP speak: no text-to-speech model served');
  }

  // Transcribe jfk.wav: text streams in, then timestamps.
  await page.click('#tab-transcribe');
  await page.setInputFiles('#stt-file', env('JFK_WAV'));
  await page.check('#stt-timestamps');
  await page.click('#stt-go');
  await waitUi(() => window.choirUi.transcript && window.choirUi.transcript.doneMs !== null &&
    !document.getElementById('stt-go').disabled || !document.getElementById('stt-msg').hidden);
  check(!(await visibleText('#stt-msg')), 'transcription error shown: ' + (await visibleText('#stt-msg')));
  await waitUi(() => !document.getElementById('stt-go').disabled);
  const tr = await ui(() => window.choirUi.transcript);
  console.log('transcript: ' + JSON.stringify({ ...tr, segments: tr.segments.length }));
  const text = (await page.locator('#stt-text').textContent()).trim();
  check(text.length > 0, 'transcript text shown');
  check(tr.deltas >= 1, 'transcript arrived as stream events');
  const rows = page.locator('#stt-segments tbody tr');
  check((await rows.count()) >= 1, 'segment rows with timestamps');
  const start = await rows.first().locator('td').first().textContent();
  check(/^\d\d:\d\d\.\d\d$/.test(start), 'timestamp cell ' + start);
  check(transcriptionPosts === 1, 'one transcription request (segments come over SSE), made ' + transcriptionPosts);
  check(tr.segments.length >= 1, 'segments arrived in the stream');
  await shot('2-transcribe');
  requests += 1;

  // Enhance: before/after players.
  await page.click('#tab-enhance');
  if (WANT_STS) {
    await page.setInputFiles('#sts-file', env('STS_WAV'));
    await page.click('#sts-go');
    await waitUi(() => (window.choirUi.enhance || !document.getElementById('sts-msg').hidden) &&
      !document.getElementById('sts-go').disabled);
    check(!(await visibleText('#sts-msg')), 'enhancement error shown: ' + (await visibleText('#sts-msg')));
    await waitUi(() => document.getElementById('sts-after').duration > 0 && document.getElementById('sts-before').duration > 0, 10_000);
    const d = await ui(() => [document.getElementById('sts-before').duration, document.getElementById('sts-after').duration]);
    console.log('enhance: before ' + d[0].toFixed(3) + ' s, after ' + d[1].toFixed(3) + ' s');
    check(Math.abs(d[0] - d[1]) < 0.05, 'enhanced audio as long as the input');
    requests++;
  } else {
    console.log('SKIP enhance: no enhancement model served');
  }
  await shot('3-enhance');

  // Engine: the panel must count the requests just made.
  await page.click('#tab-engine');
  const want = before + requests;
  await page.waitForFunction((n) => window.choirUi.metrics.completed >= n, want, { timeout: 15_000, polling: 200 });
  const m = await ui(() => window.choirUi.metrics);
  console.log('metrics: ' + JSON.stringify(m));
  check((await page.locator('#m-completed').textContent()) === String(m.completed), 'completed count shown');
  check(m.budget > 0 && (await page.locator('#m-budget').textContent()) !== '–', 'memory budget shown');
  check((await page.locator('#chart-batch rect').count()) > 0, 'batch size bars drawn');
  check((await page.locator('#chart-latency polyline').count()) === 3, 'three latency lines drawn');
  check(/\d/.test(await page.locator('#m-p50').textContent()), 'p50 latency shown');
  check((await page.locator('#models-table tbody tr').count()) >= 1, 'models listed');
  await page.waitForTimeout(2500); // one more poll, so the charts have two points
  await shot('4-engine');

  // A 390-px phone screen: no tab is wider than the screen.
  await page.setViewportSize({ width: 390, height: 844 });
  for (const t of ['speak', 'transcribe', 'enhance', 'engine']) {
    await page.click('#tab-' + t);
    const wide = await ui(() => {
      const over = [...document.querySelectorAll('body *')].filter((e) => {
        const r = e.getBoundingClientRect();
        return r.width > 0 && r.right > window.innerWidth + 0.5;
      });
      return { width: document.documentElement.scrollWidth, over: over.slice(0, 3).map((e) => e.tagName + '#' + e.id) };
    });
    check(wide.width <= 390 && !wide.over.length, t + ' tab at 390 px: ' + JSON.stringify(wide));
  }
  await shot('5-phone');
  if (consoleErrors.length) console.log('browser console errors:\n  ' + consoleErrors.join('\n  '));
  console.log('ui test: ok');
} catch (e) {
  failed = true;
  console.log('FAIL: ' + e.message);
  if (consoleErrors.length) console.log('browser console errors:\n  ' + consoleErrors.join('\n  '));
  await shot('failure').catch(() => {});
} finally {
  await browser.close();
  rmSync(profile, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
