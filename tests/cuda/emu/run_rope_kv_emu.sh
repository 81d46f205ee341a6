#!/usr/bin/env bash
# Runs VibeVoice's decode-step rope and cache rows (k_vv_rope_kv, cuda_vibevoice.cu,
# CHOIR_VV_ROPE_KV=1) in the host emulation of rope_kv_emu.cpp against plain loops of the
# operations it replaces (the rotations of q and k, the scatters of k and v), on 1, 3 and 16
# rows, f32 and bf16 destinations, paged and contiguous, per-row slots and slot NULL, the 7B
# model's 28/4 heads of 128, the 1.5B model's 12/2, 4/2 of 64 and an odd head count; fails unless
# every q, k and cache value is the same bit for bit. Needs g++ with C++20 and python3; a few
# seconds. Not a ctest: run it before a device call when the kernel changes.
#   bash tests/cuda/emu/run_rope_kv_emu.sh [WORK_DIR]
set -eu
SRC=$(cd "$(dirname "$0")/../../.." && pwd)
OUT=${1:-/tmp/rope-kv-emu}
mkdir -p "$OUT"
python3 - "$SRC/src/tensor/cuda/cuda_vibevoice.cu" "$SRC/src/tensor/cuda/cuda_internal.h" "$OUT" <<'PY'
import sys
s = open(sys.argv[1]).read()
h = open(sys.argv[2]).read()
out = sys.argv[3]
open(out + '/rkv_defs.inc', 'w').write(s[s.index('#define VV_RKV_THREADS'):s.index('/* One pair rotated')])
open(out + '/rkv_kern.inc', 'w').write(s[s.index('/* Row r of a destination'):s.index('\nextern "C" {')])
a = h.index('__device__ __forceinline__ void cuda_rope_angles')
open(out + '/rkv_angles.inc', 'w').write(h[a:h.index('\n}\n', a) + 3])
PY
g++ -std=c++20 -O2 -w -ffp-contract=off -I"$OUT" -I"$SRC/tests/cuda/emu" -I"$SRC/include" -I"$SRC/src" \
    -o "$OUT/rope_kv_emu" "$SRC/tests/cuda/emu/rope_kv_emu.cpp" -lpthread
fail=0
# T HEADS KV_HEADS D BF16 PAGED SLOTS NULL_SLOT
for c in "1 28 4 128 0 0 0 0" "1 28 4 128 1 1 0 1" "1 28 4 128 0 1 0 0" "3 28 4 128 1 1 0 0" \
         "3 28 4 128 0 0 1 0" "16 28 4 128 0 1 0 1" "16 28 4 128 1 1 0 0" "16 12 2 128 1 0 0 0" \
         "3 4 2 64 0 1 0 0" "5 13 1 96 1 0 1 0" "2 28 4 1024 0 1 0 0"; do
  # shellcheck disable=SC2086
  "$OUT/rope_kv_emu" $c || fail=1
done
[ $fail = 0 ] && echo "all cases bit for bit" || { echo "FAIL"; exit 1; }
