#!/usr/bin/env bash
# Runs tests/cuda/whisper_gpu_check.c against fake_cuda.c (choir/cuda.h
# emulated on the host) on a machine without a GPU: the Whisper GPU code's
# data flow (weights, pools, slots, step buffers, graph capture and replay,
# beam-search copies, word timestamps' alignment pass) runs for real with CPU kernels, so every check must pass
# with errors at rounding level. Built with AddressSanitizer; objects are kept
# in OUT_DIR and rebuilt when their source is newer. Usage, from the
# repository root:  bash tests/cuda/fake/run_fake.sh [OUT_DIR]   (default /tmp/choir-fake)
set -eu
. "$(dirname "$0")/fake_build.sh"
fake_begin "${1:-/tmp/choir-fake}"
fake_cuda src/models/whisper/whisper_net.c src/models/whisper/whisper_enc.c \
    src/models/whisper/whisper_dec.c src/models/whisper/whisper_cuda.c \
    src/tensor/backend/backend.c src/tensor/backend/stream.c src/tensor/backend/op_core.c \
    src/tensor/backend/op_elementwise.c src/tensor/backend/op_audio.c src/tensor/backend/op_whisper.c \
    src/models/whisper/whisper_decode.c \
    src/models/whisper/whisper_filters.c src/models/whisper/whisper_rules.c \
    src/models/whisper/whisper_qk.c src/models/whisper/whisper_align.c \
    src/models/whisper/whisper_words.c \
    tests/cuda/stub/tokenizer_stub.c tests/cuda/fake/fake_cuda.c tests/cuda/fake/fake_whisper.c
# The check with the tokenizer stand-in's token bytes (its words case).
echo "tests/cuda/whisper_gpu_check.c -DCHOIR_HAVE_CUDA=1 -DCHOIR_TOKENIZER_STUB=1" >>"$list"
fake_build whisper_gpu_check_fake
"$OUT/whisper_gpu_check_fake"
