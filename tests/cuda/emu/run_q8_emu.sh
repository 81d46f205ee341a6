#!/usr/bin/env bash
# Runs the 8-bit GEMVs of src/tensor/cuda/cuda_linear_q8.cu (q8_gemv, q8_stream) in the host emulation of
# q8_emu.cpp under AddressSanitizer: x staged (plain and RMS-normalised) and read from global
# memory, 1, 2 and 8 rows of x, the three shapes (rows a warp, steps a batch), K below one
# warp step, ending mid-step and over several, groups of 32/64/128 with bf16/f16/f32 scales,
# the three epilogues, layers stacked with a store into a cache; q8_stream (shapes 4-6) with grids
# of 1-5 blocks (warps taking many rows, or fewer rows than warps) and column pieces (shape 8: x
# staged in one pass, plain and normalised, 1-8 rows of x, pieces and padding), each also
# against shape 1 (equal bit for bit in one piece); the 8-bit dequantize into bf16 against
# bf16(fma(s, q, b)) of each code. Each case's rel_l2 against a
# double reference must stay within 1e-5, every output written, every stored row equal to
# its output. Needs g++ with C++20 and python3; a few minutes on 2 cores. Not a ctest (slow,
# and a host emulation of device code): run it before a device call when the kernel changes.
#   bash tests/cuda/emu/run_q8_emu.sh [WORK_DIR]
set -eu
SRC=$(cd "$(dirname "$0")/../../.." && pwd)
OUT=${1:-/tmp/q8-emu}
mkdir -p "$OUT"
python3 - "$SRC/src/tensor/cuda/cuda_linear_q8.cu" "$OUT/q8_kern.inc" <<'PY'
import re, sys
s = open(sys.argv[1]).read()
h = open(sys.argv[1].replace('cuda_linear_q8.cu', 'cuda_internal.h')).read()
e = h[h.index("/* --- the GEMVs' epilogue"):h.index("/* --- end of the GEMVs' epilogue")]
t = e + s[s.index('struct q8_args {'):s.index('/* --- host side')]
t = re.sub(r'__device__ __forceinline__ uint4 q8_ld\(.*?\n}\n', '', t, flags=re.S)
t = t.replace('extern __shared__ float4 q8_xs4[];', 'float4 *q8_xs4 = g_dyn.data();')
assert 'asm(' not in t
open(sys.argv[2], 'w').write(t)
PY
g++ -std=c++20 -O1 -g -w -fsanitize=address -I"$OUT" -I"$SRC/tests/cuda/emu" -o "$OUT/q8_emu" \
    "$SRC/tests/cuda/emu/q8_emu.cpp" -lpthread
fail=0
# SHAPE M K G SB XS NORM EPILOGUE ROWS...
for c in "1 1 320 64 bf16 1 0 0 263" "1 1 1152 64 bf16 1 0 1 263" "2 1 1152 64 bf16 1 0 2 263" \
         "3 1 1152 64 bf16 1 0 0 263" "1 2 1152 32 f16 1 0 0 70" "1 8 4608 128 f32 0 0 1 37" \
         "3 8 1152 64 bf16 0 0 0 45" "1 1 1152 64 bf16 1 1 0 63 30 31" "2 3 1152 64 bf16 1 1 0 63 30 31" \
         "3 8 576 64 bf16 1 1 0 17 9 40" "1 1 2560 64 bf16 1 1 0 20 20"; do
  # shellcheck disable=SC2086
  line=$("$OUT/q8_emu" $c)
  echo "$line"
  echo "$line" | awk '{for (i = 1; i <= NF; i++) { if ($i == "rel_l2") e = $(i + 1); if ($i == "store_mismatch") s = $(i + 1) }
                       if ($NF != 0 || s != 0 || e + 0 > 1e-5) exit 1}' || fail=1
done
# Shapes 4-8 (q8_stream; 7 is 4's kernel within 64 registers, 8 is 7 with x staged in one pass), each also against shape 1 on the same data: BLOCKS PIECE SHAPE M K ...
# (PIECE 0: all of K, where the outputs must equal shape 1's bit for bit; else pieces of that
# many columns, the later ones adding into y).
for c in "1 0 4 1 320 64 bf16 1 0 0 263" "3 0 5 1 1152 64 bf16 1 0 1 263" "1 0 6 2 1152 32 f16 1 0 0 70" \
         "2 1280 4 8 4608 128 f32 0 0 1 37" "1 1536 5 8 4608 64 bf16 0 0 0 37" "2 0 5 1 1152 64 bf16 1 1 0 63 30 31" \
         "1 0 4 3 1152 64 bf16 1 1 0 63 30 31" "1 0 6 8 576 64 bf16 1 1 0 17 9 40" "5 0 5 1 2560 64 bf16 1 1 0 20 20" \
         "2 0 4 2 1152 64 bf16 1 0 2 263" "1 640 6 2 1920 32 bf16 0 0 1 40" "3 1280 7 1 4608 64 bf16 0 0 0 37" \
         "2 0 7 1 1152 64 bf16 1 1 0 63 30 31" "3 1280 8 1 4608 64 bf16 0 0 0 37" "2 0 8 1 1152 64 bf16 1 1 0 63 30 31" \
         "1 0 8 1 320 64 bf16 1 0 0 263" "2 1280 8 8 4608 128 f32 0 0 1 37" "1 0 8 3 1152 64 bf16 1 1 0 63 30 31" \
         "5 0 8 1 2560 64 bf16 1 1 0 20 20" "2 0 8 2 1152 64 bf16 1 0 2 263" "1 640 8 2 1920 32 bf16 0 0 1 40"; do
  # shellcheck disable=SC2086
  set -- $c
  b=$1 p=$2
  shift 2
  if [ "$p" = 0 ]; then line=$(Q8S_BLOCKS=$b "$OUT/q8_emu" "$@"); else line=$(Q8S_BLOCKS=$b Q8S_PIECE=$p "$OUT/q8_emu" "$@"); fi
  echo "$line"
  echo "$line" | awk -v whole="$p" '{for (i = 1; i <= NF; i++) { if ($i == "rel_l2") e = $(i + 1); if ($i == "store_mismatch") s = $(i + 1);
                                        if ($i == "differ") d = $(i + 1) }
                       if ($NF != 0 || s != 0 || e ~ /nan/ || e + 0 > 1e-5 || (whole == 0 && d != 0)) exit 1}' || fail=1
done
# q8_dequant_bf16 (CHOIR_Q8_DEQUANT): every value equal to bf16(fma(s, q, b)); grids that cover
# the chunks and grids that stride over them.
for c in "37 1152 64 bf16 1" "37 1152 64 bf16 200" "5 4608 128 f32 2" "9 640 32 f16 3"; do
  # shellcheck disable=SC2086
  "$OUT/q8_emu" dq $c || fail=1
done
[ $fail = 0 ] && echo "all cases within 1e-5, every output written and stored" || { echo "FAIL"; exit 1; }
