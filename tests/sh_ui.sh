#!/usr/bin/env bash
# ctest: cost=56
# The web page of `choir serve` in a real browser: Debian's headless Chromium,
# driven by playwright-core (tests/ui/ui_test.mjs), against a server on
# 127.0.0.1 with fixture models (Whisper ml80 with its tokenizer, Kokoro-82M on
# randw weights when the adapter is built, MossFormer2 for enhancement, the
# real Silero VAD). Screenshots of each tab go to $CHOIR_BUILD_DIR/ui-screenshots.
# Also checks over plain HTTP that the page is served without the API key,
# with the right types, and that --no-ui turns it off.
# Skips (exit 0, with a message) when chromium or node is missing.
set -uo pipefail
BIN=${CHOIR_BIN:?}
SH=${CHOIR_SHARED_DIR:?}
SRC=${CHOIR_SOURCE_DIR:?}
OUT=${CHOIR_BUILD_DIR:-$SRC/build}/ui-screenshots
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/choir-ui-XXXXXX")
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do { kill "$p" && wait "$p"; } 2>/dev/null; done
    rm -rf "$TMP"
}
trap cleanup EXIT
fail() {
    echo "FAIL: $*"
    for f in "$TMP"/*.log; do [ -f "$f" ] && { echo "--- $f"; tail -n 30 "$f"; }; done
    exit 1
}

[ -x "$CHROMIUM" ] || { echo "SKIP: no $CHROMIUM (apt-get install chromium)"; exit 0; }
command -v node >/dev/null && command -v npm >/dev/null || { echo "SKIP: node/npm missing"; exit 0; }
if [ ! -d "$SRC/tests/ui/node_modules/playwright-core" ]; then
    (cd "$SRC/tests/ui" && npm ci --no-audit --no-fund >"$TMP/npm.log" 2>&1) || fail "npm ci in tests/ui"
fi
mkdir -p "$OUT"
rm -f "$OUT"/*.png

# --- models -----------------------------------------------------------------
M=$TMP/models
mkdir -p "$M"
FX=$SH/fixtures
"$BIN" dev weights --manifest "$FX/whisper/whisper-ml80/manifest.json" --config "$FX/whisper/whisper-ml80/config.json" \
    --out "$M/whisper-ml80" >"$TMP/weights.log" 2>&1 || fail "choir dev weights (whisper)"
cp "$FX/real/tokenizer/multilingual.tiktoken" "$M/whisper-ml80/"
mkdir -p "$M/silero-vad"
cp "$FX/real/vad/silero_vad_16k.safetensors" "$M/silero-vad/model.safetensors"
echo '{"model_type": "silero_vad", "sample_rate": 16000}' >"$M/silero-vad/config.json"
WANT_TTS=0
if [ -f "$SRC/src/models/kokoro/kokoro_model.c" ]; then
    "$BIN" dev weights --manifest "$FX/kokoro/kokoro-v1/manifest.json" --config "$FX/kokoro/kokoro-v1/config.json" \
        --out "$M/kokoro" >>"$TMP/weights.log" 2>&1 || fail "choir dev weights (kokoro)"
    mkdir -p "$M/kokoro/voices"
    cp "$FX/kokoro/voices/"*.bin "$M/kokoro/voices/"
    WANT_TTS=1
else
    echo "SKIP (speech part): no Kokoro adapter (src/models/kokoro/kokoro_model.c) in this tree"
fi
WANT_STS=0
if [ -f "$SRC/src/models/sts/mossformer2_model.c" ]; then
    MF=$FX/mossformer2/mossformer2-se-48k
    "$BIN" dev weights --manifest "$MF/manifest.json" --config "$MF/config.json" --out "$M/mossformer2" \
        >>"$TMP/weights.log" 2>&1 || fail "choir dev weights (mossformer2)"
    WANT_STS=1
fi

# --- server -----------------------------------------------------------------
KEY=ui-test-key
start_server() { # NAME ARGS...: sets PORT
    local name=$1
    shift
    "$BIN" serve --port 0 --port-file "$TMP/$name.port" "$@" >"$TMP/$name.log" 2>&1 &
    PIDS+=($!)
    for _ in $(seq 300); do
        [ -s "$TMP/$name.port" ] && break
        kill -0 "${PIDS[-1]}" 2>/dev/null || break
        sleep 0.1
    done
    [ -s "$TMP/$name.port" ] || fail "server $name did not start"
    PORT=$(cat "$TMP/$name.port")
}
start_server main --models "$M" --api-key "$KEY" --memory-budget 4G
U=http://127.0.0.1:$PORT

# The page and its files need no key; the API still does.
code=$(curl -s -o "$TMP/index.html" -D "$TMP/h" -w '%{http_code}' "$U/") || true
[ "$code" = 200 ] || fail "GET / answered $code"
grep -qi '^Content-Type: text/html' "$TMP/h" || fail "GET / is not text/html"
cmp -s "$TMP/index.html" "$SRC/web/index.html" || fail "GET / differs from web/index.html (run tools/embed_assets.sh)"
for f in app.js style.css; do
    curl -s -o "$TMP/$f" -D "$TMP/h" "$U/ui/$f" || fail "GET /ui/$f"
    cmp -s "$TMP/$f" "$SRC/web/$f" || fail "GET /ui/$f differs from web/$f"
done
grep -qi '^Content-Type: text/javascript' <(curl -s -D - -o /dev/null "$U/ui/app.js") || fail "app.js type"
code=$(curl -s -o /dev/null -w '%{http_code}' "$U/ui/../CMakeLists.txt") || true
[ "$code" = 404 ] || [ "$code" = 401 ] || fail "a path outside the assets answered $code"
code=$(curl -s -o /dev/null -w '%{http_code}' "$U/v1/models") || true
[ "$code" = 401 ] || fail "the API answered $code without the key"

# --- browser ----------------------------------------------------------------
CHOIR_URL=$U CHOIR_API_KEY=$KEY OUT_DIR=$OUT CHROMIUM=$CHROMIUM WANT_TTS=$WANT_TTS WANT_STS=$WANT_STS \
    JFK_WAV=$FX/real/speech/jfk.wav STS_WAV=$FX/audio/jfk48k_3s.wav \
    timeout 540 node "$SRC/tests/ui/ui_test.mjs" 2>&1 | tee "$TMP/browser.log"
[ "${PIPESTATUS[0]}" = 0 ] || fail "browser test (screenshots in $OUT)"
for s in 0-missing-key 2-transcribe 3-enhance 4-engine; do
    [ -s "$OUT/$s.png" ] || fail "no screenshot $s.png"
done
[ "$WANT_TTS" = 0 ] || [ -s "$OUT/1-speak.png" ] || fail "no screenshot 1-speak.png"

# --no-ui: the page is gone, the API stays.
if "$BIN" serve --help | grep -q -- '--no-ui'; then
    start_server noui --models "$M/whisper-ml80" --no-ui
    code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/") || true
    [ "$code" = 404 ] || fail "--no-ui: GET / answered $code"
    code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/v1/models") || true
    [ "$code" = 200 ] || fail "--no-ui: /v1/models answered $code"
else
    echo "SKIP (--no-ui part): choir serve has no --no-ui option yet"
fi
echo "sh_ui: ok (screenshots in $OUT)"
