#!/bin/bash
# VibeVoice-ASR through `choir serve` and POST /v1/audio/transcriptions with
# model= the VibeVoice folder (vv-hello fixture weights, untrained): the
# folder is recognised as kind "vibevoice", the upload is decoded at 24 kHz
# and transcribed (the prompt field as context), and the untrained model's
# non-JSON output is reported as an error (500 with the reason), plainly and
# over SSE; an upload past the maximum duration is refused with 413.
set -u
BIN=${CHOIR_BIN:?}
SH=${CHOIR_SHARED_DIR:?}
FIX=$SH/fixtures/vibevoice-asr/vv-hello
TMP=$(mktemp -d "${TMPDIR:-/tmp}/choir-vvsrv-XXXXXX")
SERVER=
cleanup() {
    [ -n "$SERVER" ] && { kill "$SERVER" && wait "$SERVER"; } 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; [ -f "$TMP/server.log" ] && tail -n 20 "$TMP/server.log"; exit 1; }
command -v curl >/dev/null || { echo "SKIP: no curl"; exit 0; }
"$BIN" dev weights --manifest "$FIX/manifest.json" --config "$FIX/config.json" --out "$TMP/models/vv" \
    >/dev/null 2>&1 || fail "choir dev weights"
cp "$SH/fixtures/real/tokenizer/qwen2.5/tokenizer.json" "$TMP/models/vv/"
"$BIN" serve --models "$TMP/models" --port 0 --port-file "$TMP/port" --max-upload 100 >"$TMP/server.log" 2>&1 &
SERVER=$!
for _ in $(seq 100); do [ -s "$TMP/port" ] && break; sleep 0.1; done
[ -s "$TMP/port" ] || fail "server did not start"
URL="http://127.0.0.1:$(cat "$TMP/port")"
curl -s "$URL/v1/models" | grep -q '"kind":"vibevoice"' || fail "the folder is not listed as vibevoice"
WAV=$SH/fixtures/audio/hello24k.wav
code=$(curl -s -o "$TMP/r.json" -w '%{http_code}' "$URL/v1/audio/transcriptions" -F model=vv -F "file=@$WAV" \
    -F response_format=verbose_json -F "prompt=Speakers: Ada")
[ "$code" = 500 ] || fail "untrained model: HTTP $code ($(cat "$TMP/r.json"))"
grep -q "not a JSON transcript" "$TMP/r.json" || fail "no reason given: $(cat "$TMP/r.json")"
curl -s -N "$URL/v1/audio/transcriptions" -F model=vv -F "file=@$WAV" -F stream=true >"$TMP/sse.txt"
grep -q '"type":"error"' "$TMP/sse.txt" || fail "SSE: no error event: $(head -c 400 "$TMP/sse.txt")"
grep -q "not a JSON transcript" "$TMP/sse.txt" || fail "SSE: no reason"
# Two hours of silence (a WAV header claiming them is enough to be refused
# only after decoding, so write real samples: 16-bit mono at 8 kHz).
python3 - "$TMP/long.wav" <<'PY' || fail "python3 for the long file"
import struct, sys
n = 8000 * 3700
hdr = b"RIFF" + struct.pack("<I", 36 + 2 * n) + b"WAVEfmt " + struct.pack("<IHHIIHH", 16, 1, 1, 8000, 16000, 2, 16)
with open(sys.argv[1], "wb") as f:
    f.write(hdr + b"data" + struct.pack("<I", 2 * n))
    f.write(b"\0" * (2 * n))
PY
code=$(curl -s -o "$TMP/r2.json" -w '%{http_code}' "$URL/v1/audio/transcriptions" -F model=vv -F "file=@$TMP/long.wav")
[ "$code" = 413 ] || fail "past the maximum duration: HTTP $code ($(cat "$TMP/r2.json"))"
grep -q "at most 3660 s" "$TMP/r2.json" || fail "duration limit: $(cat "$TMP/r2.json")"
echo "vibevoice server: ok"
