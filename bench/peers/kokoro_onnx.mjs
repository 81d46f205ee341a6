// Kokoro-82M through ONNX Runtime on the CPU (onnxruntime-node), the peer of
// `choir bench kokoro`. The model is the reference exported with random
// weights by bench/peers/kokoro_onnx_export.py.
//
//   node kokoro_onnx.mjs MODEL.onnx [--tokens N | --pieces DIR [--dump]] [--runs R] [--threads T]
//
// One utterance of N phoneme ids (deterministic, default 120 ~ a sentence)
// with a deterministic random style, speed 1, batch 1: a warm-up run, then R
// timed runs. Prints each run's wall time, the audio seconds produced
// (24 kHz) and the real-time factor (wall / audio), then the median.
// --pieces DIR: the pieces `choir bench kokoro --pieces-out DIR` wrote
// (piece-K.ids.i32, piece-K.style.f32: the same text, voice rows and split
// as choir's streamed batch-1 run), run one after another, batch 1; a run is
// all of them. --dump also writes each piece's outputs of the first run
// (piece-K.ort.{audio,duration,f0,n,post}.f32; f0, n, post when the graph has them,
// as bench/peers/kokoro_onnx_zero.py's variant does).
// onnxruntime-node is resolved from NODE_PATH or the working directory
// (bench/peers/kokoro_onnx.sh installs it outside the repo).
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';

const require = createRequire(path.join(process.cwd(), 'noop.js'));
const ort = require('onnxruntime-node');

const args = process.argv.slice(2);
if (args.length < 1) {
  console.error('usage: node kokoro_onnx.mjs MODEL.onnx [--tokens N] [--runs R] [--threads T]');
  process.exit(2);
}
const opt = (name, def) => {
  const i = args.indexOf(name);
  return i >= 0 ? Number(args[i + 1]) : def;
};
const tokens = opt('--tokens', 120), runs = opt('--runs', 3), threads = opt('--threads', 2);
const piecesDir = args.includes('--pieces') ? args[args.indexOf('--pieces') + 1] : null;
const dump = args.includes('--dump');

let seed = 0x2545f491;
const rand = () => { // xorshift32 in [0, 1)
  seed ^= seed << 13; seed >>>= 0; seed ^= seed >>> 17; seed ^= seed << 5; seed >>>= 0;
  return seed / 4294967296;
};
const ids = new BigInt64Array(tokens + 2);
for (let i = 1; i <= tokens; i++) ids[i] = BigInt(1 + Math.floor(rand() * 177));
const style = new Float32Array(256);
for (let i = 0; i < 256; i++) style[i] = (rand() * 2 - 1) * 0.5;

const session = await ort.InferenceSession.create(args[0], {
  intraOpNumThreads: threads, interOpNumThreads: 1, executionProviders: ['cpu'],
  graphOptimizationLevel: 'all',
});
const speed = new ort.Tensor('float32', new Float32Array([1]), [1]);
const feedsOf = (pid, pstyle) => ({
  input_ids: new ort.Tensor('int64', pid, [1, pid.length]),
  style: new ort.Tensor('float32', pstyle, [1, 256]),
  speed,
});
let pieces = [feedsOf(ids, style)];
if (piecesDir) {
  pieces = [];
  for (let k = 0; fs.existsSync(path.join(piecesDir, `piece-${k}.ids.i32`)); k++) {
    const raw = fs.readFileSync(path.join(piecesDir, `piece-${k}.ids.i32`));
    const i32 = new Int32Array(raw.buffer, raw.byteOffset, raw.length / 4);
    const st = fs.readFileSync(path.join(piecesDir, `piece-${k}.style.f32`));
    pieces.push(feedsOf(BigInt64Array.from(i32, (x) => BigInt(x)),
      new Float32Array(st.buffer.slice(st.byteOffset, st.byteOffset + st.length))));
  }
  if (!pieces.length) throw new Error(`no piece-0.ids.i32 in ${piecesDir}`);
}
const write = (k, what, data) => fs.writeFileSync(path.join(piecesDir, `piece-${k}.ort.${what}.f32`),
  Buffer.from(Float32Array.from(data, Number).buffer));
let dumped = !dump;
const once = async () => {
  const t0 = process.hrtime.bigint();
  let samples = 0;
  for (let k = 0; k < pieces.length; k++) {
    const out = await session.run(pieces[k]);
    samples += out.waveform.data.length;
    if (!dumped) {
      write(k, 'audio', out.waveform.data);
      write(k, 'duration', out.duration.data);
      for (const x of ['f0', 'n', 'post', 'asr']) if (out[x]) write(k, x, out[x].data);
    }
  }
  dumped = true;
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  return { s, audio: samples / 24000 };
};
await once();
const rtf = [];
for (let r = 0; r < runs; r++) {
  const { s, audio } = await once();
  rtf.push(s / audio);
  console.log(`onnxruntime run ${r + 1}: ${s.toFixed(3)} s for ${audio.toFixed(2)} s of audio, RTF ${(s / audio).toFixed(4)}`);
}
rtf.sort((a, b) => a - b);
if (!runs) process.exit(0);
const what = piecesDir ? `${pieces.length} pieces of ${piecesDir}` : `${tokens} phoneme ids`;
console.log(`onnxruntime median RTF ${rtf[Math.floor(rtf.length / 2)].toFixed(4)} (${what}, ${threads} threads, onnxruntime-node ${require('onnxruntime-node/package.json').version})`);
