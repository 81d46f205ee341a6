#!/usr/bin/env bash
# 32 parallel clients against `choir serve`: the engine batches them (batch
# sizes > 1 in /metrics) and every response is byte-identical to the one the
# same request got alone. Speech (wav) and transcription (json) both.
set -uo pipefail
BIN=${CHOIR_BIN:?}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/choir-conc-XXXXXX")
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
N=32
mkdir -p "$TMP/models/fake" "$TMP/seq" "$TMP/par"
echo '{"model_type": "choir-fake", "fixed_ms": 150, "pieces": 2}' >"$TMP/models/fake/config.json"
head -c 4096 /dev/zero >"$TMP/models/fake/model.safetensors"
"$BIN" serve --models "$TMP/models" --port 0 --port-file "$TMP/port" --max-batch 16 >"$TMP/server.log" 2>&1 &
SERVER=$!
for _ in $(seq 100); do [ -s "$TMP/port" ] && break; sleep 0.1; done
[ -s "$TMP/port" ] || fail "server did not start"
U=http://127.0.0.1:$(cat "$TMP/port")

# A distinct WAV per client (16 kHz s16 mono, i*800 samples of a ramp) for STT.
make_wav() { # FILE SAMPLES SEED
    python3 - "$@" <<'PY'
import struct, sys
path, n, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
data = b"".join(struct.pack("<h", ((i * 37 + seed * 101) % 2000) - 1000) for i in range(n))
hdr = b"RIFF" + struct.pack("<I", 36 + len(data)) + b"WAVEfmt " + struct.pack("<IHHIIHH", 16, 1, 1, 16000, 32000, 2, 16)
open(path, "wb").write(hdr + b"data" + struct.pack("<I", len(data)) + data)
PY
}
for i in $(seq $N); do make_wav "$TMP/in$i.wav" $((i * 800)) "$i"; done

client() { # DIR I
    local code
    code=$(curl -s --max-time 60 -o "$1/tts$2.wav" -w '%{http_code}' -H 'Content-Type: application/json' \
        -d "{\"model\":\"fake\",\"input\":\"client $2 says hello\",\"response_format\":\"wav\"}" "$U/v1/audio/speech")
    [ "$code" = 200 ] || echo "tts $2: $code $(head -c 300 "$1/tts$2.wav")" >>"$1/errors"
    code=$(curl -s --max-time 60 -o "$1/stt$2.json" -w '%{http_code}' -F file=@"$TMP/in$2.wav" -F model=fake \
        "$U/v1/audio/transcriptions")
    [ "$code" = 200 ] || echo "stt $2: $code $(head -c 300 "$1/stt$2.json")" >>"$1/errors"
}

metric() { # NAME (exact series, e.g. 'choir_batch_size_bucket{le="1"}')
    curl -s --max-time 10 "$U/metrics" | awk -v k="$1" '$1 == k { print $2 }'
}

for i in $(seq $N); do client "$TMP/seq" "$i"; done
[ -s "$TMP/seq/errors" ] && fail "sequential: $(cat "$TMP/seq/errors")"
b0=$(metric choir_batches_total)
s0=$(metric 'choir_batch_size_bucket{le="1"}')

start=$(date +%s.%N)
PIDS=()
for i in $(seq $N); do
    client "$TMP/par" "$i" &
    PIDS+=($!)
done
wait "${PIDS[@]}"
end=$(date +%s.%N)
[ -s "$TMP/par/errors" ] && fail "parallel: $(cat "$TMP/par/errors")"

for i in $(seq $N); do
    cmp -s "$TMP/seq/tts$i.wav" "$TMP/par/tts$i.wav" || fail "speech $i differs between sequential and parallel"
    cmp -s "$TMP/seq/stt$i.json" "$TMP/par/stt$i.json" || fail "transcript $i differs: $(cat "$TMP/par/stt$i.json")"
done
# each client got its own transcript (the fake's text is a checksum of the input)
[ "$(md5sum "$TMP"/par/stt*.json | awk '{print $1}' | sort -u | wc -l)" = $N ] || fail "transcripts are not distinct"

b1=$(metric choir_batches_total)
s1=$(metric 'choir_batch_size_bucket{le="1"}')
batches=$((b1 - b0))
singles=$((s1 - s0))
echo "parallel: $((2 * N)) requests in $batches batches ($singles of size 1), $(echo "$end - $start" | bc) s"
[ "$batches" -gt 0 ] || fail "no batches counted"
[ "$batches" -lt $((2 * N)) ] || fail "no batch held more than one request"
[ "$singles" -lt "$batches" ] || fail "every batch had size 1"
kill -TERM "$SERVER"
wait "$SERVER" || fail "serve exited with $? after SIGTERM"
SERVER=
grep -q 'Sanitizer\|runtime error:' "$TMP/server.log" && fail "sanitizer reports"
echo "sh_server_concurrency: all checks passed"
