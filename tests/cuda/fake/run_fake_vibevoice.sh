#!/usr/bin/env bash
# Runs tests/cuda/vibevoice_gpu_check.c against fake_cuda.c (choir/cuda.h
# emulated on the host) and fake_vibevoice.c (the VibeVoice kernels as plain
# loops) with AddressSanitizer, on a machine without a GPU: it checks the
# check itself and the model's CUDA-side data path (weights put on the
# backend, device buffers carved from the stream, uploads of the audio and
# positions, downloads of latents and logits). The --bench mode is not run.
# Usage, from the repository root:
#   bash tests/cuda/fake/run_fake_vibevoice.sh [OUT_DIR]   (default /tmp/choir-fake-vibevoice)
set -eu
. "$(dirname "$0")/fake_build.sh"
fake_begin "${1:-/tmp/choir-fake-vibevoice}"
fake_cuda src/tensor/backend/*.c tests/cuda/fake/fake_cuda.c tests/cuda/fake/fake_vibevoice.c \
    tests/cuda/vibevoice_gpu_check.c src/models/vibevoice/vv_load.c \
    src/models/vibevoice/vv_backend.c src/models/vibevoice/vv_state.c src/models/vibevoice/vv_kvpool.c \
    src/models/vibevoice/vv_encoder.c src/models/vibevoice/vv_lm.c \
    src/models/vibevoice/vv_batch.c src/models/vibevoice/vv_randw.c \
    src/models/vibevoice/vv_dims.c
fake_build vibevoice_gpu_check_fake
"$OUT/vibevoice_gpu_check_fake"
