#!/usr/bin/env bash
# `choir serve` as a drop-in for OpenAI's audio API (issue 19, "Drop-in use"):
# speech streams by default, OpenAI's model and voice names, the voice list,
# CORS. Fake models (models/fake/fake_model.h) stand in for real ones. Only
# 127.0.0.1; every wait is bounded.
set -uo pipefail
BIN=${CHOIR_BIN:?}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/choir-dropin-XXXXXX")
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do { kill -9 "$p" && wait "$p"; } 2>/dev/null; done
    rm -rf "$TMP"
}
trap cleanup EXIT
fail() {
    echo "FAIL: $*"
    for f in "$TMP"/*.log; do echo "--- $f"; tail -n 20 "$f"; done
    exit 1
}

fake_model() { # DIR JSON-EXTRA
    mkdir -p "$1"
    echo "{\"model_type\": \"choir-fake\"$2}" >"$1/config.json"
    head -c 4096 /dev/zero >"$1/model.safetensors"
}

# start_server NAME ARGS...: sets PORT and U
start_server() {
    local name=$1
    shift
    rm -f "$TMP/$name.port"
    "$BIN" serve --port 0 --port-file "$TMP/$name.port" "$@" >"$TMP/$name.log" 2>&1 &
    PIDS+=("$!")
    for _ in $(seq 100); do
        [ -s "$TMP/$name.port" ] && break
        sleep 0.1
    done
    [ -s "$TMP/$name.port" ] || fail "server $name did not start"
    PORT=$(cat "$TMP/$name.port")
    U=http://127.0.0.1:$PORT
}

# req EXPECTED_STATUS CURL_ARGS...: body in $TMP/body, headers in $TMP/headers
req() {
    local want=$1
    shift
    local got
    got=$(curl -s --max-time 30 -o "$TMP/body" -D "$TMP/headers" -w '%{http_code}' "$@") || true
    [ "$got" = "$want" ] || fail "curl ${*:0:300}: status $got, expected $want: $(head -c 300 "$TMP/body")"
}
header() { grep -i "^$1:" "$TMP/headers" | head -n 1 | cut -d: -f2- | tr -d '\r' | sed 's/^ *//'; }

J=(-H 'Content-Type: application/json')
# "fake" speaks (and transcribes); its voices/ folder holds two Kokoro names
# (the fake model ignores the voice: the server's mapping is what is tested).
# "zz-speaker" is a second model, after "fake" in sorted order, without voices.
fake_model "$TMP/models/fake" ', "fixed_ms": 5'
mkdir -p "$TMP/models/fake/voices"
: >"$TMP/models/fake/voices/af_heart.bin"
: >"$TMP/models/fake/voices/am_adam.pt"
: >"$TMP/models/fake/voices/am_adam.bin"
: >"$TMP/models/fake/voices/notes.txt"
fake_model "$TMP/models/zz-speaker" ', "fixed_ms": 5'
fake_model "$TMP/models/timed" ', "fixed_ms": 5, "segments": 1'
start_server main --models "$TMP/models" --alias tts-1-hd=zz-speaker --voice-alias narrator=am_adam
MAIN_U=$U

# 1. Speech streams by default (chunked), as OpenAI's endpoint does; a client
#    asks for one body with a length by "stream": false.
req 200 "${J[@]}" -d '{"model":"fake","input":"hello","response_format":"pcm"}' "$U/v1/audio/speech"
[ "$(header Transfer-Encoding)" = chunked ] || fail "default speech is not chunked: $(cat "$TMP/headers")"
[ -z "$(header Content-Length)" ] || fail "default speech has a Content-Length"
[ "$(stat -c %s "$TMP/body")" = $((5 * 240 * 2)) ] || fail "streamed pcm size"
req 200 "${J[@]}" -d '{"model":"fake","input":"hello","response_format":"wav","stream":false}' "$U/v1/audio/speech"
[ "$(header Content-Length)" = $((44 + 5 * 240 * 2)) ] || fail "stream:false has no exact Content-Length"
[ -z "$(header Transfer-Encoding)" ] || fail "stream:false is chunked"
req 200 "${J[@]}" -d '{"model":"fake","input":"hello","stream_format":"sse"}' "$U/v1/audio/speech"
grep -q '"type":"speech.audio.done"' "$TMP/body" || fail "sse stream"
req 400 "${J[@]}" -d '{"model":"fake","input":"hello","stream":"no"}' "$U/v1/audio/speech"
req 400 "${J[@]}" -d '{"model":"fake","input":"hello","stream":false,"stream_format":"sse"}' "$U/v1/audio/speech"

# 3. aac: an ADTS stream (test_encode decodes the encoder's output back)
req 200 "${J[@]}" -d '{"model":"fake","input":"hello","response_format":"aac"}' "$U/v1/audio/speech"
[ "$(header Content-Type)" = audio/aac ] || fail "aac content type: $(header Content-Type)"
python3 - "$TMP/body" <<'PY' || fail "aac: not an ADTS stream of 24-kHz mono AAC-LC frames"
import sys
b = open(sys.argv[1], "rb").read()
at = frames = 0
while at < len(b):
    h = b[at:at + 7]
    assert h[0] == 0xFF and h[1] & 0xF6 == 0xF0, ("sync", at)
    assert (h[2] >> 6) == 1 and (h[2] >> 2) & 15 == 6 and ((h[2] & 1) << 2 | h[3] >> 6) == 1, ("header", at)
    at += ((h[3] & 3) << 11) | (h[4] << 3) | (h[5] >> 5)
    frames += 1
assert at == len(b) and frames >= 2, (at, len(b), frames)
PY

# 2. OpenAI's names. Model names: the first model of the task, or --alias.
req 200 "${J[@]}" -d '{"model":"tts-1","input":"hi","voice":"alloy","stream":false}' "$U/v1/audio/speech"
req 200 "${J[@]}" -d '{"model":"gpt-4o-mini-tts","input":"hi","stream":false}' "$U/v1/audio/speech"
req 200 "${J[@]}" -d '{"model":"tts-1-hd","input":"hi","stream":false}' "$U/v1/audio/speech"
printf 'RIFF' >"$TMP/x.wav"
head -c 16044 /dev/zero >>"$TMP/x.wav" # not a WAV: only the routing to a model is tested below
req 200 "$U/v1/models/whisper-1"
grep -q '"id":"fake"' "$TMP/body" || fail "whisper-1 is not the first STT model (fake): $(cat "$TMP/body")"
req 200 "$U/v1/models/gpt-4o-transcribe"
grep -q '"id":"fake"' "$TMP/body" || fail "gpt-4o-transcribe: $(cat "$TMP/body")"
req 200 "$U/v1/models/tts-1"
grep -q '"id":"fake"' "$TMP/body" || fail "tts-1 is not the first TTS model (fake): $(cat "$TMP/body")"
req 200 "$U/v1/models/tts-1-hd"
grep -q '"id":"zz-speaker"' "$TMP/body" || fail "--alias tts-1-hd=zz-speaker: $(cat "$TMP/body")"
req 404 "$U/v1/models/tts-2"
req 200 "$U/v1/models"
python3 - "$TMP/body" <<'PY' || fail "model list: aliases and voices"
import json, sys
models = {m["id"]: m for m in json.load(open(sys.argv[1]))["data"]}
assert sorted(models["fake"]["aliases"]) == ["gpt-4o-mini-transcribe", "gpt-4o-mini-tts", "gpt-4o-transcribe",
                                            "tts-1", "whisper-1"], models["fake"]
assert models["zz-speaker"]["aliases"] == ["tts-1-hd"], models["zz-speaker"]
assert models["fake"]["voices"] == ["af_heart", "am_adam"], models["fake"]
assert models["zz-speaker"]["voices"] == [], models["zz-speaker"]
PY
# transcription through an OpenAI name reaches the STT model (a bad upload is
# the decoder's 415, not the router's 404)
code=$(curl -s -o "$TMP/body" -w '%{http_code}' -F model=whisper-1 -F file=@"$TMP/x.wav" "$U/v1/audio/transcriptions")
[ "$code" = 415 ] || fail "whisper-1 transcription: $code $(cat "$TMP/body")"
code=$(curl -s -o "$TMP/body" -w '%{http_code}' -F model=tts-2 -F file=@"$TMP/x.wav" "$U/v1/audio/transcriptions")
[ "$code" = 404 ] || fail "unknown model transcription: $code"

# Segments stream with the text (SSE deltas carry "segments"): one request
# gives text and timestamps. The fake model makes one segment per piece.
python3 - "$TMP/one.wav" <<'PY'
import struct, sys
n = 16000
open(sys.argv[1], "wb").write(b"RIFF" + struct.pack("<I", 36 + 2 * n) + b"WAVEfmt " +
    struct.pack("<IHHIIHH", 16, 1, 1, 16000, 32000, 2, 16) + b"data" + struct.pack("<I", 2 * n) + b"\0" * (2 * n))
PY
for fmt in verbose_json srt; do
    code=$(curl -s -o "$TMP/body" -w '%{http_code}' -F model=timed -F file=@"$TMP/one.wav" -F stream=true \
        -F response_format=$fmt "$U/v1/audio/transcriptions")
    [ "$code" = 200 ] || fail "streamed transcription: $code $(cat "$TMP/body")"
    python3 - "$TMP/body" <<'PY' || fail "segments over SSE ($fmt): $(cat "$TMP/body")"
import json, sys
events = [json.loads(e[6:]) for e in open(sys.argv[1]).read().split("\n\n") if e.startswith("data: ")]
deltas = [e for e in events if e["type"] == "transcript.text.delta"]
segs = [s for e in deltas for s in e.get("segments", [])]
assert len(deltas) >= 3, "not streamed in pieces"
assert sum(1 for e in deltas if e.get("segments")) >= 3, "segments did not come with the pieces"
assert [s["id"] for s in segs] == [0, 1, 2, 3], segs
assert all(abs(a["end"] - b["start"]) < 1e-9 for a, b in zip(segs, segs[1:])), segs
assert segs[0]["start"] == 0 and abs(segs[-1]["end"] - 1.0) < 1e-9, segs
assert events[-1]["type"] == "transcript.text.done" and "segments" not in events[-1]
PY
done
code=$(curl -s -o "$TMP/body" -w '%{http_code}' -F model=timed -F file=@"$TMP/one.wav" -F stream=true \
    "$U/v1/audio/transcriptions")
grep -q '"segments"' "$TMP/body" && fail "segments in a stream that asked for json"

# 4. chunking_strategy: VAD first (the real Silero model), then only the
#    speech goes to the STT model; segment times come back on the upload's clock.
JFK=${CHOIR_SHARED_DIR:?}/fixtures/real/speech/jfk.wav
stt() { # MODEL URL CURL-FORM-ARGS...: body in $TMP/body
    local model=$1 url=$2
    shift 2
    local code
    code=$(curl -s -o "$TMP/body" -w '%{http_code}' -F model="$model" "$@" "$url/v1/audio/transcriptions")
    echo "$code"
}
fake_samples() { sed -n 's/.*"text":"[^"]*\b\([0-9][0-9]*\) samples, checksum.*/\1/p' "$TMP/body"; }
# on a server without a VAD model: auto transcribes everything, server_vad is refused
[ "$(stt timed "$U" -F file=@"$JFK" -F chunking_strategy=auto)" = 200 ] || fail "auto without VAD"
[ "$(fake_samples)" = 176000 ] || fail "auto without VAD changed the audio: $(cat "$TMP/body")"
[ "$(stt timed "$U" -F file=@"$JFK" -F 'chunking_strategy={"type":"server_vad"}')" = 400 ] ||
    fail "server_vad without a VAD model"
grep -q '"code":"vad_unavailable"' "$TMP/body" || fail "server_vad without VAD: $(cat "$TMP/body")"
mkdir -p "$TMP/vadmodels"
"$BIN" convert --in "$CHOIR_SHARED_DIR/fixtures/real/vad/silero_vad_16k_op15.onnx" --out "$TMP/vadmodels/silero-vad" \
    >/dev/null 2>&1 || fail "convert Silero"
fake_model "$TMP/vadmodels/timed" ', "fixed_ms": 5, "segments": 1'
start_server vad --models "$TMP/vadmodels"
V=$U
[ "$(stt timed "$V" -F file=@"$JFK")" = 200 ] || fail "no chunking"
[ "$(fake_samples)" = 176000 ] || fail "without chunking_strategy the model hears all of it"
[ "$(stt timed "$V" -F file=@"$JFK" -F chunking_strategy=auto -F response_format=verbose_json)" = 200 ] ||
    fail "auto: $(cat "$TMP/body")"
auto=$(fake_samples)
[ -n "$auto" ] && [ "$auto" -lt 176000 ] && [ "$auto" -gt 100000 ] || fail "auto: the model heard $auto samples"
vad_json=$("$BIN" vad --model "$TMP/vadmodels/silero-vad" "$JFK")
python3 - "$TMP/body" "$vad_json" <<'PY' || fail "auto: segment times: $(cat "$TMP/body")"
import json, sys
v = json.load(open(sys.argv[1]))
speech = json.loads(sys.argv[2])
assert v["duration"] == 11.0, v["duration"]
segs = v["segments"]
assert len(segs) == 4
assert all(0 <= s["start"] <= s["end"] <= 11.0 for s in segs), segs
assert all(a["end"] <= b["start"] + 1e-9 for a, b in zip(segs, segs[1:])), segs
# the first piece starts one padding (300 ms) before the first speech
assert abs(segs[0]["start"] - (speech[0]["start"] - 0.3)) < 0.1, (segs[0], speech[0])
assert abs(segs[-1]["end"] - min(11.0, speech[-1]["end"] + 0.3)) < 0.1, (segs[-1], speech[-1])
PY
[ "$(stt timed "$V" -F file=@"$JFK" -F 'chunking_strategy={"type":"server_vad","prefix_padding_ms":0,"silence_duration_ms":100,"threshold":0.5}')" = 200 ] ||
    fail "server_vad: $(cat "$TMP/body")"
tight=$(fake_samples)
[ -n "$tight" ] && [ "$tight" -lt "$auto" ] || fail "no padding kept $tight samples, auto $auto"
[ "$(stt timed "$V" -F file=@"$JFK" -F chunking_strategy=auto -F stream=true -F response_format=srt)" = 200 ] ||
    fail "auto streamed"
grep -q '"type":"transcript.text.done"' "$TMP/body" || fail "auto streamed: no done event"
[ "$(stt timed "$V" -F file=@"$TMP/one.wav" -F chunking_strategy=auto -F response_format=verbose_json)" = 200 ] ||
    fail "silence"
python3 -c 'import json,sys; v=json.load(open(sys.argv[1])); assert v["text"] == "" and v["segments"] == [] and v["duration"] == 1.0, v' \
    "$TMP/body" || fail "silence is not an empty transcript: $(cat "$TMP/body")"
[ "$(stt timed "$V" -F file=@"$TMP/one.wav" -F chunking_strategy=auto -F stream=true)" = 200 ] || fail "silence streamed"
grep -q '"type":"transcript.text.done","text":""' "$TMP/body" || fail "silence streamed: $(cat "$TMP/body")"
for bad in sometimes '{"type":"client_vad"}' '{"type":"server_vad","threshold":2}' '{"type":"server_vad","prefix_padding_ms":-1}'; do
    [ "$(stt timed "$V" -F file=@"$JFK" -F "chunking_strategy=$bad")" = 400 ] || fail "chunking_strategy=$bad accepted"
    grep -q '"param":"chunking_strategy"' "$TMP/body" || fail "chunking_strategy=$bad: $(cat "$TMP/body")"
done
U=$MAIN_U

# Voices: the list, OpenAI's names mapped, an unknown voice names those there are.
req 200 "$U/v1/audio/voices"
python3 - "$TMP/body" <<'PY' || fail "voice list"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["object"] == "list"
own = [(v["id"], v["model"]) for v in d["data"] if "alias_of" not in v]
assert own == [("af_heart", "fake"), ("am_adam", "fake")], own
alias = {v["id"]: v["alias_of"] for v in d["data"] if "alias_of" in v}
for name in ["alloy", "echo", "fable", "onyx", "nova", "shimmer"]:
    assert name in alias, (name, alias)
assert alias["alloy"] == "af_heart" and alias["nova"] == "af_heart" and alias["shimmer"] == "af_heart", alias
assert alias["echo"] == "am_adam" and alias["onyx"] == "am_adam" and alias["fable"] == "am_adam", alias
PY
req 200 "$U/v1/audio/voices?model=tts-1"
grep -q '"model":"fake"' "$TMP/body" || fail "voices of tts-1"
req 404 "$U/v1/audio/voices?model=nope"
for v in af_heart am_adam alloy echo fable onyx nova shimmer narrator 'af_heart(2)+am_adam' 'af_heart,am_adam'; do
    req 200 "${J[@]}" -d "{\"model\":\"tts-1\",\"input\":\"hi\",\"voice\":\"$v\",\"stream\":false}" "$U/v1/audio/speech"
done
for v in nobody 'af_heart+nobody' notes '../fake/voices/af_heart'; do
    req 400 "${J[@]}" -d "{\"model\":\"tts-1\",\"input\":\"hi\",\"voice\":\"$v\"}" "$U/v1/audio/speech"
    grep -q 'this model.s voices are af_heart, am_adam' "$TMP/body" || fail "unknown voice $v: $(cat "$TMP/body")"
    grep -q '"param":"voice"' "$TMP/body" || fail "unknown voice param"
done
# a model without a voices/ folder is not second-guessed (its adapter decides)
req 200 "${J[@]}" -d '{"model":"zz-speaker","input":"hi","voice":"anything","stream":false}' "$U/v1/audio/speech"
"$BIN" serve --models "$TMP/models" --alias broken >/dev/null 2>&1
[ $? = 2 ] || fail "--alias without = is not a usage error"

# 5. CORS: only --cors origins; the preflight needs no key, the call does.
PRE=(-X OPTIONS -H 'Access-Control-Request-Method: POST' -H 'Access-Control-Request-Headers: authorization, content-type')
req 403 "${PRE[@]}" -H 'Origin: https://app.example' "$U/v1/audio/speech"
[ -z "$(header Access-Control-Allow-Origin)" ] || fail "CORS allowed without --cors"
req 200 -H 'Origin: https://app.example' "$U/v1/models"
[ -z "$(header Access-Control-Allow-Origin)" ] || fail "CORS header without --cors"
start_server cors --models "$TMP/models" --api-key sekret --cors https://app.example --cors 'http://localhost:3000'
req 204 "${PRE[@]}" -H 'Origin: https://app.example' "$U/v1/audio/speech"
[ "$(header Access-Control-Allow-Origin)" = https://app.example ] || fail "preflight origin: $(cat "$TMP/headers")"
header Access-Control-Allow-Methods | grep -q POST || fail "preflight methods"
header Access-Control-Allow-Headers | grep -qi authorization || fail "preflight headers"
[ "$(header Vary)" = Origin ] || fail "Vary: Origin"
req 204 "${PRE[@]}" -H 'Origin: http://localhost:3000' "$U/v1/models"
req 403 "${PRE[@]}" -H 'Origin: https://evil.example' "$U/v1/audio/speech"
[ -z "$(header Access-Control-Allow-Origin)" ] || fail "CORS for another origin"
req 401 -H 'Origin: https://app.example' "$U/v1/models"
[ "$(header Access-Control-Allow-Origin)" = https://app.example ] || fail "a 401 must reach the page too"
req 200 -H 'Origin: https://app.example' -H 'Authorization: Bearer sekret' "$U/v1/models"
[ "$(header Access-Control-Allow-Origin)" = https://app.example ] || fail "CORS on the answer"
header Access-Control-Expose-Headers | grep -q Retry-After || fail "Retry-After not exposed"
req 200 -H 'Origin: https://app.example' -H 'Authorization: Bearer sekret' "${J[@]}" \
    -d '{"model":"tts-1","input":"hi"}' "$U/v1/audio/speech"
[ "$(header Access-Control-Allow-Origin)" = https://app.example ] || fail "CORS on a streamed answer"
req 200 -H 'Origin: https://evil.example' -H 'Authorization: Bearer sekret' "$U/v1/models"
[ -z "$(header Access-Control-Allow-Origin)" ] || fail "CORS answer for another origin"
start_server any --models "$TMP/models" --cors '*'
req 204 "${PRE[@]}" -H 'Origin: https://whoever.example' "$U/v1/audio/speech"
[ "$(header Access-Control-Allow-Origin)" = '*' ] || fail "--cors '*'"

# stopped with SIGTERM, so that a sanitizer build reports leaks and errors in the logs
for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
PIDS=()
grep -l 'Sanitizer' "$TMP"/*.log && fail "sanitizer report in a server log"
echo "sh_server_dropin: ok"
