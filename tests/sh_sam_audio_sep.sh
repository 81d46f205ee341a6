#!/bin/bash
# ctest: labels=slow;nosan
# `choir sep` and POST /v1/audio/separations on the fixture's tiny SAM-Audio
# model (randw weights; Euler, 2 steps; the first 1.2 s of jfk48k_3s.wav in
# 0.5-s chunks with 0.15-s crossfades: 3 chunks): both output files hold
# exactly the input's 57600 samples at 48 kHz; the server answers JSON with base64 WAV target and residual (as
# mlx-audio's server), one track as WAV bytes on request, the same track
# streamed chunk by chunk, and 400/404/415 for bad requests.
set -u
BIN=${CHOIR_BIN:?}
FIX=${CHOIR_SHARED_DIR:?}/fixtures/sam-audio/sam-tiny
SRCWAV=${CHOIR_SHARED_DIR}/fixtures/audio/jfk48k_3s.wav
TMP=$(mktemp -d "${TMPDIR:-/tmp}/choir-sep-XXXXXX")
WAV=$TMP/in.wav
python3 - "$SRCWAV" "$WAV" <<'PY'
import sys, wave
r = wave.open(sys.argv[1]); w = wave.open(sys.argv[2], "wb")
w.setparams(r.getparams()); w.writeframes(r.readframes(57600)); w.close()
PY
SERVER=
cleanup() {
    [ -n "$SERVER" ] && { kill -9 "$SERVER" && wait "$SERVER"; } 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }
M="$TMP/models/sam"
mkdir -p "$TMP/models"
"$BIN" dev weights --manifest "$FIX/manifest.json" --config "$FIX/config.json" --out "$M" >/dev/null 2>&1 &&
"$BIN" dev weights --manifest "$FIX/t5/manifest.json" --config "$FIX/t5/config.json" --out "$M/t5" >/dev/null 2>&1 &&
cp "$FIX/t5/tokenizer.json" "$M/t5/" || { echo "FAIL: choir dev weights"; exit 1; }
FAST=(--steps 2 --method euler --chunk-seconds 0.5 --overlap-seconds 0.15)
"$BIN" sep --model "$M" --prompt "man speaking" "$WAV" -o "$TMP/t.wav" --residual "$TMP/r.wav" "${FAST[@]}" \
    2>"$TMP/sep.log" || { cat "$TMP/sep.log"; bad "choir sep"; }
grep -q "3 chunk(s)" "$TMP/sep.log" || bad "choir sep did not report 3 chunks: $(tail -c 300 "$TMP/sep.log")"
for f in t r; do
    [ "$(stat -c %s "$TMP/$f.wav" 2>/dev/null)" = $((44 + 2 * 57600)) ] || bad "$f.wav is not 57600 16-bit samples"
done
cmp -s "$TMP/t.wav" "$TMP/r.wav" && bad "target and residual are identical"
"$BIN" sep --model "$M" --prompt "x" "$WAV" --steps 0 >/dev/null 2>&1 && bad "steps 0 accepted"
"$BIN" sep --model "$M" --prompt "x" "$WAV" --anchors "*:1:2" >/dev/null 2>&1 && bad "bad anchors accepted"
"$BIN" sep --model "$TMP/none" --prompt "x" "$WAV" -o "$TMP/x.wav" >/dev/null 2>&1 && bad "missing model accepted"

"$BIN" serve --models "$TMP/models" --port 0 --port-file "$TMP/port" >"$TMP/server.log" 2>&1 &
SERVER=$!
for _ in $(seq 100); do [ -s "$TMP/port" ] && break; sleep 0.1; done
[ -s "$TMP/port" ] || { echo "FAIL: server did not start"; cat "$TMP/server.log"; exit 1; }
U="http://127.0.0.1:$(cat "$TMP/port")/v1/audio/separations"
B=(-F file=@"$WAV" -F model=sam -F chunk_seconds=0.5 -F overlap_seconds=0.15)
F=("${B[@]}" -F steps=2 -F method=euler)
req() { # status, curl args...
    local want=$1; shift
    local got
    got=$(curl -s -o "$TMP/body" -w '%{http_code}' "$@")
    [ "$got" = "$want" ] || bad "want $want got $got for $*: $(head -c 300 "$TMP/body")"
}
req 200 "${F[@]}" -F description="man speaking" -F anchors="+:0.5:1.5" "$U"
for k in target residual; do
    python3 - "$TMP/body" "$k" <<'PY' || bad "JSON $k is not a 57600-sample base64 WAV"
import base64, io, json, sys, wave
w = wave.open(io.BytesIO(base64.b64decode(json.load(open(sys.argv[1]))[sys.argv[2]])))
sys.exit(0 if (w.getframerate(), w.getnframes()) == (48000, 57600) else 1)
PY
done
grep -q '"sample_rate":48000' "$TMP/body" || bad "JSON has no sample_rate"
req 200 "${F[@]}" -F response_format=wav -F return=residual "$U"
[ "$(head -c 4 "$TMP/body")" = RIFF ] && [ "$(stat -c %s "$TMP/body")" = $((44 + 2 * 57600)) ] ||
    bad "residual WAV is not 57600 samples"
curl -s -N "${F[@]}" -F response_format=pcm -F stream=true -o "$TMP/stream.pcm" "$U"
[ "$(stat -c %s "$TMP/stream.pcm" 2>/dev/null)" = $((2 * 57600)) ] || bad "streamed pcm is not 57600 samples"
req 400 "${B[@]}" -F method=rk4 "$U"
req 400 "${B[@]}" -F steps=abc "$U"
# numbers are read as the flags read them: in range for their type before any
# cast (steps 1e30 and a NaN seed were undefined casts), whole where they count
for v in "steps=1e30" "steps=2.5" "seed=nan" "seed=-1" "seed=1.5" "seed=18446744073709551616"; do
    req 400 "${B[@]}" -F "$v" "$U"
done
req 400 -F file=@"$WAV" -F model=sam -F chunk_seconds=nan "$U"
req 400 -F file=@"$WAV" -F model=sam -F chunk_seconds=0.5 -F overlap_seconds=inf "$U"
req 400 "${B[@]}" -F anchors="+:2:1" "$U"
req 400 "${B[@]}" -F response_format=json -F stream=true "$U"
req 404 -F file=@"$WAV" -F model=nope "$U"
head -c 5000 /dev/urandom >"$TMP/noise.bin"
req 415 -F file=@"$TMP/noise.bin" -F model=sam "$U"
req 400 -F model=sam "$U"
exit $fail
