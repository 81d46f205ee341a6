#!/usr/bin/env bash
# ctest: labels=slow;nosan cost=60
# SAM-Audio's CUDA data path on a machine without a GPU:
# tests/cuda/sam_audio_gpu_check.c against tests/cuda/fake/fake_cuda.c
# (choir/cuda.h on the host, CPU kernels) and fake_sam.c (SAM's kernels as
# their CPU references), under AddressSanitizer. Every stage (the SAM ops,
# encode, a ragged DiT batch, the ODE, decode with the watermark) must agree
# with the CPU backend and the check must end with PASS.
set -eu
SRC=${CHOIR_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
OUT=${CHOIR_BUILD_DIR:-/tmp}/sam-gpu-fake
cd "$SRC"
log=$(bash tests/cuda/fake/run_fake_sam.sh "$OUT" 2>&1) || {
    echo "$log" | tail -40
    echo "FAIL: run_fake_sam.sh"
    exit 1
}
echo "$log" | grep -E 'rel-L2|sam_audio_gpu_check'
echo "$log" | grep -q '^sam_audio_gpu_check: PASS$'
