#!/usr/bin/env bash
# ctest: labels=slow;nosan timeout=600
# `choir serve` with real model adapters on the fixture weights: Kokoro-82M
# speech and MossFormer2 enhancement through HTTP must be byte-identical to
# what `choir tts` / `choir sts` write for the same input, and streamed speech
# (audio bytes and SSE) must carry the same samples as the CLI's.
set -uo pipefail
BIN=${CHOIR_BIN:?}
SH=${CHOIR_SHARED_DIR:?}
# Full-size models under ASan would take many minutes; the server code they
# drive is covered there by the fake-model tests (sh_server*.sh).
if ldd "$BIN" 2>/dev/null | grep -q 'libasan\|libubsan'; then
    echo "SKIP: sanitizer build (this test is labelled nosan)"
    exit 0
fi
TMP=$(mktemp -d "${TMPDIR:-/tmp}/choir-srvmodels-XXXXXX")
SERVER=
cleanup() {
    [ -n "$SERVER" ] && { kill -9 "$SERVER" && wait "$SERVER"; } 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; tail -n 20 "$TMP/server.log" 2>/dev/null; exit 1; }

mkdir -p "$TMP/m"
KF=$SH/fixtures/kokoro/kokoro-v1
MF=$SH/fixtures/mossformer2/mossformer2-se-48k
"$BIN" dev weights --manifest "$KF/manifest.json" --config "$KF/config.json" --out "$TMP/m/kokoro" >/dev/null 2>&1 ||
    fail "kokoro weights"
mkdir -p "$TMP/m/kokoro/voices"
cp "$SH/fixtures/kokoro/voices/"*.bin "$TMP/m/kokoro/voices/"
"$BIN" dev weights --manifest "$MF/manifest.json" --config "$MF/config.json" --out "$TMP/m/mf2" >/dev/null 2>&1 ||
    fail "mossformer2 weights"

"$BIN" serve --models "$TMP/m" --port 0 --port-file "$TMP/port" >"$TMP/server.log" 2>&1 &
SERVER=$!
for _ in $(seq 100); do [ -s "$TMP/port" ] && break; sleep 0.1; done
[ -s "$TMP/port" ] || fail "server did not start"
U=http://127.0.0.1:$(cat "$TMP/port")
post() { # OUT JSON
    local code
    code=$(curl -s --max-time 300 -o "$1" -w '%{http_code}' -H 'Content-Type: application/json' -d "$2" \
        "$U/v1/audio/speech")
    [ "$code" = 200 ] || fail "speech $2: $code $(head -c 300 "$1")"
}

curl -s "$U/v1/models" | grep -q '"id":"kokoro","object":"model".*"tasks":\["tts"\]' || fail "kokoro not listed"

# Kokoro, one sentence, unstreamed: the server's WAV equals the CLI's, header included
post "$TMP/server.wav" '{"model":"kokoro","input":"Hello world.","voice":"am_adam","response_format":"wav","stream":false}'
"$BIN" tts --model "$TMP/m/kokoro" --voice am_adam -o "$TMP/cli.wav" "Hello world." 2>/dev/null || fail "choir tts"
cmp "$TMP/server.wav" "$TMP/cli.wav" || fail "server speech differs from choir tts"
[ "$(stat -c %s "$TMP/server.wav")" -gt 24000 ] || fail "speech too short"

# Several sentences, streamed (short first piece, as `choir tts` does): the
# byte stream equals the CLI's PCM, and the SSE deltas carry the same bytes in
# several pieces. (Unstreamed requests are split without the short first
# piece, so their audio is not compared with the CLI's.)
TEXT='Hello world. How are you today?'
"$BIN" tts --model "$TMP/m/kokoro" --voice am_adam --format pcm -o "$TMP/cli.pcm" "$TEXT" 2>/dev/null || fail "choir tts pcm"
post "$TMP/stream.pcm" "{\"model\":\"kokoro\",\"input\":\"$TEXT\",\"voice\":\"am_adam\",\"response_format\":\"pcm\",\"stream_format\":\"audio\"}"
cmp "$TMP/stream.pcm" "$TMP/cli.pcm" || fail "streamed speech differs from choir tts"
post "$TMP/stream.sse" "{\"model\":\"kokoro\",\"input\":\"$TEXT\",\"voice\":\"am_adam\",\"response_format\":\"pcm\",\"stream_format\":\"sse\"}"
python3 - "$TMP/stream.sse" "$TMP/sse.pcm" <<'PY' || fail "SSE stream"
import base64, json, sys
events = [json.loads(e[6:]) for e in open(sys.argv[1]).read().split("\n\n") if e.startswith("data: ")]
deltas = [e for e in events if e["type"] == "speech.audio.delta"]
assert len(deltas) >= 2, f"{len(deltas)} deltas: not streamed in pieces"
assert events[-1]["type"] == "speech.audio.done", events[-1]
open(sys.argv[2], "wb").write(b"".join(base64.b64decode(e["audio"]) for e in deltas))
PY
cmp "$TMP/stream.pcm" "$TMP/sse.pcm" || fail "SSE audio differs from the byte stream"
post "$TMP/whole.wav" "{\"model\":\"kokoro\",\"input\":\"$TEXT\",\"voice\":\"am_adam\",\"response_format\":\"wav\",\"stream\":false}"
python3 - "$TMP/whole.wav" <<'PY' || fail "unstreamed WAV header"
import struct, sys
b = open(sys.argv[1], "rb").read()
assert b[:4] == b"RIFF" and struct.unpack("<I", b[4:8])[0] == len(b) - 8, "RIFF size"
assert b[36:40] == b"data" and struct.unpack("<I", b[40:44])[0] == len(b) - 44, "data size"
assert len(b) > 2 * 24000, "too short"
PY

# an unknown voice is the caller's mistake: 400, not 500
code=$(curl -s -o "$TMP/body" -w '%{http_code}' -d '{"model":"kokoro","input":"Hi.","voice":"nobody"}' "$U/v1/audio/speech")
[ "$code" = 400 ] || fail "unknown voice: $code $(cat "$TMP/body")"

# MossFormer2: the enhancement equals the CLI's, with explicit chunking
A=$SH/fixtures/audio/jfk48k_3s.wav
code=$(curl -s --max-time 300 -o "$TMP/server_sts.wav" -w '%{http_code}' -F file=@"$A" -F model=mf2 \
    -F chunk_seconds=2 -F overlap_seconds=0.5 "$U/v1/audio/enhancements")
[ "$code" = 200 ] || fail "enhancement: $code $(head -c 300 "$TMP/server_sts.wav")"
"$BIN" sts --model "$TMP/m/mf2" --chunk-seconds 2 --overlap-seconds 0.5 --quiet -o "$TMP/cli_sts.wav" "$A" ||
    fail "choir sts"
cmp "$TMP/server_sts.wav" "$TMP/cli_sts.wav" || fail "server enhancement differs from choir sts"

# MossFormer2's chunking limits (0.1..60 s, overlap shorter than the chunk):
# the server and the CLI refuse the same values with the same message, and
# an overlap of 0 is taken as 0 by both (not replaced by the default)
edge() { # CHUNK OVERLAP: the server's message for a refused pair
    curl -s --max-time 60 -o "$TMP/edge" -w '%{http_code}' -F file=@"$A" -F model=mf2 \
        -F chunk_seconds="$1" -F overlap_seconds="$2" "$U/v1/audio/enhancements" >"$TMP/edge_code"
    [ "$(cat "$TMP/edge_code")" = 400 ] || fail "chunk $1 overlap $2: HTTP $(cat "$TMP/edge_code")"
    python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["error"]["message"])' "$TMP/edge"
}
# nan is not a number to either: the form's reader refuses it as the CLI's parser does
case "$(edge nan 0)" in *"must be numbers"*) ;; *) fail "chunk nan" ;; esac
for pair in "0.0999 0" "60.001 0" "0 0" "2 2" "2 -0.1"; do
    set -- $pair
    msg=$(edge "$1" "$2")
    case "$msg" in mossformer2:*) ;; *) fail "chunk $1 overlap $2: '$msg'" ;; esac
    "$BIN" sts --model "$TMP/m/mf2" --chunk-seconds "$1" --overlap-seconds "$2" --quiet -o "$TMP/x.wav" "$A" \
        2>"$TMP/cli_err" && fail "choir sts took chunk $1 overlap $2"
    grep -qF "choir sts: $msg" "$TMP/cli_err" || fail "CLI says '$(cat "$TMP/cli_err")', server '$msg'"
done
code=$(curl -s --max-time 300 -o "$TMP/server_o0.wav" -w '%{http_code}' -F file=@"$A" -F model=mf2 \
    -F chunk_seconds=1 -F overlap_seconds=0 "$U/v1/audio/enhancements")
[ "$code" = 200 ] || fail "overlap 0: $code"
"$BIN" sts --model "$TMP/m/mf2" --chunk-seconds 1 --overlap-seconds 0 --quiet -o "$TMP/cli_o0.wav" "$A" ||
    fail "choir sts overlap 0"
cmp "$TMP/server_o0.wav" "$TMP/cli_o0.wav" || fail "server overlap 0 differs from choir sts overlap 0"

kill -TERM "$SERVER"
wait "$SERVER" || fail "serve exit code $? after SIGTERM"
SERVER=
echo "sh_server_models: all checks passed"
