#!/usr/bin/env bash
# Runs tests/cuda/sam_audio_gpu_check.c against fake_cuda.c (choir/cuda.h
# emulated on the host) and the other fakes (fake_sam.c: SAM-Audio's kernels
# as their CPU references) with AddressSanitizer, on a machine without a GPU:
# it checks the check itself and the model's CUDA-side data path (weights
# put on the backend, device buffers carved from the stream, uploads and
# downloads, the ODE's states kept on the device; requests through the engine
# on the GPU and its device accounts), not the CUDA kernels.
# Usage, from the repository root:
#   bash tests/cuda/fake/run_fake_sam.sh [OUT_DIR]   (default /tmp/choir-fake-sam)
set -eu
. "$(dirname "$0")/fake_build.sh"
fake_begin "${1:-/tmp/choir-fake-sam}"
# The shared operations and SAM's own (another area's op_<area>.c needs kernels of its own).
fake_cuda src/tensor/backend/backend.c src/tensor/backend/stream.c src/tensor/backend/op_core.c \
    src/tensor/backend/op_elementwise.c src/tensor/backend/op_audio.c \
    src/tensor/backend/op_sam.c tests/cuda/fake/fake_cuda.c tests/cuda/fake/fake_sam.c \
    tests/cuda/sam_audio_gpu_check.c src/models/sam_audio/sam_codec.c \
    src/models/sam_audio/sam_dit.c src/models/sam_audio/sam_ode.c src/models/sam_audio/sam_plan.c \
    src/models/sam_audio/sam_backend.c src/models/sam_audio/sam_random.c \
    src/audio/chunker.c
# The engine case: the engine, the model interface, SAM-Audio's adapter, job
# code and T5, with stand-ins for the libraries a GPU machine lacks.
fake_cuda src/engine/*.c src/models/model.c src/models/sam_audio/sam_model.c \
    src/models/sam_audio/sam_sep.c src/models/sam_audio/sam_t5.c tests/cuda/stub/sam_engine_stubs.c
fake_build sam_audio_gpu_check_fake
"$OUT/sam_audio_gpu_check_fake"
