#!/usr/bin/env bash
# Side by side with whisper.cpp on this CPU, same weights, same threads.
#
#   bench/peers/whisper_cpp.sh WHISPER_CPP_SRC [--work DIR] [--sizes "tiny base small"]
#                              [--runs 3] [--threads 2] [--audio WAV] [--dtypes "f16 bf16"]
#                              [--choir BIN]... [--skip decoder|e2e]
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
# Needs choir built in build/ (bash scripts/build.sh). --choir BIN (repeatable)
# runs that choir binary instead (its choir-dev beside it); given twice or
# more, each run of the loop runs every one in turn, so two builds are A/B'd
# in the same interleaved run (copy them out of build/ first: a rebuild
# while this runs changes what is measured). Rows are labelled by BIN.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$(pwd)
[ $# -ge 1 ] || { sed -n 2,25p "$0"; exit 2; }
SRC=$(cd "$1" && pwd); shift
WORK=${TMPDIR:-/tmp}/choir-peers
SIZES="tiny base small"
RUNS=3
SKIP=""
THREADS=2
DTYPES="f16 bf16"
AUDIO=$REPO/../shared/fixtures/real/speech/jfk.wav
CHOIRS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --work) WORK=$2; shift 2 ;;
    --sizes) SIZES=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --audio) AUDIO=$2; shift 2 ;;
    --dtypes) DTYPES=$2; shift 2 ;;
    --skip) SKIP="$SKIP $2"; shift 2 ;;
    --choir) CHOIRS+=("$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"); shift 2 ;;
    *) echo "whisper_cpp.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
case "$SRC/" in "$REPO"/*) echo "whisper_cpp.sh: the whisper.cpp tree must be outside the repo" >&2; exit 2 ;; esac
[ ${#CHOIRS[@]} -gt 0 ] || CHOIRS=("$REPO/build/choir")
CHOIR=${CHOIRS[0]} # writes the models
TO_GGML=$REPO/build/bench/whisper_to_ggml
for c in "${CHOIRS[@]}"; do
  [ -x "$c" ] && [ -x "$(dirname "$c")/choir-dev" ] || { echo "whisper_cpp.sh: no $c (or no choir-dev beside it): build choir first (bash scripts/build.sh)" >&2; exit 1; }
done
[ -x "$TO_GGML" ] || { echo "whisper_cpp.sh: build choir first (bash scripts/build.sh)" >&2; exit 1; }
# A short label per binary for the files and rows: its index (c0, c1, ...).
label() { echo "c$1"; }
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
NC=${#CHOIRS[@]}
for i in $(seq 0 $((NC - 1))); do echo "$(label "$i"): ${CHOIRS[$i]}"; done
for s in $SIZES; do
  model "$s"
  [[ " $SKIP " == *" decoder "* ]] && continue
  : >"$WORK/wcpp.$s"
  for i in $(seq 0 $((NC - 1))); do
    for dt in $DTYPES; do
      l=$(label "$i").$s.$dt
      : >"$WORK/choir.$l" ; : >"$WORK/bound.$l" ; : >"$WORK/bw.$l"
    done
  done
  for r in $(seq "$RUNS"); do
    "$WB" -m "$WORK/models/ggml-$s.bin" -t "$THREADS" 2>&1 |
      sed -n 's/.*decode time = .*(\s*\([0-9.]*\) ms per run).*/\1/p' >>"$WORK/wcpp.$s"
    for i in $(seq 0 $((NC - 1))); do
      for dt in $DTYPES; do
        l=$(label "$i").$s.$dt
        out=$("${CHOIRS[$i]}" bench whisper --dims "$s" --dtype "$dt" --threads "$THREADS" --decoder-only --batch 1 --steps 256)
        echo "$out" | sed -n 's/^decoder b=1 *\([0-9.]*\) ms per step.*/\1/p' >>"$WORK/choir.$l"
        echo "$out" | sed -n 's/^bound b=1 *\([0-9.]*\) ms per step.*/\1/p' >>"$WORK/bound.$l"
        echo "$out" | sed -n 's/^memory .*streaming read \([0-9.]*\) GB.*/\1/p' >>"$WORK/bw.$l"
      done
    done
  done
  w=$(median <"$WORK/wcpp.$s")
  for i in $(seq 0 $((NC - 1))); do
    for dt in $DTYPES; do
      l=$(label "$i").$s.$dt
      c=$(median <"$WORK/choir.$l"); b=$(median <"$WORK/bound.$l"); bw=$(median <"$WORK/bw.$l")
      printf '%-6s decoder b=1 per token: whisper.cpp f16 %6.2f ms [%s]  choir %s %-4s %6.2f ms [%s]  choir/whisper.cpp %s  choir/bound %s (bound %.2f ms at %s GB/s)\n' \
        "$s" "$w" "$(tr '\n' ' ' <"$WORK/wcpp.$s" | sed 's/ $//')" "$(label "$i")" "$dt" "$c" \
        "$(tr '\n' ' ' <"$WORK/choir.$l" | sed 's/ $//')" "$(ratio "$c" "$w")" "$(ratio "$c" "$b")" "$b" "$bw"
    done
  done
done

if [[ " $SKIP " == *" e2e "* ]]; then
  :
elif [ -f "$AUDIO" ]; then
  for s in $SIZES; do
    : >"$WORK/e2e.wcpp.$s"; toks=""
    for i in $(seq 0 $((NC - 1))); do : >"$WORK/e2e.$(label "$i").$s"; done
    for r in $(seq "$RUNS"); do
      t0=$(date +%s.%N)
      log=$("$WC" -m "$WORK/models/ggml-$s.bin" -f "$AUDIO" -t "$THREADS" -bs 1 -bo 1 -nf -nt -np 2>&1 >/dev/null || true)
      t1=$(date +%s.%N)
      awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f\n", b - a}' >>"$WORK/e2e.wcpp.$s"
      toks=$(echo "$log" | sed -n 's/.*decode time = .*\/ *\([0-9]*\) runs.*/\1/p')
      for i in $(seq 0 $((NC - 1))); do
        t0=$(date +%s.%N)
        "${CHOIRS[$i]}" stt --model "$WORK/models/$s" "$AUDIO" --threads "$THREADS" --temperature 0 --no-timestamps >/dev/null
        t1=$(date +%s.%N)
        awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f\n", b - a}' >>"$WORK/e2e.$(label "$i").$s"
      done
    done
    w=$(median <"$WORK/e2e.wcpp.$s")
    for i in $(seq 0 $((NC - 1))); do
      c=$(median <"$WORK/e2e.$(label "$i").$s")
      printf '%-6s end to end on %s: whisper-cli %.2f s [%s] (%s decoder runs)  choir %s stt %.2f s [%s]  choir/whisper.cpp %s\n' \
        "$s" "$(basename "$AUDIO")" "$w" "$(tr '\n' ' ' <"$WORK/e2e.wcpp.$s" | sed 's/ $//')" "${toks:-?}" "$(label "$i")" "$c" \
        "$(tr '\n' ' ' <"$WORK/e2e.$(label "$i").$s" | sed 's/ $//')" "$(ratio "$c" "$w")"
    done
  done
else
  echo "no $AUDIO: end-to-end comparison skipped"
fi
