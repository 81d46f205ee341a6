#!/usr/bin/env bash
# Side by side with whisper.cpp on this CPU, same weights, same threads.
#
#   bench/peers/whisper_cpp.sh WHISPER_CPP_SRC [--work DIR] [--sizes "tiny base small"]
#                              [--runs 3] [--threads 2] [--audio WAV] [--dtypes "f16 bf16"]
#
# WHISPER_CPP_SRC is a whisper.cpp source tree (never inside this repo). It is
# built with CMake and its native kernels (-DGGML_NATIVE=ON) into DIR/build
# (default ${TMPDIR:-/tmp}/choir-peers). For each size, deterministic random
# weights at the real dimensions (tools/whisper_demo_dims.py + choir dev
# weights) are written as a choir model folder (f16) and, by
# build/bench/whisper_to_ggml, as a ggml file for whisper.cpp; both read the
# same values. Then, interleaved --runs times:
#   whisper-bench -t N  (its "decode time ... per run" is a batch-1 step,
#                        256 runs at positions 0..255)
#   choir bench whisper --decoder-only --batch 1 --steps 256 --threads N
# and, end to end on --audio (default: the 11-s JFK recording in
# ../shared/fixtures), whisper-cli -t N -bs 1 -bo 1 -nf -nt (greedy, no
# fallback, no timestamps) against choir stt --threads N --temperature 0
# --no-timestamps. Random weights never say end-of-text, so both decode
# their full window (whisper.cpp prints how many tokens it decoded).
# Prints medians and the ratios choir / whisper.cpp (below 1: choir faster).
# Needs choir built in build/ (bash scripts/build.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$(pwd)
[ $# -ge 1 ] || { sed -n 2,25p "$0"; exit 2; }
SRC=$(cd "$1" && pwd); shift
WORK=${TMPDIR:-/tmp}/choir-peers
SIZES="tiny base small"
RUNS=3
THREADS=2
DTYPES="f16 bf16"
AUDIO=$REPO/../shared/fixtures/real/speech/jfk.wav
while [ $# -gt 0 ]; do
  case "$1" in
    --work) WORK=$2; shift 2 ;;
    --sizes) SIZES=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --audio) AUDIO=$2; shift 2 ;;
    --dtypes) DTYPES=$2; shift 2 ;;
    *) echo "whisper_cpp.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
case "$SRC/" in "$REPO"/*) echo "whisper_cpp.sh: the whisper.cpp tree must be outside the repo" >&2; exit 2 ;; esac
CHOIR=$REPO/build/choir
TO_GGML=$REPO/build/bench/whisper_to_ggml
[ -x "$CHOIR" ] && [ -x "$TO_GGML" ] || { echo "whisper_cpp.sh: build choir first (bash scripts/build.sh)" >&2; exit 1; }
mkdir -p "$WORK/models"
if [ ! -x "$WORK/build/bin/whisper-bench" ] || [ ! -x "$WORK/build/bin/whisper-cli" ]; then
  cmake -S "$SRC" -B "$WORK/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
    -DWHISPER_BUILD_TESTS=OFF -DWHISPER_SDL2=OFF >"$WORK/build.log" 2>&1
  cmake --build "$WORK/build" -j"$(nproc)" --target whisper-bench whisper-cli >>"$WORK/build.log" 2>&1
fi
WB=$WORK/build/bin/whisper-bench
WC=$WORK/build/bin/whisper-cli

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }

model() { # size -> writes $WORK/models/SIZE (choir, f16) and ggml-SIZE.bin
  local s=$1 m=$WORK/models/$1
  [ -f "$m/model.safetensors" ] && [ -f "$WORK/models/ggml-$s.bin" ] && return
  python3 tools/whisper_demo_dims.py "$s" "$m-desc" >/dev/null
  "$CHOIR" dev weights --manifest "$m-desc/manifest.json" --config "$m-desc/config.json" --out "$m-f32" >/dev/null
  cp demo/whisper-demo/multilingual.tiktoken "$m-f32/"
  "$CHOIR" convert --in "$m-f32" --out "$m" --dtype f16 --quiet >/dev/null
  rm -rf "$m-f32"
  "$TO_GGML" "$m" "$WORK/models/ggml-$s.bin" f16 >/dev/null
}

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "whisper.cpp: $(git -C "$SRC" describe --always --tags 2>/dev/null || echo unknown); choir: $(git -C "$REPO" rev-parse --short HEAD)"
for s in $SIZES; do
  model "$s"
  for dt in $DTYPES; do
    : >"$WORK/wcpp.$s" ; : >"$WORK/choir.$s.$dt" ; : >"$WORK/bound.$s.$dt" ; : >"$WORK/bw.$s.$dt"
  done
  for r in $(seq "$RUNS"); do
    "$WB" -m "$WORK/models/ggml-$s.bin" -t "$THREADS" 2>&1 |
      sed -n 's/.*decode time = .*(\s*\([0-9.]*\) ms per run).*/\1/p' >>"$WORK/wcpp.$s"
    for dt in $DTYPES; do
      out=$("$CHOIR" bench whisper --dims "$s" --dtype "$dt" --threads "$THREADS" --decoder-only --batch 1 --steps 256)
      echo "$out" | sed -n 's/^decoder b=1 *\([0-9.]*\) ms per step.*/\1/p' >>"$WORK/choir.$s.$dt"
      echo "$out" | sed -n 's/^bound b=1 *\([0-9.]*\) ms per step.*/\1/p' >>"$WORK/bound.$s.$dt"
      echo "$out" | sed -n 's/^memory .*streaming read \([0-9.]*\) GB.*/\1/p' >>"$WORK/bw.$s.$dt"
    done
  done
  w=$(median <"$WORK/wcpp.$s")
  for dt in $DTYPES; do
    c=$(median <"$WORK/choir.$s.$dt"); b=$(median <"$WORK/bound.$s.$dt"); bw=$(median <"$WORK/bw.$s.$dt")
    printf '%-6s decoder b=1 per token: whisper.cpp f16 %6.2f ms [%s]  choir %-4s %6.2f ms [%s]  choir/whisper.cpp %s  choir/bound %s (bound %.2f ms at %s GB/s)\n' \
      "$s" "$w" "$(tr '\n' ' ' <"$WORK/wcpp.$s" | sed 's/ $//')" "$dt" "$c" \
      "$(tr '\n' ' ' <"$WORK/choir.$s.$dt" | sed 's/ $//')" "$(ratio "$c" "$w")" "$(ratio "$c" "$b")" "$b" "$bw"
  done
done

if [ -f "$AUDIO" ]; then
  for s in $SIZES; do
    : >"$WORK/e2e.wcpp.$s"; : >"$WORK/e2e.choir.$s"; toks=""
    for r in $(seq "$RUNS"); do
      t0=$(date +%s.%N)
      log=$("$WC" -m "$WORK/models/ggml-$s.bin" -f "$AUDIO" -t "$THREADS" -bs 1 -bo 1 -nf -nt -np 2>&1 >/dev/null || true)
      t1=$(date +%s.%N)
      awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f\n", b - a}' >>"$WORK/e2e.wcpp.$s"
      toks=$(echo "$log" | sed -n 's/.*decode time = .*\/ *\([0-9]*\) runs.*/\1/p')
      t0=$(date +%s.%N)
      "$CHOIR" stt --model "$WORK/models/$s" "$AUDIO" --threads "$THREADS" --temperature 0 --no-timestamps >/dev/null
      t1=$(date +%s.%N)
      awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f\n", b - a}' >>"$WORK/e2e.choir.$s"
    done
    w=$(median <"$WORK/e2e.wcpp.$s"); c=$(median <"$WORK/e2e.choir.$s")
    printf '%-6s end to end on %s: whisper-cli %.2f s [%s] (%s decoder runs)  choir stt %.2f s [%s]  choir/whisper.cpp %s\n' \
      "$s" "$(basename "$AUDIO")" "$w" "$(tr '\n' ' ' <"$WORK/e2e.wcpp.$s" | sed 's/ $//')" "${toks:-?}" "$c" \
      "$(tr '\n' ' ' <"$WORK/e2e.choir.$s" | sed 's/ $//')" "$(ratio "$c" "$w")"
  done
else
  echo "no $AUDIO: end-to-end comparison skipped"
fi
