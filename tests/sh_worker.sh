#!/usr/bin/env bash
# `choir worker` / `submit` / `jobs` over a real Redis (started here on a free
# port of 127.0.0.1, stopped by the trap): 200 jobs (Silero VAD on short clips,
# a few Whisper fixture-model transcriptions) and one bad job, three workers
# (one running two jobs at once), one of which dies by SIGKILL with a job in hand. Checked: every job's result
# is in the output exactly once and equals what `choir vad` says, the dead
# worker's job was reclaimed by another, the bad job went to the dead-letter
# stream with its error, nothing is left pending. Also reports the throughput
# of 3 workers, and of one worker running 4 jobs at once, against 1.
set -euo pipefail

BIN=${CHOIR_BIN:?}
FIX=${CHOIR_SHARED_DIR:?}/fixtures
command -v redis-server >/dev/null || { echo "redis-server missing (scripts/setup.sh installs it)"; exit 1; }
T=$(mktemp -d "${TMPDIR:-/tmp}/choir-worker-XXXXXX")
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$T"
}
trap cleanup EXIT
fail() {
    echo "FAIL: $*" >&2
    for f in "$T"/w*.log; do [ -f "$f" ] && { echo "--- $f" >&2; tail -n 5 "$f" >&2; }; done
    exit 1
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

PORT=$(free_port)
redis-server --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$T" --logfile "$T/redis.log" &
PIDS+=($!)
R=redis://127.0.0.1:$PORT
for _ in $(seq 50); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
redis-cli -p "$PORT" ping | grep -q PONG || fail "redis did not start"

# Models: the real Silero VAD, and the whisper-ml80 fixture (random weights)
# with its tokenizer.
"$BIN" convert --in "$FIX/real/vad/silero_vad_16k_op15.onnx" --out "$T/vad" >/dev/null 2>&1 || fail "convert vad"
WF=$FIX/whisper/whisper-ml80
"$BIN" dev weights --manifest "$WF/manifest.json" --config "$WF/config.json" --out "$T/wh" >/dev/null 2>&1 \
    || fail "dev weights"
cp "$FIX/real/tokenizer/multilingual.tiktoken" "$T/wh/"
MODELS=(--model "vad=$T/vad" --model "wh=$T/wh")

# Inputs: 195 VAD clips and 5 STT clips (links to two short fixture clips).
mkdir -p "$T/in_vad" "$T/in_stt" "$T/in_bad" "$T/in_tp" "$T/out" "$T/out_tp1" "$T/out_tp3" "$T/out_tpc"
for i in $(seq -w 1 195); do
    if [ $((10#$i % 2)) -eq 0 ]; then src=hello16k.wav; else src=fox16k.wav; fi
    ln -s "$FIX/audio/$src" "$T/in_vad/v$i-$src"
done
for i in $(seq 1 5); do ln -s "$FIX/audio/fox16k.wav" "$T/in_stt/s$i.wav"; done
echo "not audio" >"$T/in_bad/bad.wav"
for i in $(seq -w 1 60); do ln -s "$FIX/audio/hello16k.wav" "$T/in_tp/t$i.wav"; done

# Reference segments from `choir vad` for both clips.
for c in hello16k fox16k; do "$BIN" vad --model "$T/vad" "$FIX/audio/$c.wav" >"$T/ref_$c.json" || fail "choir vad $c"; done

# --- Throughput: 60 VAD jobs drained by 1 worker, then by 3 workers. ---
drain_time() { # STREAM OUTDIR NWORKERS [WORKER OPTIONS]
    "$BIN" submit --redis "$R" --stream "$1" --task vad --out "$2" "$T/in_tp" >/dev/null || fail "submit $1"
    local t0 t1 wp=()
    t0=$(date +%s.%N)
    for k in $(seq "$3"); do
        "$BIN" worker --redis "$R" --stream "$1" --consumer "tp$k" "${MODELS[@]}" "${@:4}" 2>"$T/w_$1_$k.log" &
        wp+=($!)
        PIDS+=($!)
    done
    "$BIN" jobs --redis "$R" --stream "$1" --wait --timeout 120 >/dev/null || fail "$1 did not drain"
    t1=$(date +%s.%N)
    kill -TERM "${wp[@]}"
    for p in "${wp[@]}"; do wait "$p" || fail "worker $p of $1 exited with an error"; done
    python3 -c "print('%.2f' % ($t1 - $t0))"
}
T1=$(drain_time tp1 "$T/out_tp1" 1)
T3=$(drain_time tp3 "$T/out_tp3" 3)
TC=$(drain_time tpc "$T/out_tpc" 1 --concurrency 4)
python3 -c "t1,t3,tc=$T1,$T3,$TC; print('throughput (60 VAD jobs, incl. worker start): 1 worker %.1f jobs/s, 3 workers %.1f jobs/s (x%.2f), 1 worker --concurrency 4 %.1f jobs/s (x%.2f)' % (60/t1, 60/t3, t1/t3, 60/tc, t1/tc))"
for d in out_tp1 out_tp3 out_tpc; do
    [ "$(ls "$T/$d" | wc -l)" -eq 60 ] || fail "throughput run $d: not 60 outputs"
done
grep -q "4 at once" "$T/w_tpc_1.log" || fail "--concurrency not applied"

# --- The 200-job run with a worker that dies mid-job. ---
S=main
W=(--redis "$R" --stream "$S" --claim-after 2 --max-attempts 3 "${MODELS[@]}")
"$BIN" worker "${W[@]}" --consumer w1 --crash-after 15 2>"$T/w1.log" &
PIDS+=($!)
W1=$!
"$BIN" worker "${W[@]}" --consumer w2 2>"$T/w2.log" &
PIDS+=($!)
W2=$!
"$BIN" worker "${W[@]}" --consumer w3 --concurrency 2 2>"$T/w3.log" &
PIDS+=($!)
W3=$!
n1=$("$BIN" submit --redis "$R" --stream "$S" --task vad --model vad --out "$T/out" "$T/in_vad") || fail "submit vad"
n2=$("$BIN" submit --redis "$R" --stream "$S" --task stt --model wh --out "$T/out" \
    --options '{"language": "en", "max_tokens": 8, "temperature": 0}' "$T/in_stt") || fail "submit stt"
n3=$("$BIN" submit --redis "$R" --stream "$S" --task vad --model vad --out "$T/out" "$T/in_bad") || fail "submit bad"
[ "$n1" = 195 ] && [ "$n2" = 5 ] && [ "$n3" = 1 ] || fail "submit counts $n1 $n2 $n3"
"$BIN" submit --redis "$R" --stream "$S" --task nope --out "$T/out" "$T/in_bad" >/dev/null 2>&1 && fail "bad task accepted"

"$BIN" jobs --redis "$R" --stream "$S" --wait --timeout 150 >/dev/null || fail "jobs did not drain"
wait "$W1" 2>/dev/null && fail "worker w1 should have been killed"
kill -TERM "$W2" "$W3"
wait "$W2" || fail "w2 exit status"
wait "$W3" || fail "w3 exit status"

"$BIN" jobs --redis "$R" --stream "$S" --json >"$T/progress.json"
"$BIN" jobs --redis "$R" --stream "$S" --dead 10 >"$T/dead.txt"
python3 - "$T" <<'EOF' || fail "results"
import json, os, re, sys
t = sys.argv[1]
p = json.load(open(f"{t}/progress.json"))
assert p == {"submitted": 201, "done": 200, "dead": 1, "pending": 0, "queued": 0, "consumers": 4}, p  # w1, w2, w3.0, w3.1

# The output holds each job exactly once, and nothing half-written.
names = sorted(os.listdir(f"{t}/out"))
assert len(names) == 200 and all(n.endswith(".json") for n in names), (len(names), names[:5])
ref = {c: json.load(open(f"{t}/ref_{c}.json")) for c in ("hello16k", "fox16k")}
texts = set()
for n in names:
    r = json.load(open(f"{t}/out/{n}"))
    assert os.path.basename(r["input"]).rsplit(".", 1)[0] == n[:-5], (n, r["input"])
    if r["task"] == "vad":
        want = ref[n.split("-")[1][:-5]]
        assert len(r["segments"]) == len(want) and len(want) > 0, (n, r, want)
        for a, b in zip(r["segments"], want):
            assert abs(a["start"] - b["start"]) < 1e-3 and abs(a["end"] - b["end"]) < 1e-3, (n, a, b)
    else:
        # the transcript as the server's verbose_json (choir/transcript.h)
        assert r["task"] == "transcribe" and r["text"].strip() and r["language"] == "english", r
        assert all(s["end"] <= r["duration"] and "tokens" in s and "seek" in s for s in r["segments"]), r
        texts.add(r["text"])
assert len(texts) == 1, texts  # same clip, greedy: same words from every worker

# Each job acknowledged once; the job w1 died holding was reclaimed by another worker.
logs = {w: open(f"{t}/{w}.log").read() for w in ("w1", "w2", "w3")}
done = [m for w in logs.values() for m in re.findall(r"job (\S+) done", w)]
assert len(done) == 200 and len(set(done)) == 200, (len(done), len(set(done)))
m = re.search(r"dying with job (\S+) in hand", logs["w1"])
assert m, "w1 did not crash"
lost = m.group(1)
assert any(f"reclaimed job {lost} " in logs[w] for w in ("w2", "w3")), "the dead worker's job was not reclaimed"
assert lost in done, "the dead worker's job never completed"

dead = open(f"{t}/dead.txt").read()
assert "bad.wav" in dead and "not a supported audio format" in dead and "(3 attempts)" in dead, dead
print("200 jobs exactly once; dead worker's job %s reclaimed; 1 dead letter" % lost)
EOF

# Usage errors exit 2; an unreachable Redis fails with 1 and a message.
"$BIN" worker --stream x >/dev/null 2>&1 && fail "worker without --model accepted"
set +e
"$BIN" jobs --redis "redis://127.0.0.1:1" --stream x >/dev/null 2>"$T/err.txt"
rc=$?
set -e
[ $rc -eq 1 ] && grep -q "127.0.0.1:1" "$T/err.txt" || fail "unreachable redis: rc $rc, $(cat "$T/err.txt")"
echo "sh_worker: ok"
