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
OUT=${1:-/tmp/choir-fake-vibevoice}
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
    case "$f" in
    */avx512_*) echo "$f -mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl" >>"$list" ;;
    *) echo "$f -mavx2 -mfma -mf16c" >>"$list" ;;
    esac
done
for f in src/tensor/backend/*.c tests/cuda/fake/fake_cuda.c tests/cuda/fake/fake_vibevoice.c \
         tests/cuda/vibevoice_gpu_check.c src/models/vibevoice/vv_load.c src/models/vibevoice/vv_backend.c \
         src/models/vibevoice/vv_state.c src/models/vibevoice/vv_encoder.c src/models/vibevoice/vv_lm.c src/models/vibevoice/vv_batch.c \
         src/models/vibevoice/vv_randw.c src/models/vibevoice/vv_dims.c; do
    echo "$f -DCHOIR_HAVE_CUDA=1" >>"$list"
done
export CC FLAGS OUT
if [ -f "$OUT/vibevoice_gpu_check_fake" ] &&
   [ -n "$(find include src tests/cuda -name '*.h' -newer "$OUT/vibevoice_gpu_check_fake")" ]; then
    rm -f "$OUT"/*.o
fi
# shellcheck disable=SC2016
xargs -P "$JOBS" -L 1 bash -c '
    src=$0; obj="$OUT/$(echo "$src" | tr / _).o"
    if [ ! -f "$obj" ] || [ "$src" -nt "$obj" ]; then $CC $FLAGS "$@" -c "$src" -o "$obj"; fi
' <"$list"
# The backend's operation files go into an archive, so that only those the
# check reaches are linked: other areas' operations call CUDA kernels the
# emulation does not have.
objs=$(awk -v o="$OUT" '$1 !~ /^src\/tensor\/backend\// { gsub("/", "_", $1); print o "/" $1 ".o" }' "$list")
rm -f "$OUT/libbackend.a"
ar rcs "$OUT/libbackend.a" "$OUT"/src_tensor_backend_*.o
# shellcheck disable=SC2086
"$CC" -fsanitize=address $objs "$OUT/libbackend.a" -o "$OUT/vibevoice_gpu_check_fake" -lm -lpthread -ldl
"$OUT/vibevoice_gpu_check_fake"
