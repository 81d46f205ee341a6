#!/usr/bin/env bash
# Runs the bf16 flash attention kernels (cuda_flash.cu, kernels 1-4) in the host emulation of
# flash_emu.cpp on cases like backend_gpu_check's all-bf16 ones (padding aside), then
# VibeVoice's flash prefills (cuda_vv_flash.cu, both kernels) in vv_flash_emu.cpp on prefill chunks (an
# offset pos0, a last tile cut short, grouped heads, shuffled pages, D 64 and 128, 4 and 8
# warps), and prints each relative L2 against a double reference; fails when one passes 1e-2
# or leaves an output unwritten. Needs g++ with C++20 and python3; about a minute on 2 cores. Not a ctest (slow, and
# a host emulation of device code): run it before a device call when the kernels change.
#   bash tests/cuda/emu/run_flash_emu.sh [WORK_DIR]
set -eu
SRC=$(cd "$(dirname "$0")/../../.." && pwd)
OUT=${1:-/tmp/flash-emu}
mkdir -p "$OUT"
python3 - "$SRC/src/tensor/cuda/cuda_flash.cu" "$OUT/kern.inc" <<'PY'
import re, sys
s = open(sys.argv[1]).read()
t = s[s.index('#define FA_KT'):s.index('template <int D, int MT, int WARPS>\nstatic int flash2_launch(')]
names = {'pack_bf16', 'mma_bf16', 'ldmatrix_x4_trans', 'cp_async16', 'cp_async_commit', 'cp_async_wait',
         'ex2_ftz', 'ldmatrix_x4'}
lines, out, i = t.split('\n'), [], 0
while i < len(lines):
    m = re.match(r'__device__ __forceinline__ \w+ (\w+)\(', lines[i])
    if m and m.group(1) in names:
        if out and out[-1].startswith('template <int N>'):
            out.pop()
        if not lines[i].rstrip().endswith('}'):
            while lines[i].rstrip() != '}':
                i += 1
        i += 1
        continue
    out.append(lines[i])
    i += 1
open(sys.argv[2], 'w').write('\n'.join(out))
PY
python3 - "$SRC/src/tensor/cuda/cuda_vv_flash.cu" "$OUT/vv_kern.inc" <<'PY'
import sys
s = open(sys.argv[1]).read()
open(sys.argv[2], 'w').write(s[s.index('#define VV_FA_KT'):s.index('/* Rows 0 .. n_keys - 1')])
PY
g++ -std=c++20 -O1 -w -I"$OUT" -o "$OUT/flash_emu" "$SRC/tests/cuda/emu/flash_emu.cpp" -lpthread
g++ -std=c++20 -O1 -w -I"$OUT" -o "$OUT/vv_flash_emu" "$SRC/tests/cuda/emu/vv_flash_emu.cpp" -lpthread
fail=0
for k in 1 2 3 4; do
  for c in "130 200 2 0 1" "300 600 1 0 32" "200 129 1 1 1" "200 200 2 1 32" "37 100 1 1 1"; do
    # shellcheck disable=SC2086
    line=$("$OUT/flash_emu" $c $k)
    echo "$line"
    echo "$line" | awk '{for (i = 1; i <= NF; i++) if ($i == "rel_l2") e = $(i + 1); if ($NF != 0 || e + 0 > 1e-2) exit 1}' || fail=1
  done
done
# T POS0 HEADS KV_HEADS D PAGED WARPS Q_AMPLITUDE [V2]; the V2 1 cases run the second kernel
# (k_vv_flash2_prefill: 128-row blocks, 32 rows a warp): a chunk shorter than one warp's rows, a
# block cut inside its second warp and inside a warp's second slice, two blocks, paged and not.
for c in "70 100 4 2 128 0 4 2" "70 100 4 2 128 1 4 2" "130 0 2 1 128 1 8 2" "37 200 3 1 64 1 4 2" \
         "100 33 2 2 64 0 8 1" "50 90 2 1 128 1 4 16" \
         "17 0 2 1 128 0 4 2 1" "70 100 4 2 128 0 4 2 1" "150 260 2 1 128 1 4 2 1" "300 0 2 2 128 0 4 2 1" \
         "37 200 3 1 64 1 4 2 1" "130 33 2 1 64 0 4 1 1" "50 90 2 1 128 1 4 16 1"; do
  # shellcheck disable=SC2086
  line=$("$OUT/vv_flash_emu" $c)
  echo "$line"
  echo "$line" | awk '{for (i = 1; i <= NF; i++) if ($i == "rel_l2") e = $(i + 1); if ($NF != 0 || e + 0 > 1e-2) exit 1}' || fail=1
done
[ $fail = 0 ] && echo "all cases within 1e-2, every output written" || { echo "FAIL"; exit 1; }
