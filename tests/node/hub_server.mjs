// A tiny stand-in for the Hugging Face Hub, for tests/sh_pull.sh: serves the
// repositories under ROOT (ROOT/owner/name/...) in the Hub's URL layout:
//   GET /api/models/{owner}/{name}/revision/{rev}[?blobs=true] -> {sha, siblings: [{rfilename, size, lfs?}]}
//   GET /{owner}/{name}/resolve/{rev}/{path}                  -> the file (Range supported)
// Options: --drop-after N  the first full download of each LFS file stops after N bytes
//          --corrupt PATH  that repository path is served with one byte changed
// It listens on 127.0.0.1 only, writes its port to PORT_FILE, logs one line per
// request to LOG_FILE, and exits by itself after 120 s.
// Usage: node hub_server.mjs ROOT PORT_FILE LOG_FILE [options]
import { createHash } from 'node:crypto';
import { appendFileSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { join, relative } from 'node:path';

const [root, portFile, logFile, ...opts] = process.argv.slice(2);
const dropAfter = opts.includes('--drop-after') ? Number(opts[opts.indexOf('--drop-after') + 1]) : 0;
const corrupt = opts.includes('--corrupt') ? opts[opts.indexOf('--corrupt') + 1] : null;
const COMMIT = 'c0ffee' + '0'.repeat(34);
const dropped = new Set();

const isLfs = (p) => p.endsWith('.safetensors') || p.endsWith('.bin');

function walk(dir) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? walk(join(dir, e.name)) : [join(dir, e.name)]);
}

function listing(repoDir) {
  const siblings = walk(repoDir).sort().map((f) => {
    const rfilename = relative(repoDir, f);
    const size = statSync(f).size;
    const s = { rfilename, size };
    if (isLfs(rfilename)) s.lfs = { sha256: createHash('sha256').update(readFileSync(f)).digest('hex'), size };
    return s;
  });
  const extra = join(repoDir, '..', 'EXTRA_SIBLINGS.json'); // lets a test inject hostile names
  try { siblings.push(...JSON.parse(readFileSync(extra, 'utf8'))); } catch { /* none */ }
  return { id: relative(root, repoDir), sha: COMMIT, siblings };
}

function repoDir(owner, name) {
  const d = join(root, owner, name);
  try { return statSync(d).isDirectory() ? d : null; } catch { return null; }
}

const server = createServer((req, res) => {
  const url = new URL(req.url, 'http://x');
  const parts = url.pathname.split('/').filter(Boolean).map(decodeURIComponent);
  appendFileSync(logFile, `${req.method} ${url.pathname} range=${req.headers.range || '-'}\n`);
  const notFound = () => { res.writeHead(404, { 'Content-Type': 'application/json' }); res.end('{"error":"not found"}'); };
  if (parts[0] === 'api' && parts[1] === 'models' && parts[4] === 'revision' && parts.length === 6) {
    const d = repoDir(parts[2], parts[3]);
    if (!d || (parts[5] !== 'main' && parts[5] !== COMMIT)) return notFound();
    res.writeHead(200, { 'Content-Type': 'application/json' });
    return res.end(JSON.stringify(listing(d)));
  }
  if (parts[2] === 'resolve' && parts.length >= 5) {
    const d = repoDir(parts[0], parts[1]);
    const rel = parts.slice(4).join('/');
    if (!d || parts[3] !== COMMIT || rel.includes('..')) return notFound();
    let data;
    try { data = Buffer.from(readFileSync(join(d, rel))); } catch { return notFound(); }
    if (rel === corrupt) data[data.length >> 1] ^= 0xff;
    const m = /^bytes=(\d+)-$/.exec(req.headers.range || '');
    if (m) {
      const from = Number(m[1]);
      if (from >= data.length) { res.writeHead(416); return res.end(); }
      res.writeHead(206, { 'Content-Length': data.length - from,
                           'Content-Range': `bytes ${from}-${data.length - 1}/${data.length}` });
      return res.end(data.subarray(from));
    }
    if (dropAfter > 0 && isLfs(rel) && !dropped.has(rel) && data.length > dropAfter) {
      dropped.add(rel);
      res.writeHead(200, { 'Content-Length': data.length });
      res.write(data.subarray(0, dropAfter), () => setTimeout(() => res.destroy(), 50));
      return;
    }
    res.writeHead(200, { 'Content-Length': data.length });
    return res.end(data);
  }
  notFound();
});
server.listen(0, '127.0.0.1', () => writeFileSync(portFile, String(server.address().port)));
setTimeout(() => process.exit(0), 120000).unref();
