#!/usr/bin/env bash
# The CLI as a new user meets it (issue 19): `choir vad -` reads standard
# input; a missing argument is named; `choir serve` without --models finds
# the folder `choir info` and `choir vad` use; a port in use is said to be in
# use. Fast parts only (the real Silero VAD, fake models); the model-heavy
# parts (stt, sts, tts) are in sh_cli_dropin_models.sh.
set -uo pipefail
BIN=${CHOIR_BIN:?}
SH=${CHOIR_SHARED_DIR:?}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/choir-cli-XXXXXX")
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do { kill -9 "$p" && wait "$p"; } 2>/dev/null; done
    rm -rf "$TMP"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
WAV=$SH/fixtures/real/speech/jfk.wav
VAD=$SH/fixtures/real/vad/silero_vad_16k_op15.onnx

# - is standard input, and gives what the file gives
"$BIN" vad --model "$VAD" "$WAV" >"$TMP/file.json" || fail "vad FILE"
"$BIN" vad --model "$VAD" - <"$WAV" >"$TMP/stdin.json" || fail "vad -"
cmp "$TMP/file.json" "$TMP/stdin.json" || fail "vad - differs from vad FILE"
grep -q '"start"' "$TMP/stdin.json" || fail "vad - found no speech"
"$BIN" vad --model "$VAD" - </dev/null 2>"$TMP/err" && fail "vad - on empty input succeeded"
grep -q 'standard input is empty' "$TMP/err" || fail "empty stdin message: $(cat "$TMP/err")"

# a missing argument is named
expect_usage() { # WHAT-THE-MESSAGE-SAYS CMD...
    local want=$1
    shift
    "$BIN" "$@" </dev/null >/dev/null 2>"$TMP/err"
    local rc=$?
    [ $rc = 2 ] || fail "choir $*: exit $rc, expected 2"
    grep -q -- "$want" "$TMP/err" || fail "choir $*: message does not say '$want': $(head -n 2 "$TMP/err")"
}
expect_usage 'no audio file given' vad --model "$VAD"
expect_usage '--model DIR is required' stt "$WAV"
expect_usage 'no audio file given' stt --model "$TMP"
expect_usage '--model DIR is required' sts "$WAV"
expect_usage 'no input file given' sts --model "$TMP"
expect_usage 'needs -o OUT' sts --model "$TMP" -
expect_usage '--model DIR is required' tts --voice af_heart -o x.wav hi
expect_usage '--voice V is required' tts --model "$TMP" -o x.wav hi
expect_usage '-o OUT is required' tts --model "$TMP" --voice af_heart hi
expect_usage '--voice needs a value' tts --model "$TMP" --voice

# serve without --models: $CHOIR_MODELS, else ~/.cache/choir/models
mkdir -p "$TMP/home/.cache/choir/models/fake" "$TMP/env/other"
for d in "$TMP/home/.cache/choir/models/fake" "$TMP/env/other"; do
    echo '{"model_type": "choir-fake"}' >"$d/config.json"
    head -c 4096 /dev/zero >"$d/model.safetensors"
done
serve_models() { # ENV... -- prints the model ids of a server started without --models
    rm -f "$TMP/port"
    env "$@" "$BIN" serve --port 0 --port-file "$TMP/port" >"$TMP/serve.log" 2>&1 &
    local pid=$!
    PIDS+=("$pid")
    for _ in $(seq 100); do [ -s "$TMP/port" ] && break; sleep 0.1; done
    [ -s "$TMP/port" ] || fail "serve without --models did not start: $(cat "$TMP/serve.log")"
    curl -s "http://127.0.0.1:$(cat "$TMP/port")/v1/models" | python3 -c \
        'import json,sys; print(" ".join(m["id"] for m in json.load(sys.stdin)["data"]))'
    kill "$pid"
    wait "$pid" 2>/dev/null
}
[ "$(serve_models HOME="$TMP/home" CHOIR_MODELS=)" = fake ] || fail "serve did not find ~/.cache/choir/models"
[ "$(serve_models HOME="$TMP/home" CHOIR_MODELS="$TMP/env")" = other ] || fail "serve did not use \$CHOIR_MODELS"
HOME="$TMP/nowhere" CHOIR_MODELS= "$BIN" serve --port 0 >/dev/null 2>"$TMP/err"
[ $? = 2 ] || fail "serve without any models folder: exit code"
grep -q "no models folder at $TMP/nowhere/.cache/choir/models" "$TMP/err" || fail "no-folder message: $(cat "$TMP/err")"

# a port in use says so
"$BIN" serve --models "$TMP/env" --port 0 --port-file "$TMP/port1" >"$TMP/first.log" 2>&1 &
PIDS+=("$!")
for _ in $(seq 100); do [ -s "$TMP/port1" ] && break; sleep 0.1; done
[ -s "$TMP/port1" ] || fail "first server did not start"
"$BIN" serve --models "$TMP/env" --port "$(cat "$TMP/port1")" >/dev/null 2>"$TMP/err"
[ $? = 1 ] || fail "second server on a taken port: exit code"
grep -q 'already in use' "$TMP/err" || fail "port in use not explained: $(cat "$TMP/err")"
echo "sh_cli_dropin: ok"
