#!/usr/bin/env bash
# Runs tests/cuda/backend_gpu_check.c against fake_cuda.c (choir/cuda.h
# emulated on the host, every kernel its CPU reference) with
# AddressSanitizer, on a machine without a GPU: it checks the check itself
# and the backend's CUDA-side plumbing (pointers, strides, device-side
# lengths, graph capture). Operations the emulation lacks report SKIP.
# Usage, from the repository root:
#   bash tests/cuda/fake/run_fake_backend.sh [OUT_DIR]   (default /tmp/choir-fake-backend)
set -eu
. "$(dirname "$0")/fake_build.sh"
fake_begin "${1:-/tmp/choir-fake-backend}"
# The shared operations and the vocoder's (each area's op_<area>.c needs kernels the emulation
# may lack; the vocoder's stand-ins in fake_cuda.c answer "not emulated", so those cases SKIP).
fake_cuda src/tensor/backend/backend.c src/tensor/backend/stream.c src/tensor/backend/op_core.c \
    src/tensor/backend/op_elementwise.c src/tensor/backend/op_audio.c \
    src/tensor/backend/op_vocoder.c tests/cuda/fake/fake_cuda.c tests/cuda/backend_gpu_check.c
fake_build backend_gpu_check_fake
"$OUT/backend_gpu_check_fake"
