#!/usr/bin/env bash
# The official `openai` npm client (pinned in tests/node/package.json) against
# `choir serve` on 127.0.0.1 with a fake model: speech plain and streamed,
# transcriptions in json, srt, verbose_json and streamed, translations, the
# model list, and errors as the client's error classes.
set -uo pipefail
BIN=${CHOIR_BIN:?}
SRC=${CHOIR_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
NODE_DIR=$SRC/tests/node
if [ ! -d "$NODE_DIR/node_modules/openai" ]; then
    # offline first (a warm npm cache is enough), the registry only if that fails
    (cd "$NODE_DIR" && { npm ci --offline --no-audit --no-fund >/dev/null 2>&1 ||
        timeout 120 npm ci --prefer-offline --no-audit --no-fund >/dev/null 2>&1; })
fi
if [ ! -d "$NODE_DIR/node_modules/openai" ] || ! command -v node >/dev/null; then
    echo "SKIP: node or the openai package is not available (run: cd tests/node && npm ci)"
    exit 0
fi
TMP=$(mktemp -d "${TMPDIR:-/tmp}/choir-openai-XXXXXX")
SERVER=
cleanup() {
    [ -n "$SERVER" ] && { kill -9 "$SERVER" && wait "$SERVER"; } 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT
mkdir -p "$TMP/models/fake"
echo '{"model_type": "choir-fake", "fixed_ms": 20, "pieces": 4}' >"$TMP/models/fake/config.json"
head -c 4096 /dev/zero >"$TMP/models/fake/model.safetensors"
python3 - "$TMP/a.wav" <<'PY'
import math, struct, sys
data = b"".join(struct.pack("<h", int(8000 * math.sin(i * 0.05))) for i in range(24000))
hdr = b"RIFF" + struct.pack("<I", 36 + len(data)) + b"WAVEfmt " + struct.pack("<IHHIIHH", 16, 1, 1, 16000, 32000, 2, 16)
open(sys.argv[1], "wb").write(hdr + b"data" + struct.pack("<I", len(data)) + data)
PY
"$BIN" serve --models "$TMP/models" --port 0 --port-file "$TMP/port" --api-key sekret >"$TMP/server.log" 2>&1 &
SERVER=$!
for _ in $(seq 100); do [ -s "$TMP/port" ] && break; sleep 0.1; done
[ -s "$TMP/port" ] || { echo "FAIL: server did not start"; cat "$TMP/server.log"; exit 1; }
timeout 120 node "$NODE_DIR/openai_client.mjs" "http://127.0.0.1:$(cat "$TMP/port")/v1" sekret "$TMP/a.wav"
rc=$?
[ $rc = 0 ] || tail -n 20 "$TMP/server.log"
exit $rc
