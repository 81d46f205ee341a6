#!/usr/bin/env bash
# Kokoro on the CPU: choir against ONNX Runtime (the reference model exported
# with random weights by bench/peers/kokoro_onnx_export.py on a machine with
# torch and onnx), batch 1, same thread count, interleaved runs.
#
#   bench/peers/kokoro_onnx.sh MODEL.onnx CHOIR_KOKORO_DIR [--runs 3] [--threads 2] [--work DIR]
#
# onnxruntime-node is installed from the npm registry into DIR (default
# ${TMPDIR:-/tmp}/choir-peers/ort), outside the repo. CHOIR_KOKORO_DIR is a
# choir Kokoro model folder at the real dimensions (e.g. `choir dev weights
# --manifest ../shared/fixtures/kokoro/kokoro-v1/manifest.json --config
# .../config.json --out DIR`). Both sides print real-time factors (wall
# seconds per second of audio); the ratio choir / onnxruntime is printed last.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$(pwd)
[ $# -ge 2 ] || { sed -n 2,13p "$0"; exit 2; }
ONNX=$1 KDIR=$2; shift 2
RUNS=3 THREADS=2 WORK=${TMPDIR:-/tmp}/choir-peers/ort
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) RUNS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --work) WORK=$2; shift 2 ;;
    *) echo "kokoro_onnx.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$WORK"
[ -d "$WORK/node_modules/onnxruntime-node" ] || (cd "$WORK" && npm install --no-audit --no-fund onnxruntime-node >/dev/null)
VOICE=$REPO/../shared/fixtures/kokoro/voices/af_heart.bin
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
: >"$WORK/ort.rtf"; : >"$WORK/choir.rtf"
for r in $(seq "$RUNS"); do
  (cd "$WORK" && node "$REPO/bench/peers/kokoro_onnx.mjs" "$ONNX" --runs 1 --threads "$THREADS") |
    sed -n 's/.*median RTF \([0-9.]*\).*/\1/p' >>"$WORK/ort.rtf"
  "$REPO/build/choir" bench kokoro --model "$KDIR" --voice "$VOICE" --threads "$THREADS" --batch 1 |
    tee "$WORK/choir.last" | sed -n 's/^ *1 requests at once.*RTF \([0-9.]*\).*/\1/p' >>"$WORK/choir.rtf"
done
o=$(median <"$WORK/ort.rtf"); c=$(median <"$WORK/choir.rtf")
echo "onnxruntime RTF [$(tr '\n' ' ' <"$WORK/ort.rtf")] median $o"
echo "choir       RTF [$(tr '\n' ' ' <"$WORK/choir.rtf")] median $c"
awk -v c="$c" -v o="$o" 'BEGIN {printf "choir / onnxruntime time per second of audio: %.2f\n", c / o}'
