#!/usr/bin/env bash
# Runs the 8-bit GEMV of src/tensor/cuda/cuda_linear_q8.cu (q8_gemv) in the host emulation of
# q8_emu.cpp under AddressSanitizer: x staged (plain and RMS-normalised) and read from global
# memory, 1, 2 and 8 rows of x, the three shapes (rows a warp, steps a batch), K below one
# warp step, ending mid-step and over several, groups of 32/64/128 with bf16/f16/f32 scales,
# the three epilogues, layers stacked with a store into a cache. Each case's rel_l2 against a
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
[ $fail = 0 ] && echo "all cases within 1e-5, every output written and stored" || { echo "FAIL"; exit 1; }
