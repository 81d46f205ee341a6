#!/usr/bin/env bash
# Runs the mma GEMV of src/tensor/cuda/cuda_gemv_mma.cu (gemv_mma_bf16, gemv_mma_q8 and the norm
# before them, CHOIR_GEMV_MMA=1) in the host emulation of gemv_mma_emu.cpp under
# AddressSanitizer: bf16 and 8-bit weights (groups of 64 and 128, bf16/f16/f32 scales), 1, 2, 8,
# 9 and 32 rows of x, odd N, K = 3584 and 18944 (VibeVoice 7B's widths) and small ones (K below
# one warp's steps, ending mid-step), no norm, RMS (fused into the product up to 24 rows, through
# gemv_mma_rms_prep above) and layer norm, the three epilogues, layers stacked with a store into
# a cache. Each case's rel_l2 against a double reference must stay
# within 1e-5 (x is carried as two bf16 halves: about 2^-16 a value), every output written
# and no row past M touched, every stored row equal to its output, and the batch invariance
# hold: the first rows of the runs over 1, 8, M and 32 rows of the same x equal bit for bit.
# The 8-bit cases of up to 8 rows run with each launch shape (CHOIR_GEMV_MMA_Q8_SHAPE 0-2).
# simt_rel_l2 is the existing SIMT kernels' formula against the same reference (for scale).
# (GELU cases use bf16 weights or a layer norm: the random 8-bit weights' negative biases make
# every RMS-normed output large and negative, GELU then 0 and rel_l2 0/0.)
# Needs g++ with C++20 and python3; about ten minutes on 2 cores. Not a ctest (slow, and a
# host emulation of device code).
#   bash tests/cuda/emu/run_gemv_mma_emu.sh [WORK_DIR]
set -eu
SRC=$(cd "$(dirname "$0")/../../.." && pwd)
OUT=${1:-/tmp/gemv-mma-emu}
mkdir -p "$OUT"
python3 - "$SRC/src/tensor/cuda" "$OUT/gemv_mma_kern.inc" <<'PY'
import re, sys
d = sys.argv[1]
s = open(d + '/cuda_gemv_mma.cu').read()
h = open(d + '/cuda_internal.h').read()
p = open(d + '/cuda_gemv_mma.h').read()
e = h[h.index("/* --- the GEMVs' epilogue"):h.index("/* --- end of the GEMVs' epilogue")]
n = h[h.index("/* The sum of v over the block"):h.index("/* Fills err from a CUDA runtime status")]
a = p[p.index("struct norm_linear_args {"):p.index("/* Whether the switch is on")]
k = s[s.index("/* --- device code"):s.index("/* --- host side")]
k = re.sub(r'__device__ __forceinline__ uint4 mg_ld\(.*?\n}\n', '', k, flags=re.S)
t = e + n + a + k
for d in ('GEMV_MMA_WARPS', 'GEMV_MMA_RMS_ROWS'):
    t += "#define %s %s\n" % (d, re.search(r'#define %s (\d+)' % d, s).group(1))
assert 'asm(' not in t
open(sys.argv[2], 'w').write(t)
PY
g++ -std=c++20 -O1 -g -w -fsanitize=address -I"$OUT" -I"$SRC/tests/cuda/emu" -o "$OUT/gemv_mma_emu" \
    "$SRC/tests/cuda/emu/gemv_mma_emu.cpp" -lpthread
fail=0
# KIND M K G SB NORM EPILOGUE ROWS...
for c in "bf16 1 3584 64 bf16 0 0 37" "bf16 8 3584 64 bf16 0 1 37" "bf16 9 3584 64 bf16 0 2 45" \
         "bf16 32 3584 64 bf16 0 0 33" "bf16 2 18944 64 bf16 0 1 17" "bf16 8 18944 64 bf16 0 0 17" \
         "bf16 1 40 64 bf16 0 0 51" "bf16 8 264 64 bf16 rms 0 63 30 31" "bf16 9 72 64 bf16 ln 2 19 23" \
         "bf16 32 3584 64 bf16 rms 0 40 9 9" "bf16 2 2056 64 bf16 rms 0 21" "bf16 17 3584 64 bf16 rms 1 33" \
         "q8 1 3584 64 bf16 0 0 37" "q8 8 3584 64 bf16 0 1 37" "q8 9 3584 128 f16 0 2 45" \
         "q8 32 3584 64 f32 0 0 33" "q8 2 18944 64 bf16 0 1 17" "q8 8 18944 128 bf16 0 0 17" \
         "q8 1 64 64 bf16 0 0 51" "q8 8 640 64 bf16 rms 0 63 30 31" "q8 9 256 128 f32 ln 2 19 23" \
         "q8 32 3584 64 bf16 rms 0 40 9 9" "q8 17 1152 64 bf16 0 1 70" "q8 1 3584 64 bf16 rms 1 37"; do
  # 8-bit weights and up to 8 rows: each launch shape (CHOIR_GEMV_MMA_Q8_SHAPE).
  set -- $c
  shapes=0
  [ "$1" = q8 ] && [ "$2" -le 8 ] && shapes="0 1 2"
  for sh in $shapes; do
    # shellcheck disable=SC2086
    line=$(CHOIR_GEMV_MMA_Q8_SHAPE=$sh "$OUT/gemv_mma_emu" $c)
    [ "$shapes" = 0 ] || line="shape $sh: $line"
    echo "$line"
    echo "$line" | awk '{for (i = 1; i <= NF; i++) { if ($i == "rel_l2") e = $(i + 1); if ($i == "store_mismatch") s = $(i + 1);
                                                     if ($i == "invariance_rows_differ") d = $(i + 1) }
                         if ($NF != 0 || s != 0 || d != 0 || e ~ /nan/ || e + 0 > 1e-5) exit 1}' || fail=1
  done
done
[ $fail = 0 ] && echo "all cases within 1e-5, every output written and stored, rows equal whatever M" || { echo "FAIL"; exit 1; }
