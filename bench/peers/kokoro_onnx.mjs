// Kokoro-82M through ONNX Runtime on the CPU (onnxruntime-node), the peer of
// `choir bench kokoro`. The model is the reference exported with random
// weights by bench/peers/kokoro_onnx_export.py.
//
//   node kokoro_onnx.mjs MODEL.onnx [--tokens N] [--runs R] [--threads T]
//
// One utterance of N phoneme ids (deterministic, default 120 ~ a sentence)
// with a deterministic random style, speed 1, batch 1: a warm-up run, then R
// timed runs. Prints each run's wall time, the audio seconds produced
// (24 kHz) and the real-time factor (wall / audio), then the median.
// onnxruntime-node is resolved from NODE_PATH or the working directory
// (bench/peers/kokoro_onnx.sh installs it outside the repo).
import { createRequire } from 'node:module';
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
const feeds = {
  input_ids: new ort.Tensor('int64', ids, [1, tokens + 2]),
  style: new ort.Tensor('float32', style, [1, 256]),
  speed: new ort.Tensor('float32', new Float32Array([1]), [1]),
};
const once = async () => {
  const t0 = process.hrtime.bigint();
  const out = await session.run(feeds);
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  return { s, audio: out.waveform.data.length / 24000 };
};
await once();
const rtf = [];
for (let r = 0; r < runs; r++) {
  const { s, audio } = await once();
  rtf.push(s / audio);
  console.log(`onnxruntime run ${r + 1}: ${s.toFixed(3)} s for ${audio.toFixed(2)} s of audio, RTF ${(s / audio).toFixed(4)}`);
}
rtf.sort((a, b) => a - b);
console.log(`onnxruntime median RTF ${rtf[Math.floor(rtf.length / 2)].toFixed(4)} (${tokens} phoneme ids, ${threads} threads, onnxruntime-node ${require('onnxruntime-node/package.json').version})`);
