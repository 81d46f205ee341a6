#!/bin/bash
# Peak memory of `choir sts` on a long recording (issue #13: "a 1-hour input
# must not use more than a few hundred MB beyond the weights").
#
#   bench/sts_long_memory.sh [--minutes N] [--model DIR] [--bin CHOIR] [--threads T]
#                            [--chunk-seconds S] [--keep] [--poll]
#
# 1. Writes a 48 kHz mono 16-bit WAV of N minutes (default 60) with a small C
#    generator compiled here: a voiced 120-220 Hz harmonic signal with a
#    syllable-rate envelope in white noise (deterministic). 60 min = 346 MB.
# 2. Without --model, builds the model with `choir dev weights` from the
#    fixture manifest (deterministic random weights: the output is noise-like,
#    but the cost and memory are those of the real model).
# 3. Runs `choir sts --model DIR IN -o -` (output streamed to a byte counter,
#    nothing written to disk) under /usr/bin/time -v, or, where that is
#    missing (Debian package `time`, see scripts/setup.sh) or with --poll,
#    polling the process's VmHWM in /proc every 0.2 s.
# Prints the peak RSS, the weight bytes, choir's own summary (weights, counted
# peak beyond them, its max RSS), and checks the output length. For a 1-hour
# float buffer alone (what a whole-file decode would hold) that is 691 MB.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
minutes=60 model="" bin=${CHOIR_BIN:-} threads="" chunk="" keep=0 poll=0
while [ $# -gt 0 ]; do
    case "$1" in
    --minutes) minutes=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --chunk-seconds) chunk=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    --poll) poll=1; shift ;;
    -h | --help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "sts_long_memory: unknown argument $1" >&2; exit 2 ;;
    esac
done
case "$minutes" in '' | *[!0-9.]*) echo "sts_long_memory: --minutes needs a number" >&2; exit 2 ;; esac
if [ -z "$bin" ]; then
    for b in "$here/build/choir" "$here"/build-*/choir; do
        [ -x "$b" ] && { bin=$b; break; }
    done
fi
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
    echo "sts_long_memory: no choir binary (build it, or --bin PATH)" >&2; exit 1
fi
command -v cc >/dev/null || { echo "sts_long_memory: needs a C compiler (cc) for the signal generator" >&2; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/choir-sts-long-XXXXXX")
if [ $keep -eq 0 ]; then trap 'rm -rf "$tmp"' EXIT; else echo "keeping $tmp"; fi

# --- the recording --------------------------------------------------------
cat >"$tmp/gen.c" <<'EOF'
/* Writes `seconds` of 48 kHz mono 16-bit PCM WAV to stdout, one second at a time. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static void le(uint8_t *p, uint32_t v, int n) {
    for (int i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

int main(int argc, char **argv) {
    const int rate = 48000;
    const int64_t n = (int64_t)(atof(argv[1]) * rate + 0.5);
    if (argc != 2 || n <= 0 || 2 * n > 0xFFFFFFF0LL - 36) return 2;
    uint8_t h[44] = "RIFF....WAVEfmt ....\1\0\1\0........\2\0\20\0data....";
    le(h + 4, (uint32_t)(36 + 2 * n), 4);
    le(h + 16, 16, 4);
    le(h + 24, rate, 4);
    le(h + 28, 2 * rate, 4);
    le(h + 40, (uint32_t)(2 * n), 4);
    fwrite(h, 1, 44, stdout);
    static int16_t block[48000];
    uint64_t rng = 0x5eed;
    double phase = 0;
    for (int64_t at = 0; at < n; at += rate) {
        int64_t m = n - at < rate ? n - at : rate;
        for (int64_t i = 0; i < m; i++) {
            double t = (double)(at + i) / rate;
            double f0 = 170.0 + 50.0 * sin(2 * M_PI * 0.3 * t);
            double env = 0.5 + 0.5 * sin(2 * M_PI * 4.0 * t);
            phase += 2 * M_PI * f0 / rate;
            if (phase > 2 * M_PI) phase -= 2 * M_PI;
            double v = 0;
            for (int k = 1; k <= 8; k++) v += sin(k * phase) / k;
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            double noise = ((double)(rng >> 11) / 9007199254740992.0 - 0.5) * 0.1;
            block[i] = (int16_t)lrint(32767.0 * (0.15 * env * v + noise));
        }
        if (fwrite(block, 2, (size_t)m, stdout) != (size_t)m) return 1;
    }
    return fflush(stdout) != 0;
}
EOF
cc -O2 -o "$tmp/gen" "$tmp/gen.c" -lm
seconds=$(awk -v m="$minutes" 'BEGIN { printf "%d", m * 60 + 0.5 }')
in="$tmp/noisy_${minutes}min.wav"
"$tmp/gen" "$seconds" >"$in"
in_bytes=$(stat -c %s "$in")
frames=$(( (in_bytes - 44) / 2 ))
echo "input: $in ($seconds s, $frames frames, $(awk -v b="$in_bytes" 'BEGIN { printf "%.1f", b / 1e6 }') MB)"

# --- the model ------------------------------------------------------------
if [ -z "$model" ]; then
    shared=${CHOIR_SHARED_DIR:-$here/../shared}
    fix="$shared/fixtures/mossformer2/mossformer2-se-48k"
    [ -f "$fix/manifest.json" ] || { echo "sts_long_memory: no $fix/manifest.json (set CHOIR_SHARED_DIR or --model)" >&2; exit 1; }
    model="$tmp/model"
    "$bin" dev weights --manifest "$fix/manifest.json" --config "$fix/config.json" --out "$model" \
        >"$tmp/weights.log" 2>&1 || { cat "$tmp/weights.log" >&2; exit 1; }
    echo "model: $model (choir dev weights, random weights: the output is noise-like)"
else
    echo "model: $model"
fi
weight_bytes=$(find -L "$model" -maxdepth 1 \( -name '*.safetensors' -o -name '*.pt' -o -name '*.pth' \) \
    -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }')

# --- the run --------------------------------------------------------------
args=(sts --model "$model" "$in" -o -)
[ -n "$threads" ] && args+=(--threads "$threads")
[ -n "$chunk" ] && args+=(--chunk-seconds "$chunk")
log="$tmp/sts.log"
t0=$(date +%s.%N)
if [ -x /usr/bin/time ] && [ $poll -eq 0 ]; then
    how="/usr/bin/time -v"
    set +e
    /usr/bin/time -v -o "$tmp/time.txt" "$bin" "${args[@]}" 2>"$log" | wc -c >"$tmp/out_bytes"
    rc=${PIPESTATUS[0]}
    set -e
    peak_kb=$(awk -F: '/Maximum resident set size/ { gsub(/ /, "", $2); print $2 }' "$tmp/time.txt")
else
    how="VmHWM polled from /proc every 0.2 s"
    [ -x /usr/bin/time ] || how="$how (no /usr/bin/time: install the Debian package 'time')"
    set +e
    "$bin" "${args[@]}" 2>"$log" > >(wc -c >"$tmp/out_bytes") &
    pid=$!
    peak_kb=0
    while kill -0 "$pid" 2>/dev/null; do
        hwm=$(awk '/^VmHWM:/ { print $2 }' "/proc/$pid/status" 2>/dev/null)
        [ -n "$hwm" ] && [ "$hwm" -gt "$peak_kb" ] && peak_kb=$hwm
        sleep 0.2
    done
    wait "$pid"
    rc=$?
    set -e
    sleep 0.5 # the byte counter finishes after choir exits
fi
wall=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
if [ "$rc" -ne 0 ]; then
    echo "FAIL: choir sts exited $rc"; tr '\r' '\n' <"$log" | tail -n 5; exit 1
fi
out_bytes=$(cat "$tmp/out_bytes")
summary=$(tr '\r' '\n' <"$log" | grep -E '^(stdout|memory):' || true)

echo "run: choir ${args[*]}"
while IFS= read -r line; do echo "  choir: $line"; done <<<"$summary"
awk -v s="$seconds" -v w="$wall" -v p="$peak_kb" -v wb="$weight_bytes" -v how="$how" 'BEGIN {
    printf "audio %d s (%.1f min), wall %.1f s (RTF %.3f)\n", s, s / 60, w, w / s
    printf "peak RSS %.1f MB (%s)\n", p * 1024 / 1e6, how
    printf "weights on disk %.1f MB; peak RSS beyond them %.1f MB\n", wb / 1e6, p * 1024 / 1e6 - wb / 1e6
    printf "(a whole-file float decode of this input alone would be %.1f MB)\n", s * 48000 * 4 / 1e6
}'
want=$((44 + 2 * frames))
if [ "$out_bytes" -ne "$want" ]; then
    echo "FAIL: output has $out_bytes bytes, want $want (44-byte header + 16-bit samples)"; exit 1
fi
echo "output: $out_bytes bytes = header + $frames 16-bit samples (same length as the input)"
