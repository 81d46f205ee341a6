#!/usr/bin/env bash
# Word timestamps over the HTTP API (issue 19): timestamp_granularities[]
# on /v1/audio/transcriptions as OpenAI's API takes it. verbose_json with
# word gets a top-level "words" [{word, start, end}] (and no "segments" when
# word is the only granularity; both with word and segment); word with any
# other format, or an unknown granularity, is a 400. The fake model (its
# segments " piece N", two words each) makes the bytes exact. Only
# 127.0.0.1; every wait is bounded.
set -uo pipefail
BIN=${CHOIR_BIN:?}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/choir-words-XXXXXX")
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
mkdir -p "$TMP/models/timed"
echo '{"model_type": "choir-fake", "fixed_ms": 5, "pieces": 3, "segments": 1}' >"$TMP/models/timed/config.json"
head -c 4096 /dev/zero >"$TMP/models/timed/model.safetensors"
python3 - "$TMP/one.wav" <<'PY'
import struct, sys
n = 16000
open(sys.argv[1], "wb").write(b"RIFF" + struct.pack("<I", 36 + 2 * n) + b"WAVEfmt " +
    struct.pack("<IHHIIHH", 16, 1, 1, 16000, 32000, 2, 16) + b"data" + struct.pack("<I", 2 * n) + b"\0" * (2 * n))
PY
"$BIN" serve --models "$TMP/models" --port 0 --port-file "$TMP/port" >"$TMP/server.log" 2>&1 &
SERVER=$!
for _ in $(seq 100); do [ -s "$TMP/port" ] && break; sleep 0.1; done
[ -s "$TMP/port" ] || fail "server did not start"
U=http://127.0.0.1:$(cat "$TMP/port")/v1/audio/transcriptions
stt() { # EXPECTED-STATUS CURL-FORM-ARGS...: body in $TMP/body
    local want=$1 code
    shift
    code=$(curl -s --max-time 30 -o "$TMP/body" -w '%{http_code}' -F model=timed -F file=@"$TMP/one.wav" "$@" "$U")
    [ "$code" = "$want" ] || fail "${*}: status $code, expected $want: $(head -c 300 "$TMP/body")"
}
WORDS='"words":[{"word":"piece","start":0,"end":0.167},{"word":"1","start":0.167,"end":0.333},'
WORDS+='{"word":"piece","start":0.333,"end":0.5},{"word":"2","start":0.5,"end":0.667},'
WORDS+='{"word":"piece","start":0.667,"end":0.833},{"word":"3","start":0.833,"end":1}]}'

# word alone: task, language, duration, text, words; no segments
stt 200 -F response_format=verbose_json -F 'timestamp_granularities[]=word'
body=$(cat "$TMP/body")
case $body in
'{"task":"transcribe","language":"unknown","duration":1,"text":"16000 samples, checksum '*'",'"$WORDS") ;;
*) fail "word granularity: $body" ;;
esac
grep -q '"segments"' "$TMP/body" && fail "segments with word granularity alone: $body"

# word and segment: both, words after segments
stt 200 -F response_format=verbose_json -F 'timestamp_granularities[]=word' -F 'timestamp_granularities[]=segment'
body=$(cat "$TMP/body")
case $body in
*',"segments":[{"id":0,"seek":0,"start":0,"end":0.333,"text":" piece 1",'*'}],'"$WORDS") ;;
*) fail "word and segment granularities: $body" ;;
esac

# segment alone, or none: segments, no words
for g in segment ""; do
    if [ -n "$g" ]; then stt 200 -F response_format=verbose_json -F "timestamp_granularities[]=$g"
    else stt 200 -F response_format=verbose_json; fi
    grep -q '"segments":\[{"id":0' "$TMP/body" || fail "segments missing ($g): $(cat "$TMP/body")"
    grep -q '"words"' "$TMP/body" && fail "words without word granularity ($g): $(cat "$TMP/body")"
done

# word needs verbose_json; unknown values are refused
for f in json text srt vtt; do
    stt 400 -F response_format=$f -F 'timestamp_granularities[]=word'
    grep -q '"param":"timestamp_granularities"' "$TMP/body" || fail "400 without its param ($f): $(cat "$TMP/body")"
done
stt 400 -F response_format=verbose_json -F 'timestamp_granularities[]=letter'
grep -q 'word and segment' "$TMP/body" || fail "unknown granularity message: $(cat "$TMP/body")"
# segment granularity with json is fine (OpenAI accepts it)
stt 200 -F response_format=json -F 'timestamp_granularities[]=segment'
echo "server words: ok"
