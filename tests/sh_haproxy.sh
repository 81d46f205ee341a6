#!/usr/bin/env bash
# deploy/haproxy.cfg in front of three `choir serve` replicas, all started here
# on free ports of 127.0.0.1 and stopped by the trap. Under a concurrent load
# (speech, streamed speech, transcriptions; the fake model takes 600 ms per
# request) one replica is stopped with SIGTERM and another killed with
# SIGKILL. Checked: streamed audio passes through HAProxy unbuffered; the load
# is spread over all replicas; every request ends (none hangs) with a complete,
# correct response or a retryable error (429/502/503/504, or a stream cut by
# the killed replica, which the client sees as an error, never as a short
# success); requests after the stop go to the survivor and succeed; with no
# replica left HAProxy answers 503 with Retry-After at once.
set -uo pipefail

BIN=${CHOIR_BIN:?}
SRC=${CHOIR_SOURCE_DIR:?}
command -v haproxy >/dev/null || { echo "haproxy missing (scripts/setup.sh installs it)"; exit 1; }
T=$(mktemp -d "${TMPDIR:-/tmp}/choir-haproxy-XXXXXX")
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
    wait 2>/dev/null
    [ -n "${CHOIR_KEEP_TMP:-}" ] || rm -rf "$T"
}
trap cleanup EXIT
fail() {
    echo "FAIL: $*" >&2
    tail -n 15 "$T/haproxy.log" >&2 2>/dev/null
    exit 1
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# HAProxy's stats over its admin socket: "name status sessions_total" per server.
lb_servers() {
    python3 - "$T/haproxy.sock" <<'EOF'
import socket, sys
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.sendall(b"show stat\n")
data = b""
while True:
    b = s.recv(65536)
    if not b: break
    data += b
lines = data.decode().splitlines()
hdr = lines[0].lstrip("# ").split(",")
for l in lines[1:]:
    f = dict(zip(hdr, l.split(",")))
    if f.get("pxname") == "choir_replicas" and f.get("svname", "").startswith("replica"):
        print(f["svname"], f["status"], f["stot"])
EOF
}

mkdir -p "$T/models/fake" "$T/out"
echo '{"model_type": "choir-fake", "fixed_ms": 600, "pieces": 4}' >"$T/models/fake/config.json"
head -c 4096 /dev/zero >"$T/models/fake/model.safetensors"
python3 - "$T/in.wav" <<'EOF'
import struct, sys
data = b"".join(struct.pack("<h", (i * 37) % 2000 - 1000) for i in range(8000))
hdr = b"RIFF" + struct.pack("<I", 36 + len(data)) + b"WAVEfmt " + struct.pack("<IHHIIHH", 16, 1, 1, 16000, 32000, 2, 16)
open(sys.argv[1], "wb").write(hdr + b"data" + struct.pack("<I", len(data)) + data)
EOF

REPLICA=()
for k in 1 2 3; do
    "$BIN" serve --models "$T/models" --port 0 --port-file "$T/port$k" --shutdown-deadline 10 \
        >"$T/replica$k.log" 2>&1 &
    REPLICA[$k]=$!
    PIDS+=($!)
done
for k in 1 2 3; do
    for _ in $(seq 100); do [ -s "$T/port$k" ] && break; sleep 0.1; done
    [ -s "$T/port$k" ] || fail "replica $k did not start"
done

LB_PORT=$(free_port)
# The shipped file as it is, plus an admin socket for the test to read states.
printf 'global\n    stats socket "%s/haproxy.sock" mode 600 level admin\n' "$T" >"$T/test-extra.cfg"
CHOIR_LB_BIND="127.0.0.1:$LB_PORT" CHOIR_REPLICA_1="127.0.0.1:$(cat "$T/port1")" \
    CHOIR_REPLICA_2="127.0.0.1:$(cat "$T/port2")" CHOIR_REPLICA_3="127.0.0.1:$(cat "$T/port3")" \
    haproxy -db -f "$SRC/deploy/haproxy.cfg" -f "$T/test-extra.cfg" >"$T/haproxy.log" 2>&1 &
PIDS+=($!)
LB=http://127.0.0.1:$LB_PORT
for _ in $(seq 100); do
    [ -S "$T/haproxy.sock" ] && [ "$(lb_servers 2>/dev/null | grep -c ' UP ')" = 3 ] && break
    sleep 0.1
done
[ "$(lb_servers | grep -c ' UP ')" = 3 ] || fail "replicas not UP behind haproxy: $(lb_servers)"

SPEECH='{"model":"fake","input":"one two three","response_format":"wav"}'
STREAM='{"model":"fake","input":"one two three","response_format":"pcm","stream_format":"audio"}'
# References straight from a replica (the fake model is deterministic).
P1=http://127.0.0.1:$(cat "$T/port1")
curl -sf -o "$T/ref_speech" -H 'Content-Type: application/json' -d "$SPEECH" "$P1/v1/audio/speech" || fail "ref speech"
curl -sf -o "$T/ref_stream" -H 'Content-Type: application/json' -d "$STREAM" "$P1/v1/audio/speech" || fail "ref stream"
curl -sf -o "$T/ref_stt" -F file=@"$T/in.wav" -F model=fake "$P1/v1/audio/transcriptions" || fail "ref stt"

# Streaming passes through unbuffered: the first bytes arrive long before the end.
read -r ttfb total < <(curl -s -o "$T/s.pcm" -w '%{time_starttransfer} %{time_total}\n' \
    -H 'Content-Type: application/json' -d "$STREAM" "$LB/v1/audio/speech")
cmp -s "$T/s.pcm" "$T/ref_stream" || fail "streamed body through haproxy differs"
python3 -c "import sys; f,t=$ttfb,$total; sys.exit(0 if f < 0.6*t else 1)" \
    || fail "stream buffered by the proxy: first byte at $ttfb s of $total s"

# The load: 18 clients, each a loop of requests until told to stop.
client() { # ID KIND
    local i=0 t0 out rc w
    while [ ! -e "$T/stop" ]; do
        i=$((i + 1))
        out="$T/out/c$1_$i"
        t0=$(date +%s.%N)
        case $2 in
        speech) w=$(curl -s --max-time 15 -o "$out" -w '%{http_code}' -H 'Content-Type: application/json' \
            -d "$SPEECH" "$LB/v1/audio/speech"); rc=$? ;;
        stream) w=$(curl -s --max-time 15 -o "$out" -w '%{http_code}' -H 'Content-Type: application/json' \
            -d "$STREAM" "$LB/v1/audio/speech"); rc=$? ;;
        stt) w=$(curl -s --max-time 15 -o "$out" -w '%{http_code}' -F file=@"$T/in.wav" -F model=fake \
            "$LB/v1/audio/transcriptions"); rc=$? ;;
        esac
        echo "$t0 $(date +%s.%N) $2 $w $rc $out" >>"$T/requests.log"
    done
}
requests_done() { [ -f "$T/requests.log" ] && wc -l <"$T/requests.log" || echo 0; }
CLIENTS=()
for c in $(seq 18); do
    case $((c % 3)) in 0) kind=speech ;; 1) kind=stream ;; 2) kind=stt ;; esac
    client "$c" "$kind" &
    CLIENTS+=($!)
done
# Stop replica 1 once the load runs on all three (36 requests done), kill
# replica 2 1.5 s later, and keep the load on the survivor for 36 more.
for _ in $(seq 600); do [ "$(requests_done)" -ge 36 ] && break; sleep 0.1; done
lb_servers >"$T/servers_before.txt"
TERM_AT=$(date +%s.%N)
kill -TERM "${REPLICA[1]}"
sleep 1.5
KILL_AT=$(date +%s.%N)
kill -9 "${REPLICA[2]}"
n_kill=$(requests_done)
for _ in $(seq 600); do [ "$(requests_done)" -ge $((n_kill + 54)) ] && break; sleep 0.1; done
touch "$T/stop"
for p in "${CLIENTS[@]}"; do wait "$p"; done
wait "${REPLICA[1]}" || fail "replica 1 did not drain cleanly on SIGTERM"
lb_servers >"$T/servers.txt"

python3 - "$T" "$TERM_AT" "$KILL_AT" <<'EOF' || fail "load results"
import sys
t, term_at, kill_at = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
refs = {k: open(f"{t}/ref_{k}", "rb").read() for k in ("speech", "stream", "stt")}
reqs = [l.split() for l in open(f"{t}/requests.log")]
assert len(reqs) >= 90, len(reqs)
ok = retryable = 0
for t0, t1, kind, code, rc, out in reqs:
    t0, t1, rc = float(t0), float(t1), int(rc)
    assert rc != 28, f"a request hung (curl timeout): {kind} from {t0}"
    assert t1 - t0 < 10, f"{kind} took {t1 - t0:.1f} s"
    if code == "200" and rc == 0:
        body = open(out, "rb").read()
        assert body == refs[kind], f"{kind} answered 200 with a wrong or short body ({len(body)} bytes)"
        ok += 1
        continue
    # Not a success: must be a retryable status, or a stream the killed
    # replica cut (the client sees a transport error, rc 18/52/56), and only
    # for requests in flight while a replica went away.
    in_flight = t0 <= kill_at + 1.0 and t1 >= term_at
    assert in_flight, f"{kind} failed ({code}, curl {rc}) outside the stop window"
    assert code in ("429", "502", "503", "504") or rc in (18, 52, 56), (kind, code, rc)
    retryable += 1
late = [r for r in reqs if float(r[0]) > kill_at + 1.0]
assert len(late) >= 10 and all(r[3] == "200" and r[4] == "0" for r in late), "requests after the stop failed"
servers = {l.split()[0]: l.split()[1:] for l in open(f"{t}/servers.txt")}
before = {l.split()[0]: int(l.split()[2]) for l in open(f"{t}/servers_before.txt")}
assert all(v >= 5 for v in before.values()), f"leastconn did not spread the load: {before}"
assert servers["replica1"][0].startswith("DOWN") and servers["replica2"][0].startswith("DOWN"), servers
assert servers["replica3"][0] == "UP", servers
print(f"{len(reqs)} requests: {ok} complete, {retryable} retryable errors, {len(late)} after the stop all on the survivor; "
      f"sessions per replica before the stop {[before[k] for k in sorted(before)]}")
EOF
[ $? -eq 0 ] || exit 1

# No replica left: an immediate 503 with Retry-After from HAProxy itself.
kill -TERM "${REPLICA[3]}"
wait "${REPLICA[3]}"
for _ in $(seq 30); do [ "$(lb_servers | grep -c ' UP ')" = 0 ] && break; sleep 0.1; done
hdr=$(curl -s --max-time 5 -D - -o /dev/null -H 'Content-Type: application/json' -d "$SPEECH" "$LB/v1/audio/speech")
echo "$hdr" | head -n 1 | grep -q ' 503' || fail "no replica: expected 503, got: $(echo "$hdr" | head -n 1)"
echo "$hdr" | grep -qi '^Retry-After: 1' || fail "no Retry-After on haproxy's 503"
echo "sh_haproxy: ok"
