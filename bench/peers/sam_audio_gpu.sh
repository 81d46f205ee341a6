#!/usr/bin/env bash
# SAM-Audio on one GPU machine in one run (under 300 s): the CPU-vs-CUDA
# stage check, then choir's and PyTorch's figures for the same work printed
# side by side (bench/cuda/bench_sam_audio.c and bench/peers/sam_audio_torch.py:
# encode, the 16-step midpoint ODE, two decodes of --seconds of audio, the
# published codec and DiT sizes, random weights, f32 without TF32).
#
#   bench/peers/sam_audio_gpu.sh [BIN_DIR] [--seconds 10] [--size all]
#
# BIN_DIR holds choir_sam_audio_gpu_check and bench_sam_audio_gpu (default:
# build them with the standalone CUDA project, tests/cuda, into /tmp/sam-b;
# it needs no Debian library). Everything printed goes to $OUT/sam_audio_gpu.txt too.
set -uo pipefail
cd "$(dirname "$0")/../.."
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
echo "=== choir (CUDA backend)"
timeout 100 "$BIN/bench_sam_audio_gpu" "${ARGS[@]}"
echo "=== PyTorch"
timeout 100 python3 bench/peers/sam_audio_torch.py "${ARGS[@]}"
echo "=== check exit $check (0 pass, 1 fail, 77 no GPU)"
exit $check
