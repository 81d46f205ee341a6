#!/usr/bin/env bash
# Runs tests/cuda/sam_audio_gpu_check.c against fake_cuda.c (choir/cuda.h
# emulated on the host) and the other fakes (fake_sam.c: SAM-Audio's kernels
# as their CPU references) with AddressSanitizer, on a machine without a GPU:
# it checks the check itself and the model's CUDA-side data path (weights
# put on the backend, device buffers carved from the stream, uploads and
# downloads, the ODE's states kept on the device), not the CUDA kernels.
# Usage, from the repository root:
#   bash tests/cuda/fake/run_fake_sam.sh [OUT_DIR]   (default /tmp/choir-fake-sam)
set -eu
OUT=${1:-/tmp/choir-fake-sam}
JOBS=${JOBS:-$(nproc)}
mkdir -p "$OUT"
CC=${CC:-cc}
FLAGS="-std=c11 -O1 -g -fsanitize=address -fno-omit-frame-pointer -D_GNU_SOURCE -DCHOIR_X86=1
       -Iinclude -Isrc -Itests/cuda/stub -Wall -Wextra -Wno-unused-parameter -Wno-format-truncation"
list=$OUT/sources.txt
: >"$list"
for f in src/base/*.c src/tensor/*.c src/tensor/cpu/*.c tests/cuda/stub/cblas_loops.c \
         tests/cuda/stub/quant_layout.c; do
    [ "$f" = src/tensor/quantize.c ] || echo "$f" >>"$list"
done
for f in src/tensor/cpu/x86/*.c; do
    case $f in
        */avx512_*) echo "$f -mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl" >>"$list" ;;
        *) echo "$f -mavx2 -mfma -mf16c" >>"$list" ;;
    esac
done
# The shared operations and SAM's own (another area's op_<area>.c needs kernels of its own).
for f in src/tensor/backend/backend.c src/tensor/backend/stream.c src/tensor/backend/op_core.c \
         src/tensor/backend/op_elementwise.c src/tensor/backend/op_audio.c src/tensor/backend/op_sam.c \
         tests/cuda/fake/fake_cuda.c tests/cuda/fake/fake_sam.c \
         tests/cuda/sam_audio_gpu_check.c src/models/sam_audio/sam_codec.c src/models/sam_audio/sam_dit.c \
         src/models/sam_audio/sam_ode.c src/models/sam_audio/sam_backend.c \
         src/models/sam_audio/sam_random.c; do
    echo "$f -DCHOIR_HAVE_CUDA=1" >>"$list"
done
export CC FLAGS OUT
if [ -f "$OUT/sam_audio_gpu_check_fake" ] &&
   [ -n "$(find include src tests/cuda -name '*.h' -newer "$OUT/sam_audio_gpu_check_fake")" ]; then
    rm -f "$OUT"/*.o
fi
# shellcheck disable=SC2016
xargs -P "$JOBS" -L 1 bash -c '
    src=$0; obj="$OUT/$(echo "$src" | tr / _).o"
    if [ ! -f "$obj" ] || [ "$src" -nt "$obj" ]; then $CC $FLAGS "$@" -c "$src" -o "$obj"; fi
' <"$list"
objs=$(awk -v o="$OUT" '{ gsub("/", "_", $1); print o "/" $1 ".o" }' "$list")
# shellcheck disable=SC2086
"$CC" -fsanitize=address $objs -o "$OUT/sam_audio_gpu_check_fake" -lm -lpthread -ldl
"$OUT/sam_audio_gpu_check_fake"
