#!/usr/bin/env bash
# Runs tests/cuda/whisper_gpu_check.c against fake_cuda.c (choir/cuda.h
# emulated on the host) on a machine without a GPU: the Whisper GPU code's
# data flow (weights, pools, slots, step buffers, graph capture and replay,
# beam-search copies) runs for real with CPU kernels, so every check must pass
# with errors at rounding level. Built with AddressSanitizer; objects are kept
# in OUT_DIR and rebuilt when their source is newer. Usage, from the
# repository root:  bash tests/cuda/fake/run_fake.sh [OUT_DIR]   (default /tmp/choir-fake)
set -eu
OUT=${1:-/tmp/choir-fake}
JOBS=${JOBS:-$(nproc)}
mkdir -p "$OUT"
CC=${CC:-cc}
FLAGS="-std=c11 -O1 -g -fsanitize=address -fno-omit-frame-pointer -D_GNU_SOURCE -DCHOIR_X86=1
       -Iinclude -Isrc -Itests/cuda/stub -Wall -Wextra -Wno-unused-parameter -Wno-format-truncation"
# One line per object: source, then extra flags.
list=$OUT/sources.txt
: >"$list"
for f in src/base/*.c src/tensor/*.c src/tensor/cpu/*.c tests/cuda/stub/cblas_loops.c \
         tests/cuda/stub/quant_layout.c; do
    [ "$f" = src/tensor/quantize.c ] || echo "$f" >>"$list"
done
for f in src/tensor/cpu/x86/*.c; do
    case "$f" in
    */avx512_*) echo "$f -mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl" >>"$list" ;;
    *) echo "$f -mavx2 -mfma -mf16c" >>"$list" ;;
    esac
done
for f in src/models/whisper/whisper_net.c src/models/whisper/whisper_enc.c src/models/whisper/whisper_dec.c \
         src/models/whisper/whisper_cuda.c src/tensor/backend/backend.c src/tensor/backend/stream.c \
         src/tensor/backend/op_core.c src/tensor/backend/op_elementwise.c src/tensor/backend/op_audio.c \
         src/models/whisper/whisper_cuda_dec.c src/models/whisper/whisper_decode.c \
         src/models/whisper/whisper_filters.c src/models/whisper/whisper_rules.c \
         tests/cuda/stub/tokenizer_stub.c \
         tests/cuda/fake/fake_cuda.c tests/cuda/whisper_gpu_check.c; do
    echo "$f -DCHOIR_HAVE_CUDA=1" >>"$list"
done
export CC FLAGS OUT
# Headers change too: rebuild everything when any header is newer than the binary.
if [ -f "$OUT/whisper_gpu_check_fake" ] &&
   [ -n "$(find include src tests/cuda -name '*.h' -newer "$OUT/whisper_gpu_check_fake")" ]; then
    rm -f "$OUT"/*.o
fi
# shellcheck disable=SC2016
xargs -P "$JOBS" -L 1 bash -c '
    src=$0; obj="$OUT/$(echo "$src" | tr / _).o"
    if [ ! -f "$obj" ] || [ "$src" -nt "$obj" ]; then $CC $FLAGS "$@" -c "$src" -o "$obj"; fi
' <"$list"
objs=$(awk -v o="$OUT" '{ gsub("/", "_", $1); print o "/" $1 ".o" }' "$list")
# shellcheck disable=SC2086
"$CC" -fsanitize=address $objs -o "$OUT/whisper_gpu_check_fake" -lm -lpthread -ldl
"$OUT/whisper_gpu_check_fake"
