#!/usr/bin/env bash
# Kokoro on the CPU: choir against ONNX Runtime, batch 1, same weights, same
# inputs, same thread count, interleaved runs.
#
#   bench/peers/kokoro_onnx.sh ONNX_DIR CHOIR_KOKORO_DIR [--runs 3] [--threads 2] [--work DIR]
#
# ONNX_DIR holds kokoro.onnx + kokoro.recipe.json (bench/peers/kokoro_onnx_pack.py,
# run on a machine with torch; it exports the reference with choir's randw-v1
# weights). CHOIR_KOKORO_DIR is the choir model of the same manifest (`choir dev
# weights --manifest ../shared/fixtures/kokoro/kokoro-v1/manifest.json --config
# .../config.json --out DIR`). Steps: rebuild kokoro.onnx.data from the manifest
# (kokoro_onnx_unpack.py, numpy) if absent; install onnxruntime-node from the npm
# registry into DIR (default ${TMPDIR:-/tmp}/choir-peers/ort, outside the repo;
# its postinstall, which fetches CUDA parts from nuget.org, is skipped: the CPU
# binaries ship in the package); write the pieces choir's streamed run makes of
# the bench paragraph (`choir bench kokoro --pieces-out`) with choir's zero-noise
# audio, run the same pieces through the zero-noise graph (kokoro_onnx_zero.py)
# and compare (kokoro_onnx_compare.py: durations, F0, N, audio); then time, R
# times interleaved, ONNX Runtime on those pieces one after another and choir's
# streamed paragraph at batch 1 (`paragraph, batch 1` line). Prints real-time
# factors (wall seconds per second of audio) and the ratio choir / onnxruntime.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$(pwd)
[ $# -ge 2 ] || { sed -n 2,21p "$0"; exit 2; }
ODIR=$1 KDIR=$2; shift 2
RUNS=3 THREADS=2 WORK=${TMPDIR:-/tmp}/choir-peers/ort
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) RUNS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --work) WORK=$2; shift 2 ;;
    *) echo "kokoro_onnx.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
PY=/usr/bin/python3 # Debian's, with python3-numpy
FIX=$REPO/../shared/fixtures
VOICE=$FIX/kokoro/voices/af_heart.bin
mkdir -p "$WORK"
[ -f "$ODIR/kokoro.onnx.data" ] || $PY bench/peers/kokoro_onnx_unpack.py "$ODIR" \
  --manifest "$FIX/kokoro/kokoro-v1/manifest.json" --randw "$FIX/randw_reference.py"
[ -f "$ODIR/kokoro_zero.onnx" ] || $PY bench/peers/kokoro_onnx_zero.py "$ODIR"
[ -d "$WORK/node_modules/onnxruntime-node" ] || (cd "$WORK" &&
  ONNXRUNTIME_NODE_INSTALL=skip ONNXRUNTIME_NODE_INSTALL_CUDA=skip \
  npm install --no-audit --no-fund --ignore-scripts onnxruntime-node >/dev/null)
PIECES=$WORK/pieces
rm -rf "$PIECES" && mkdir -p "$PIECES"
"$REPO/build/choir" bench kokoro --model "$KDIR" --voice "$VOICE" --threads "$THREADS" \
  --pieces-out "$PIECES"
(cd "$WORK" && node "$REPO/bench/peers/kokoro_onnx.mjs" "$ODIR/kokoro_zero.onnx" --pieces "$PIECES" \
  --dump --runs 0 --threads "$THREADS")
$PY bench/peers/kokoro_onnx_compare.py "$PIECES"
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
: >"$WORK/ort.rtf"; : >"$WORK/choir.rtf"
for r in $(seq "$RUNS"); do
  (cd "$WORK" && node "$REPO/bench/peers/kokoro_onnx.mjs" "$ODIR/kokoro.onnx" --pieces "$PIECES" \
    --runs 1 --threads "$THREADS") | tee "$WORK/ort.last" |
    sed -n 's/.*median RTF \([0-9.]*\).*/\1/p' >>"$WORK/ort.rtf"
  "$REPO/build/choir" bench kokoro --model "$KDIR" --voice "$VOICE" --threads "$THREADS" --batch 1 |
    tee "$WORK/choir.last" | sed -n 's/^ *paragraph, batch 1:.*RTF \([0-9.]*\).*/\1/p' >>"$WORK/choir.rtf"
  echo "run $r: onnxruntime $(tail -1 "$WORK/ort.rtf"), choir $(tail -1 "$WORK/choir.rtf")"
done
cat "$WORK/ort.last" "$WORK/choir.last"
o=$(median <"$WORK/ort.rtf"); c=$(median <"$WORK/choir.rtf")
echo "onnxruntime RTF [$(tr '\n' ' ' <"$WORK/ort.rtf")] median $o"
echo "choir       RTF [$(tr '\n' ' ' <"$WORK/choir.rtf")] median $c"
awk -v c="$c" -v o="$o" 'BEGIN {printf "choir / onnxruntime time per second of audio: %.2f\n", c / o}'
