// The official openai client against a running `choir serve` with fake models
// (tests/sh_server_openai.sh starts it). Usage: node openai_client.mjs BASE_URL KEY WAV
// Exits non-zero with a message on the first failed check.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import OpenAI, { toFile } from 'openai';

const [baseURL, apiKey, wavPath] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 30000 });
const SAMPLES_PER_CHAR = 240; // the fake TTS model's output length per input character

async function check(name, fn) {
  try {
    await fn();
    console.log(`ok   ${name}`);
  } catch (e) {
    console.log(`FAIL ${name}: ${e.stack || e}`);
    process.exitCode = 1;
  }
}

async function bytes(response) {
  return Buffer.from(await response.arrayBuffer());
}

await check('models.list', async () => {
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  assert.deepEqual(ids.sort(), ['fake']);
  const m = await client.models.retrieve('fake');
  assert.equal(m.object, 'model');
});

const input = 'Hello from the openai client.';
let pcm;
await check('audio.speech.create (pcm, wav, mp3)', async () => {
  pcm = await bytes(await client.audio.speech.create({ model: 'fake', voice: 'alloy', input, response_format: 'pcm' }));
  assert.equal(pcm.length, input.length * SAMPLES_PER_CHAR * 2);
  const wav = await bytes(await client.audio.speech.create({ model: 'fake', voice: 'alloy', input, response_format: 'wav' }));
  assert.equal(wav.subarray(0, 4).toString(), 'RIFF');
  assert.deepEqual(wav.subarray(44), pcm);
  const mp3 = await bytes(await client.audio.speech.create({ model: 'fake', voice: 'alloy', input }));
  assert.ok(mp3.length > 100, 'mp3 is the default format and not empty');
});

await check('audio.speech.create streamed as audio bytes', async () => {
  const r = await client.audio.speech.create({ model: 'fake', voice: 'alloy', input, response_format: 'pcm',
                                               stream_format: 'audio' });
  const chunks = [];
  for await (const c of r.body) chunks.push(Buffer.from(c));
  assert.deepEqual(Buffer.concat(chunks), pcm);
});

await check('audio.speech.create streamed as SSE', async () => {
  const r = await client.audio.speech.create({ model: 'fake', voice: 'alloy', input, response_format: 'pcm',
                                               stream_format: 'sse' });
  const text = (await bytes(r)).toString();
  const events = text.split('\n\n').filter((e) => e.startsWith('data: ')).map((e) => JSON.parse(e.slice(6)));
  const deltas = events.filter((e) => e.type === 'speech.audio.delta');
  assert.ok(deltas.length >= 2, 'streamed in several pieces');
  assert.deepEqual(Buffer.concat(deltas.map((e) => Buffer.from(e.audio, 'base64'))), pcm);
  assert.equal(events.at(-1).type, 'speech.audio.done');
});

const wav = readFileSync(wavPath);
let plain;
await check('audio.transcriptions.create (json)', async () => {
  const t = await client.audio.transcriptions.create({ model: 'fake', file: await toFile(wav, 'a.wav') });
  assert.match(t.text, /^\d+ samples, checksum [0-9a-f]{16}$/);
  plain = t.text;
});

await check('audio.transcriptions.create (srt, verbose_json)', async () => {
  const srt = await client.audio.transcriptions.create({ model: 'fake', file: await toFile(wav, 'a.wav'),
                                                         response_format: 'srt' });
  assert.match(srt, /^1\n00:00:00,000 --> 00:00:\d\d,\d{3}\n/);
  assert.ok(srt.includes(plain));
  const v = await client.audio.transcriptions.create({ model: 'fake', file: await toFile(wav, 'a.wav'),
                                                       response_format: 'verbose_json',
                                                       timestamp_granularities: ['segment'] });
  assert.equal(v.text, plain);
  assert.equal(v.task, 'transcribe');
  assert.ok(v.duration > 0);
  assert.ok(Array.isArray(v.segments));
});

await check('audio.transcriptions.create streamed', async () => {
  const stream = await client.audio.transcriptions.create({ model: 'fake', file: await toFile(wav, 'a.wav'),
                                                            stream: true });
  const types = [];
  let done;
  for await (const ev of stream) {
    types.push(ev.type);
    if (ev.type === 'transcript.text.done') done = ev.text;
  }
  assert.ok(types.includes('transcript.text.delta'));
  assert.equal(types.at(-1), 'transcript.text.done');
  assert.ok(done.endsWith(plain), 'the done event carries the transcript');
});

await check('audio.translations.create (text)', async () => {
  const t = await client.audio.translations.create({ model: 'fake', file: await toFile(wav, 'a.wav'),
                                                     response_format: 'text' });
  assert.equal(t.trim(), plain);
});

await check('errors map to the client\'s error classes', async () => {
  await assert.rejects(client.audio.speech.create({ model: 'nope', voice: 'alloy', input }),
                       (e) => e instanceof OpenAI.NotFoundError && e.status === 404);
  await assert.rejects(client.audio.speech.create({ model: 'fake', voice: 'alloy', input, speed: 9 }),
                       (e) => e instanceof OpenAI.BadRequestError && e.param === 'speed');
  const wrong = new OpenAI({ baseURL, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(wrong.models.list(), (e) => e instanceof OpenAI.AuthenticationError);
});
