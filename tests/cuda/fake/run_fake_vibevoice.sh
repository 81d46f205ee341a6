#!/usr/bin/env bash
# Runs tests/cuda/vibevoice_gpu_check.c against fake_cuda.c (choir/cuda.h
# emulated on the host) and fake_vibevoice.c (the VibeVoice kernels as plain
# loops) with AddressSanitizer, on a machine without a GPU: it checks the
# check itself and the model's CUDA-side data path (weights put on the
# backend, device buffers carved from the stream, uploads of the audio and
# positions, downloads of latents and logits), and its engine case: requests
# through the engine with the adapter on the (emulated) GPU, its KV pool
# and device accounts. The --bench mode is not run.
# Usage, from the repository root:
#   bash tests/cuda/fake/run_fake_vibevoice.sh [OUT_DIR]   (default /tmp/choir-fake-vibevoice)
set -eu
. "$(dirname "$0")/fake_build.sh"
fake_begin "${1:-/tmp/choir-fake-vibevoice}"
fake_cuda src/tensor/backend/*.c tests/cuda/fake/fake_cuda.c tests/cuda/fake/fake_vibevoice.c \
    "tests/cuda/vibevoice_gpu_check.c -DCHOIR_VGC_ENGINE=1" src/models/vibevoice/vv_load.c \
    src/models/vibevoice/vv_backend.c src/models/vibevoice/vv_state.c src/models/vibevoice/vv_kvpool.c \
    src/models/vibevoice/vv_encoder.c src/models/vibevoice/vv_lm.c \
    src/models/vibevoice/vv_batch.c src/models/vibevoice/vv_randw.c \
    src/models/vibevoice/vv_dims.c
# The engine case: the engine, the model interface, the adapter and the
# rest of VibeVoice (config, prompt, transcription), the tokenizer, the
# checkpoint reader and writer, the resampler; cJSON and soxr from the
# system.
fake_cuda src/engine/*.c src/models/model.c src/models/vibevoice/vv_model.c \
    src/models/vibevoice/vv_config.c src/models/vibevoice/vv_prompt.c src/models/vibevoice/vv_transcribe.c \
    src/models/vibevoice/vv_open.c src/text/bpe*.c src/text/regex.c src/text/unicode*.c \
    src/io/safetensors.c src/io/randw.c src/io/st_writer.c src/io/json.c src/io/io_util.c \
    src/audio/resample.c tests/cuda/stub/vv_engine_stubs.c
FAKE_LIBS="-lcjson -lsoxr"
# The real cJSON header ahead of the standalone build's stand-in (tests/cuda/stub/cjson).
mkdir -p "$OUT/inc"
ln -sfn /usr/include/cjson "$OUT/inc/cjson"
FLAGS="-I$OUT/inc $FLAGS"
fake_build vibevoice_gpu_check_fake
"$OUT/vibevoice_gpu_check_fake"
