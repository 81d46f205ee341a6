#!/usr/bin/env bash
# Runs tests/cuda/kokoro_gpu_check.c against fake_cuda.c (choir/cuda.h
# emulated on the host) and fake_kokoro.c (the vocoder kernels as the CPU
# backend's operations) with AddressSanitizer, on a machine without a GPU:
# it checks the check itself and Kokoro's CUDA path (kokoro_cuda.c's
# placement, the one executor kokoro_exec.c on a CUDA backend, weights put on
# the backend, stream buffers, uploads and downloads, lengths in backend
# memory, the batched front, the harmonic source, the style projections in one
# product, the shared LSTM and F0/N blocks in one call, the front's batch
# switch). All 143 checks pass (7 Dec; the check's own errors are 0 or
# rounding there). Slow: the check runs the real layer sizes (855-frame
# pieces through the batched front, 33 pieces through ALBERT twice) at -O1
# under ASan, ~15 min on the 2-core dev box (beside a build), so it is a
# manual run, not a ctest. Usage, from the
# repository root:
#   bash tests/cuda/fake/run_fake_kokoro.sh [OUT_DIR]   (default /tmp/choir-fake-kokoro)
set -eu
. "$(dirname "$0")/fake_build.sh"
fake_begin "${1:-/tmp/choir-fake-kokoro}"
fake_cuda src/tensor/backend/backend.c src/tensor/backend/stream.c src/tensor/backend/op_core.c \
    src/tensor/backend/op_elementwise.c src/tensor/backend/op_audio.c \
    src/tensor/backend/op_vocoder.c tests/cuda/fake/fake_cuda.c tests/cuda/fake/fake_kokoro.c \
    tests/cuda/kokoro_gpu_check.c src/models/kokoro/kokoro_blocks.c \
    src/models/kokoro/kokoro_decoder.c src/models/kokoro/kokoro_forward.c \
    src/models/kokoro/kokoro_front_net.c src/models/kokoro/kokoro_generator.c \
    src/models/kokoro/kokoro_cuda.c src/models/kokoro/kokoro_exec.c \
    src/models/kokoro/kokoro_front_batch.c
fake_build kokoro_gpu_check_fake
"$OUT/kokoro_gpu_check_fake"
