#!/usr/bin/env bash
# ctest: labels=slow;nosan cost=240
# VibeVoice-ASR's CUDA side on a machine without a GPU:
# tests/cuda/vibevoice_gpu_check.c against tests/cuda/fake/fake_cuda.c and
# fake_vibevoice.c (choir/cuda.h and the VibeVoice kernels on the host),
# under AddressSanitizer: the four operations and the whole model at reduced
# dimensions, f32 and bf16, stage by stage against the CPU backend; then
# requests through the engine with the adapter on the emulated GPU (its KV
# pool, joins, waits and refusals by pages, device accounts) against the
# adapter on the CPU (skipped when the shared fixtures are missing).
set -eu
SRC=${CHOIR_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
OUT=${CHOIR_BUILD_DIR:-/tmp}/vibevoice-gpu-fake
cd "$SRC"
log=$(bash tests/cuda/fake/run_fake_vibevoice.sh "$OUT" 2>&1) || {
    echo "$log"
    echo "FAIL: run_fake_vibevoice.sh"
    exit 1
}
echo "$log" | grep -E '^(FAIL|SKIP)| passed, '
if echo "$log" | grep -q '^FAIL'; then exit 1; fi
echo "$log" | grep -qE '^[0-9]+ passed, 0 failed$'
