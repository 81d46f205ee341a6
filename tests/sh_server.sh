#!/usr/bin/env bash
# `choir serve` over HTTP with curl: every error status with OpenAI's error
# shape (400 401 404 405 409 413 415 429 503 + Retry-After), model
# registration, a malformed-input sweep that must never bring the server down,
# and a graceful SIGTERM that lets an in-flight stream finish.
# Fake models (models/fake/fake_model.h) stand in for real ones: the server is what
# is tested here. Only 127.0.0.1; every wait is bounded.
set -uo pipefail
BIN=${CHOIR_BIN:?}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/choir-server-XXXXXX")
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

# start_server NAME ARGS...: sets PORT; the server's log is $TMP/NAME.log
start_server() {
    local name=$1
    shift
    rm -f "$TMP/$name.port"
    "$BIN" serve --port 0 --port-file "$TMP/$name.port" "$@" >"$TMP/$name.log" 2>&1 &
    LAST_PID=$!
    PIDS+=("$LAST_PID")
    echo "$LAST_PID" >"$TMP/$name.pid"
    for _ in $(seq 100); do
        [ -s "$TMP/$name.port" ] && break
        sleep 0.1
    done
    [ -s "$TMP/$name.port" ] || fail "server $name did not start"
    PORT=$(cat "$TMP/$name.port")
}

# req EXPECTED_STATUS CURL_ARGS...: checks the status, and for errors the
# OpenAI error shape; the body is left in $TMP/body, headers in $TMP/headers.
req() {
    local want=$1
    shift
    local got
    got=$(curl -s --max-time 30 -o "$TMP/body" -D "$TMP/headers" -w '%{http_code}' "$@") || true
    [ "$got" = "$want" ] || fail "curl ${*:0:300}: status $got, expected $want: $(head -c 300 "$TMP/body")"
    if [ "$want" -ge 400 ]; then
        grep -q '"error":{"message":"[^"]' "$TMP/body" || fail "curl $*: not an OpenAI error: $(head -c 300 "$TMP/body")"
        grep -q '"type":"' "$TMP/body" || fail "curl $*: error without type"
    fi
    if [ "$want" = 429 ] || [ "$want" = 503 ]; then
        grep -qi '^Retry-After: [1-9]' "$TMP/headers" || fail "curl $*: $want without Retry-After"
    fi
}

fake_model "$TMP/models/fake" ', "fixed_ms": 5'
fake_model "$TMP/models/stt-only" ', "fixed_ms": 5'
fake_model "$TMP/extra/later" ', "fixed_ms": 5'
mkdir -p "$TMP/models/not-a-model"
start_server main --models "$TMP/models" --api-key sekret --admin-key adminsekret --max-upload 1
MAIN_PID=$LAST_PID
U=http://127.0.0.1:$PORT
K=(-H 'Authorization: Bearer sekret')
A=(-H 'Authorization: Bearer adminsekret')
J=(-H 'Content-Type: application/json')

# health needs no key; everything else does
req 200 "$U/health"
grep -qx '{"status":"ok"}' "$TMP/body" || fail "health body"
req 401 "$U/v1/models"
# the web page (src/server/ui_assets.c) is served without a key
req 200 "$U/"
grep -qi '^Content-Type: text/html' "$TMP/headers" || fail "/ is not HTML"
req 404 "$U/ui/no-such-file.js"
req 401 -H 'Authorization: Bearer sekre' "$U/v1/models"
req 401 -H 'Authorization: Bearer sekrets' "$U/v1/models"
req 401 -H 'Authorization: sekret' "$U/v1/models"
req 200 "${K[@]}" "$U/v1/models"
grep -q '"id":"fake"' "$TMP/body" || fail "model list lacks fake"
grep -q '"object":"list"' "$TMP/body" || fail "model list shape"
grep -q 'not-a-model' "$TMP/body" && fail "a directory without config.json was listed"
req 200 "${K[@]}" "$U/metrics"
grep -q '^choir_requests_submitted_total ' "$TMP/body" || fail "metrics lacks the engine's series"
grep -q '^# TYPE choir_http_responses_total counter' "$TMP/body" || fail "metrics lacks the server's series"
"$BIN" stats --url "$U" --api-key sekret | grep -Eq 'submitted +[0-9]+$' || fail "choir stats --api-key"
"$BIN" stats --url "$U" >/dev/null 2>&1 && fail "choir stats without the key succeeded"

# routes and methods
req 404 "${K[@]}" "$U/v1/nothing"
req 405 "${K[@]}" "$U/v1/audio/speech"
req 405 "${K[@]}" -X PUT "$U/v1/models"
req 404 "${K[@]}" "$U/v1/models/nope"
req 200 "${K[@]}" "$U/v1/models/fake"

# speech: a good request, then every kind of bad one
req 200 "${K[@]}" "${J[@]}" -d '{"model":"fake","input":"hello","response_format":"wav"}' "$U/v1/audio/speech"
[ "$(stat -c %s "$TMP/body")" = $((44 + 5 * 240 * 2)) ] || fail "wav size for 5 characters"
req 200 "${K[@]}" "${J[@]}" -d '{"model":"fake","input":"hello","response_format":"pcm","speed":0.25}' "$U/v1/audio/speech"
[ "$(stat -c %s "$TMP/body")" = $((5 * 240 * 2)) ] || fail "pcm size"
req 400 "${K[@]}" "${J[@]}" -d '{"model":"fake","input":"hello"' "$U/v1/audio/speech"
req 400 "${K[@]}" "${J[@]}" -d '[1,2]' "$U/v1/audio/speech"
req 400 "${K[@]}" "${J[@]}" -d '' "$U/v1/audio/speech"
req 400 "${K[@]}" "${J[@]}" -d '{"input":"hello"}' "$U/v1/audio/speech"
req 400 "${K[@]}" "${J[@]}" -d '{"model":"fake"}' "$U/v1/audio/speech"
req 400 "${K[@]}" "${J[@]}" -d '{"model":"fake","input":""}' "$U/v1/audio/speech"
req 400 "${K[@]}" "${J[@]}" -d '{"model":"fake","input":42}' "$U/v1/audio/speech"
req 400 "${K[@]}" "${J[@]}" -d '{"model":"fake","input":"hi","speed":4.5}' "$U/v1/audio/speech"
req 400 "${K[@]}" "${J[@]}" -d '{"model":"fake","input":"hi","speed":0.2}' "$U/v1/audio/speech"
req 400 "${K[@]}" "${J[@]}" -d '{"model":"fake","input":"hi","speed":"fast"}' "$U/v1/audio/speech"
req 400 "${K[@]}" "${J[@]}" -d '{"model":"fake","input":"hi","response_format":"m4a"}' "$U/v1/audio/speech"
req 400 "${K[@]}" "${J[@]}" -d '{"model":"fake","input":"hi","stream_format":"video"}' "$U/v1/audio/speech"
req 400 "${K[@]}" "${J[@]}" -d '{"model":"fake","input":"hi","voice":7}' "$U/v1/audio/speech"
long=$(head -c 4097 /dev/zero | tr '\0' 'a')
req 400 "${K[@]}" "${J[@]}" -d "{\"model\":\"fake\",\"input\":\"$long\"}" "$U/v1/audio/speech"
grep -q 'string_above_max_length' "$TMP/body" || fail "4097 characters: wrong code"
# 4096 characters of two bytes each pass the limit (characters, not bytes) and
# reach the model check (the fake model's audio for them would take too long)
ok=$(head -c 4096 /dev/zero | tr '\0' 'x' | sed 's/x/é/g')
req 404 "${K[@]}" "${J[@]}" -d "{\"model\":\"nope\",\"input\":\"$ok\"}" "$U/v1/audio/speech"
req 404 "${K[@]}" "${J[@]}" -d '{"model":"nope","input":"hi"}' "$U/v1/audio/speech"
grep -q '"code":"model_not_found"' "$TMP/body" || fail "404 code"

# transcription: good, then bad
"$BIN" --help >/dev/null 2>&1
head -c 32000 /dev/zero >"$TMP/silence.raw"
printf 'RIFF\x44\x7d\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00\x80\x3e\x00\x00\x00\x7d\x00\x00\x02\x00\x10\x00data\x00\x7d\x00\x00' >"$TMP/silence.wav"
cat "$TMP/silence.raw" >>"$TMP/silence.wav"
req 200 "${K[@]}" -F file=@"$TMP/silence.wav" -F model=fake "$U/v1/audio/transcriptions"
grep -q '^{"text":"16000 samples, checksum' "$TMP/body" || fail "transcription json: $(cat "$TMP/body")"
req 200 "${K[@]}" -F file=@"$TMP/silence.wav" -F model=fake -F response_format=srt "$U/v1/audio/transcriptions"
head -n 2 "$TMP/body" | tail -n 1 | grep -qx '00:00:00,000 --> 00:00:01,000' || fail "srt cue: $(cat "$TMP/body")"
req 200 "${K[@]}" -F file=@"$TMP/silence.wav" -F model=fake -F response_format=vtt "$U/v1/audio/transcriptions"
head -n 1 "$TMP/body" | grep -qx 'WEBVTT' || fail "vtt header"
req 200 "${K[@]}" -F file=@"$TMP/silence.wav" -F model=fake -F response_format=text "$U/v1/audio/translations"
grep -q '^16000 samples' "$TMP/body" || fail "translation text"
req 200 "${K[@]}" -F file=@"$TMP/silence.wav" -F model=fake -F stream=true "$U/v1/audio/transcriptions"
grep -q '^data: {"type":"transcript.text.done","text":' "$TMP/body" || fail "transcription SSE done"
# the done event carries the whole transcript once (the final output repeats
# what the streamed pieces said; it must not be appended to them)
grep -qx 'data: {"type":"transcript.text.done","text":"partial 1/4partial 2/4partial 3/416000 samples, checksum [0-9a-f]*"}' \
    "$TMP/body" || fail "transcription SSE done text: $(grep done "$TMP/body")"
req 400 "${K[@]}" -F model=fake "$U/v1/audio/transcriptions"
req 400 "${K[@]}" -F file=@"$TMP/silence.wav" "$U/v1/audio/transcriptions"
req 400 "${K[@]}" -F file=@"$TMP/silence.wav" -F model=fake -F response_format=docx "$U/v1/audio/transcriptions"
req 400 "${K[@]}" -F file=@"$TMP/silence.wav" -F model=fake -F temperature=2 "$U/v1/audio/transcriptions"
req 400 "${K[@]}" -F file=@"$TMP/silence.wav" -F model=fake -F temperature=warm "$U/v1/audio/transcriptions"
req 400 "${K[@]}" -F file=@"$TMP/silence.wav" -F model=fake -F stream=maybe "$U/v1/audio/transcriptions"
req 404 "${K[@]}" -F file=@"$TMP/silence.wav" -F model=nope "$U/v1/audio/transcriptions"
head -c 5000 /dev/urandom >"$TMP/noise.bin"
req 415 "${K[@]}" -F file=@"$TMP/noise.bin" -F model=fake "$U/v1/audio/transcriptions"
req 415 "${K[@]}" -F file=@"$TMP/silence.raw" -F model=fake "$U/v1/audio/transcriptions"
req 400 "${K[@]}" "${J[@]}" -d '{"file":"x","model":"fake"}' "$U/v1/audio/transcriptions"
req 400 "${K[@]}" -H 'Content-Type: multipart/form-data; boundary=zz' --data-binary $'--zz\r\nbroken' \
    "$U/v1/audio/transcriptions"
req 400 "${K[@]}" -H 'Content-Type: multipart/form-data' --data-binary 'x' "$U/v1/audio/transcriptions"

# enhancements (speech to speech): the fake model returns no audio, so the
# answer is an empty but valid WAV; bad chunking is refused
req 200 "${K[@]}" -F file=@"$TMP/silence.wav" -F model=fake -F chunk_seconds=4 -F overlap_seconds=1 \
    "$U/v1/audio/enhancements"
[ "$(head -c 4 "$TMP/body")" = RIFF ] || fail "enhancement is not a WAV"
req 400 "${K[@]}" -F file=@"$TMP/silence.wav" -F model=fake -F chunk_seconds=2 -F overlap_seconds=3 \
    "$U/v1/audio/enhancements"
req 400 "${K[@]}" -F file=@"$TMP/silence.wav" -F model=fake -F chunk_seconds=abc "$U/v1/audio/enhancements"
req 415 "${K[@]}" -F file=@"$TMP/noise.bin" -F model=fake "$U/v1/audio/enhancements"
req 404 "${K[@]}" -F file=@"$TMP/silence.wav" -F model=nope "$U/v1/audio/enhancements"

# 413: a declared length over --max-upload, and a chunked body that grows past it
head -c 1100000 /dev/zero >"$TMP/big.bin"
req 413 "${K[@]}" -F file=@"$TMP/big.bin" -F model=fake "$U/v1/audio/transcriptions"
req 413 "${K[@]}" -H 'Transfer-Encoding: chunked' -H 'Content-Type: application/octet-stream' \
    --data-binary @"$TMP/big.bin" "$U/v1/audio/transcriptions"

# models: register, duplicate, withdraw, re-register (with the admin key, for
# directories inside the --models folders: "later" appears there after start)
fake_model "$TMP/models/later" ', "fixed_ms": 5'
req 401 "${K[@]}" "${J[@]}" -d '{"path":"later"}' "$U/v1/models"
grep -qi '^WWW-Authenticate: Bearer' "$TMP/headers" || fail "401 without WWW-Authenticate"
req 415 "${A[@]}" -H 'Content-Type: text/plain' -d '{"path":"later"}' "$U/v1/models"
req 403 "${A[@]}" "${J[@]}" -d "{\"path\":\"$TMP/extra/later\"}" "$U/v1/models"
req 403 "${A[@]}" "${J[@]}" -d '{"path":"../extra/later"}' "$U/v1/models"
req 201 "${A[@]}" "${J[@]}" -d "{\"path\":\"$TMP/models/later\"}" "$U/v1/models"
grep -q '"id":"later"' "$TMP/body" || fail "POST /v1/models id"
req 409 "${A[@]}" "${J[@]}" -d '{"path":"later"}' "$U/v1/models"
req 400 "${A[@]}" "${J[@]}" -d '{"path":"not-a-model"}' "$U/v1/models"
req 400 "${A[@]}" "${J[@]}" -d '{"id":"x"}' "$U/v1/models"
req 400 "${A[@]}" "${J[@]}" -d '{"id":"a/b","path":"later"}' "$U/v1/models"
req 200 "${K[@]}" "${J[@]}" -d '{"model":"later","input":"hi","response_format":"pcm"}' "$U/v1/audio/speech"
# (the page is read whole first: grep -q quits early, and under pipefail curl's SIGPIPE would count)
loaded_later() { [ "$(curl -s "${K[@]}" "$U/metrics" | grep -x 'choir_model_loaded{model="later"} [01]')" = "choir_model_loaded{model=\"later\"} $1" ]; }
loaded_later 1 || fail "later not loaded after use"
req 401 "${K[@]}" -X DELETE "$U/v1/models/later"
req 200 "${A[@]}" -X DELETE "$U/v1/models/later"
grep -q '"deleted":true' "$TMP/body" || fail "DELETE body"
# DELETE unloads: the weights go once nothing of the model runs
for _ in $(seq 50); do
    loaded_later 0 && break
    sleep 0.1
done
loaded_later 0 || fail "DELETE did not unload the weights"
req 404 "${A[@]}" -X DELETE "$U/v1/models/later"
req 404 "${K[@]}" "${J[@]}" -d '{"model":"later","input":"hi"}' "$U/v1/audio/speech"
req 201 "${A[@]}" "${J[@]}" -d '{"path":"later"}' "$U/v1/models"

# malformed-input sweep: random and truncated bodies, odd headers; each must
# get a 4xx JSON error and the server must stay up
good=$'--b\r\nContent-Disposition: form-data; name="model"\r\n\r\nfake\r\n--b\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n\r\n'
for i in $(seq 0 7 ${#good}); do
    req 400 "${K[@]}" -H 'Content-Type: multipart/form-data; boundary=b' --data-binary "${good:0:$i}" \
        "$U/v1/audio/transcriptions"
done
for i in $(seq 20); do
    head -c $((i * 97)) /dev/urandom >"$TMP/rand.bin"
    code=$(curl -s --max-time 10 -o "$TMP/body" -w '%{http_code}' "${K[@]}" \
        -H 'Content-Type: multipart/form-data; boundary=b' --data-binary @"$TMP/rand.bin" "$U/v1/audio/transcriptions")
    [ "$code" = 400 ] || fail "random multipart body $i: $code"
    code=$(curl -s --max-time 10 -o "$TMP/body" -w '%{http_code}' "${K[@]}" "${J[@]}" \
        --data-binary @"$TMP/rand.bin" "$U/v1/audio/speech")
    [ "$code" = 400 ] || fail "random JSON body $i: $code"
done
hdr=$(head -c 3000 /dev/zero | tr '\0' 'h')
code=$(curl -s --max-time 10 -o /dev/null -w '%{http_code}' "${K[@]}" \
    -H "Content-Type: multipart/form-data; boundary=$hdr" --data-binary 'x' "$U/v1/audio/transcriptions")
[ "${code:0:1}" = 4 ] || fail "huge boundary: $code"
code=$(curl -s --max-time 10 -o /dev/null -w '%{http_code}' "${K[@]}" -H "X-Junk: $(head -c 100000 /dev/zero | tr '\0' 'j')" \
    "$U/v1/models")
[ "${code:0:1}" = 4 ] || fail "huge header: $code"
printf 'GARBAGE\r\n\r\n' | timeout 5 bash -c "cat >/dev/tcp/127.0.0.1/$PORT" 2>/dev/null
req 200 "$U/health"
kill -0 "$MAIN_PID" || fail "server died during the sweep"

# 429 and 503 from the engine: one slow model, queue of 1, one batch at a time
fake_model "$TMP/slow/slow" ', "fixed_ms": 2500, "pieces": 1'
start_server slow --models "$TMP/slow" --queue 1 --max-batch 1 --request-timeout 1
S=http://127.0.0.1:$PORT
CURLS=()
for i in 1 2 3 4; do
    curl -s --max-time 20 -o "$TMP/slow$i.body" -D "$TMP/slow$i.headers" -w '%{http_code}' "${J[@]}" \
        -d "{\"model\":\"slow\",\"input\":\"request $i\",\"response_format\":\"pcm\"}" "$S/v1/audio/speech" >"$TMP/slow$i.code" &
    CURLS+=($!)
    sleep 0.2
done
wait "${CURLS[@]}"
codes=$(for i in 1 2 3 4; do cat "$TMP/slow$i.code"; echo; done | sort | tr '\n' ' ')
echo "slow model statuses: $codes"
grep -q 429 <<<"$codes" || fail "no 429 from a full queue: $codes"
grep -q 503 <<<"$codes" || fail "no 503 from a passed deadline: $codes"
for i in 1 2 3 4; do
    c=$(cat "$TMP/slow$i.code")
    if [ "$c" = 429 ] || [ "$c" = 503 ]; then
        grep -qi '^Retry-After: [1-9]' "$TMP/slow$i.headers" || fail "$c without Retry-After"
        grep -q '"error":{"message"' "$TMP/slow$i.body" || fail "$c body"
    fi
done

# a client that hangs up mid-stream cancels its request; the server carries on
curl -sN --max-time 0.5 -o /dev/null "${J[@]}" \
    -d '{"model":"slow","input":"hang up","response_format":"pcm","stream_format":"audio"}' "$S/v1/audio/speech"
sleep 2
req 200 "$S/health"
"$BIN" stats --url "$S" >"$TMP/stats" || fail "choir stats against the server"
grep -Eq 'submitted +[0-9]+' "$TMP/stats" || fail "stats output: $(cat "$TMP/stats")"

# --preload: /health is 503 "loading" until every model is loaded
fake_model "$TMP/lazy/lazy" ', "load_ms": 1500'
start_server lazy --models "$TMP/lazy" --preload
L=http://127.0.0.1:$PORT
code=$(curl -s --max-time 5 -o "$TMP/body" -D "$TMP/headers" -w '%{http_code}' "$L/health")
[ "$code" = 503 ] || fail "health while loading: $code"
grep -qx '{"status":"loading"}' "$TMP/body" || fail "health while loading: $(cat "$TMP/body")"
grep -qi '^Retry-After: [1-9]' "$TMP/headers" || fail "loading without Retry-After"
for _ in $(seq 100); do
    [ "$(curl -s --max-time 2 -o /dev/null -w '%{http_code}' "$L/health")" = 200 ] && break
    sleep 0.1
done
req 200 "$L/health"
grep -q 'preloaded lazy' "$TMP/lazy.log" || fail "no preload log line"

# graceful SIGTERM: an in-flight stream finishes, new connections are refused,
# the process exits by itself
fake_model "$TMP/grace/grace" ', "fixed_ms": 1200, "pieces": 4'
start_server grace --models "$TMP/grace" --shutdown-deadline 5 --json
grep -q "^{\"url\":\"http://127.0.0.1:$PORT\",\"port\":$PORT,\"models\":1," "$TMP/grace.log" || fail "serve --json line"
G=http://127.0.0.1:$PORT
GPID=$LAST_PID
curl -sN --max-time 20 -o "$TMP/grace.body" -w '%{http_code}' "${J[@]}" \
    -d '{"model":"grace","input":"goodbye","response_format":"pcm","stream_format":"audio"}' \
    "$G/v1/audio/speech" >"$TMP/grace.code" &
CURL=$!
sleep 0.5
kill -TERM "$GPID"
wait "$CURL"
[ "$(cat "$TMP/grace.code")" = 200 ] || fail "in-flight stream status $(cat "$TMP/grace.code")"
[ "$(stat -c %s "$TMP/grace.body")" = $((7 * 240 * 2)) ] || fail "in-flight stream was cut short"
for _ in $(seq 50); do kill -0 "$GPID" 2>/dev/null || break; sleep 0.1; done
kill -0 "$GPID" 2>/dev/null && fail "server still running 5 s after SIGTERM"
wait "$GPID"
[ $? = 0 ] || fail "serve exit code after SIGTERM"
grep -q 'stopped cleanly' "$TMP/grace.log" || fail "no clean stop"
curl -s --max-time 2 "$G/health" >/dev/null && fail "still accepting after SIGTERM"

# readiness under memory pressure: a model whose weights fill most of the
# budget puts the engine past its high-water mark, so /health says 503
fake_model "$TMP/heavy/big" ', "fixed_ms": 5'
head -c 60000000 /dev/zero >"$TMP/heavy/big/model.safetensors"
start_server heavy --models "$TMP/heavy" --memory-budget 64M --preload
H=http://127.0.0.1:$PORT
for _ in $(seq 50); do
    code=$(curl -s --max-time 5 -o /dev/null -w '%{http_code}' "$H/health")
    [ "$code" = 503 ] && grep -q '"status":"loading"' <(curl -s "$H/health") || break
    sleep 0.1
done
req 503 "$H/health"
grep -q '"code":"degraded"' "$TMP/body" || fail "health under memory pressure: $(cat "$TMP/body")"
page=$(curl -s "$H/metrics") # whole first: grep -q under pipefail can fail curl with SIGPIPE
grep -qx 'choir_degraded 1' <<<"$page" || fail "metrics do not show the degraded engine"

# usage errors
"$BIN" serve >/dev/null 2>&1; [ $? = 2 ] || fail "serve without --models: exit code"
"$BIN" serve --models "$TMP/models" --port 70000 >/dev/null 2>&1; [ $? = 2 ] || fail "bad port: exit code"
"$BIN" serve --models "$TMP/nowhere" --port 0 >/dev/null 2>&1; [ $? = 1 ] || fail "missing models dir: exit code"
"$BIN" serve --help | grep -q -- '--api-key' || fail "serve --help"
# the other servers also stop cleanly (under ASan this checks leaks)
for name in main slow lazy heavy; do
    pid=$(cat "$TMP/$name.pid")
    kill -TERM "$pid"
    wait "$pid" || fail "server $name exited with $? after SIGTERM"
done
grep -l 'Sanitizer\|runtime error:' "$TMP"/*.log && fail "sanitizer reports in the server logs"
echo "sh_server: all checks passed"
