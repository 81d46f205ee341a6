#!/usr/bin/env bash
# SAM-Audio on one GPU machine in one run (under 300 s): the CPU-vs-CUDA
# stage check, then choir's and PyTorch's figures for the same work printed
# side by side (bench/cuda/bench_sam_audio.c and bench/peers/sam_audio_torch.py:
# encode, the 16-step midpoint ODE, two decodes of --seconds of audio, the
# published codec and DiT sizes, random weights, f32 without TF32).
#
#   bench/peers/sam_audio_gpu.sh [BIN_DIR] [--seconds 10] [--size all]
#   bench/peers/sam_audio_gpu.sh --ratios-only CHOIR_ROWS TORCH_ROWS
#
# After both tables it prints, per size, choir's real-time factor over
# PyTorch's and choir's one-evaluation time over PyTorch's.
# BIN_DIR holds choir_sam_audio_gpu_check and bench_sam_audio_gpu (default:
# build them with the standalone CUDA project, tests/cuda, into /tmp/sam-b;
# it needs no Debian library). Everything printed goes to $OUT/sam_audio_gpu.txt too.
set -uo pipefail
cd "$(dirname "$0")/../.."
# Rows are "IMPL SIZE | encode_s eval_ms ode_s decode_s total_s rtf peak_gb ...":
# the real-time factor's and one evaluation's ratio for each size both ran.
sam_ratios() {
  awk 'FNR == NR { if ($1 ~ /^choir-/ && $3 == "|") { rtf[$2] = $9; ev[$2] = $5 } next }
       $1 ~ /^torch-/ && $3 == "|" && ($2 in rtf) && $9 > 0 && $5 > 0 {
         printf "ratio %-5s | rtf %.3f / %.3f = %.2f   one evaluation %.2f / %.2f ms = %.2f\n",
                $2, rtf[$2], $9, rtf[$2] / $9, ev[$2], $5, ev[$2] / $5; n++ }
       END { if (!n) print "ratio: no size with both rows" }' "$1" "$2"
}
[ "${1:-}" = --ratios-only ] && { sam_ratios "$2" "$3"; exit 0; }
BIN=${1:-}
[ $# -gt 0 ] && shift
ARGS=("$@")
LOG=${OUT:-/tmp}/sam_audio_gpu.txt
mkdir -p "$(dirname "$LOG")"
exec > >(tee "$LOG") 2>&1
if [ -z "$BIN" ]; then
  t0=$SECONDS
  GEN=()
  command -v ninja >/dev/null && GEN=(-G Ninja)
  cmake -S tests/cuda -B /tmp/sam-b "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release >/tmp/sam-b.log 2>&1 &&
    cmake --build /tmp/sam-b -j"$(nproc)" --target choir_sam_audio_gpu_check bench_sam_audio_gpu >>/tmp/sam-b.log 2>&1 ||
    { tail -40 /tmp/sam-b.log; echo "sam_audio_gpu: build failed"; exit 1; }
  BIN=/tmp/sam-b/cuda
  echo "built in $((SECONDS - t0)) s"
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null
echo "=== CPU vs CUDA, stage by stage"
timeout 60 "$BIN/choir_sam_audio_gpu_check"
check=$?
ROWS=$(mktemp -d)
echo "=== choir (CUDA backend)"
timeout 100 "$BIN/bench_sam_audio_gpu" "${ARGS[@]}" | tee "$ROWS/choir.txt"
echo "=== PyTorch"
timeout 100 python3 bench/peers/sam_audio_torch.py "${ARGS[@]}" | tee "$ROWS/torch.txt"
echo "=== choir / PyTorch, per size (below 1: choir is faster)"
sam_ratios "$ROWS/choir.txt" "$ROWS/torch.txt"
rm -rf "$ROWS"
echo "=== check exit $check (0 pass, 1 fail, 77 no GPU)"
exit $check
