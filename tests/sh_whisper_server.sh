#!/usr/bin/env bash
# Whisper over the HTTP API on the whisper-ml80 fixture weights (random: the
# words are noise). A request whose options the model can never run (here an
# unknown language, which the server passes on unread) is answered 400 at
# submit by the adapter's check op, before anything is queued: the model is
# not even loaded. A good request then loads it and is answered 200. Only
# 127.0.0.1; every wait is bounded.
set -uo pipefail
BIN=${CHOIR_BIN:?}
SH=${CHOIR_SHARED_DIR:?}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/choir-wsrv-XXXXXX")
SERVER=
cleanup() {
    [ -n "$SERVER" ] && { kill -9 "$SERVER" && wait "$SERVER"; } 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT
fail() {
    echo "FAIL: $*"
    tail -n 20 "$TMP/server.log"
    exit 1
}
FX=$SH/fixtures/whisper/whisper-ml80
"$BIN" dev weights --manifest "$FX/manifest.json" --config "$FX/config.json" --out "$TMP/models/w" >/dev/null 2>&1 \
    || fail "choir dev weights"
cp "$SH/fixtures/real/tokenizer/multilingual.tiktoken" "$TMP/models/w/" || fail "tokenizer"
WAV=$SH/fixtures/real/speech/jfk.wav
"$BIN" serve --models "$TMP/models" --port 0 --port-file "$TMP/port" >"$TMP/server.log" 2>&1 &
SERVER=$!
for _ in $(seq 100); do [ -s "$TMP/port" ] && break; sleep 0.1; done
[ -s "$TMP/port" ] || fail "server did not start"
U=http://127.0.0.1:$(cat "$TMP/port")
stt() { # EXPECTED-STATUS CURL-FORM-ARGS...: body in $TMP/body
    local want=$1 code
    shift
    code=$(curl -s --max-time 180 -o "$TMP/body" -w '%{http_code}' -F model=w -F file=@"$WAV" "$@" "$U/v1/audio/transcriptions")
    [ "$code" = "$want" ] || fail "${*}: status $code, expected $want: $(head -c 300 "$TMP/body")"
}
status() { curl -s --max-time 10 "$U/v1/models/w" | grep -o '"status":"[a-z_]*"'; }

stt 400 -F language=xx
grep -q "unknown language 'xx'" "$TMP/body" || fail "400 without the adapter's message: $(cat "$TMP/body")"
[ "$(status)" = '"status":"not_loaded"' ] || fail "refused request loaded the model: $(status)"
stt 200 -F language=en -F temperature=0
[ "$(status)" = '"status":"loaded"' ] || fail "good request did not load the model: $(status)"
# loaded, the same refusal still comes at submit
stt 400 -F language=xx
grep -q "unknown language 'xx'" "$TMP/body" || fail "400 (loaded) without the adapter's message: $(cat "$TMP/body")"
echo "whisper server: ok"
