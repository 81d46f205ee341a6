#!/usr/bin/env bash
# ctest: labels=slow;nosan cost=150
# The backend operations' CUDA side (src/tensor/backend with CHOIR_HAVE_CUDA)
# on a machine without a GPU: tests/cuda/backend_gpu_check.c against
# tests/cuda/fake/fake_cuda.c (choir/cuda.h on the host, CPU kernels, graphs
# recorded and replayed), under AddressSanitizer. Every case the emulation
# covers must pass; the operations it does not emulate are SKIP lines.
set -eu
SRC=${CHOIR_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
OUT=${CHOIR_BUILD_DIR:-/tmp}/backend-gpu-fake
cd "$SRC"
log=$(bash tests/cuda/fake/run_fake_backend.sh "$OUT" 2>&1) || {
    echo "$log"
    echo "FAIL: run_fake_backend.sh"
    exit 1
}
echo "$log" | grep -E '^(FAIL|SKIP)|cases passed'
if echo "$log" | grep -q '^FAIL'; then exit 1; fi
echo "$log" | grep -qE '^([0-9]+) of \1 cases passed'
