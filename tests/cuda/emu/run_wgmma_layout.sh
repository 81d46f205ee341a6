#!/usr/bin/env bash
# Checks the index math of the flash prefill's third kernel (k_vv_flash_wg_prefill,
# cuda_vv_flash_wg.cu, CHOIR_VV_FLASH_WG=1; its pieces in cuda_wgmma.h) on the host against
# the PTX ISA's documented wgmma layouts: the 128-byte swizzle, the tile loaders, every
# matrix descriptor the kernel builds walked through the ISA's canonical layouts, the
# accumulator and A register fragments (S -> P in registers), the causal mask and tile
# skips, and one tile's S and O += P V through a model of wgmma. warp_emu.h emulates
# mma.sync, not wgmma, so this does not run the kernel; a GPU run (choir_vibevoice_gpu_check,
# "flash wg" cases) does. Needs g++; a few seconds. Not a ctest.
#   bash tests/cuda/emu/run_wgmma_layout.sh [WORK_DIR]
set -eu
SRC=$(cd "$(dirname "$0")/../../.." && pwd)
OUT=${1:-/tmp/wgmma-layout}
mkdir -p "$OUT"
g++ -std=c++17 -O2 -Wall -Wextra -Werror -I"$SRC/src" -I"$SRC/include" -o "$OUT/wgmma_layout_test" \
    "$SRC/tests/cuda/emu/wgmma_layout_test.cpp"
"$OUT/wgmma_layout_test"
