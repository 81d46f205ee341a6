#!/usr/bin/env bash
# Runs the ragged operations of src/tensor/cuda/cuda_ragged.cu (choir_cuda_attention_ragged and
# choir_cuda_transpose_lens, Kokoro's CHOIR_KOKORO_FRONT_BATCH=1) in the host emulation of
# ragged_emu.cpp: the file's host code as written, its launches as host threads, the strided
# batched products as column-major loops. The scratch budget is cut so that a case runs several
# groups. Fails when an attention output is further than 1e-5 from a double reference, a column
# past the heads is written, or a transpose value (or a zero past a length) is wrong. Under a
# minute on 2 cores. Not a ctest: run it before a device call when the file changes.
#   bash tests/cuda/emu/run_ragged_emu.sh [WORK_DIR]
set -eu
SRC=$(cd "$(dirname "$0")/../../.." && pwd)
OUT=${1:-/tmp/ragged-emu}
mkdir -p "$OUT"
python3 - "$SRC/src/tensor/cuda/cuda_ragged.cu" "$OUT/kern.inc" <<'PY'
import re, sys
s = open(sys.argv[1]).read()
s = s[s.index('#define AR_THREADS'):]
s = s.replace('#define AR_SCRATCH ((size_t)256 << 20)',
              '#define AR_SCRATCH ((size_t)3 * 2 * 40 * (4 * 16 + 40) * sizeof(float))')
s = s.replace('__shared__ float red[32];', 'float *red = red_shared();')
s = s.replace('__shared__ float tile[32][33];', 'float (*tile)[33] = tile_shared();')
# k<<<grid, block, 0, cu->stream>>>(args) -> LAUNCH(grid, block, k(args))
out, i = [], 0
while True:
    m = re.search(r'(\w+)<<<(.+?), (\w+), 0, cu->stream>>>\(', s[i:], re.S)
    if not m:
        out.append(s[i:]); break
    a = i + m.start(); b = i + m.end()
    depth, j = 1, b
    while depth:
        depth += {'(': 1, ')': -1}.get(s[j], 0); j += 1
    out.append(s[i:a])
    out.append('LAUNCH(%s, %s, %s(%s))' % (m.group(2), m.group(3), m.group(1), s[b:j - 1]))
    i = j
open(sys.argv[2], 'w').write(''.join(out))
PY
cat > "$OUT/shared.h" <<'H'
// shared memory of the block being run (one block at a time)
static float g_red[32];
static float g_tile[32][33];
static inline float *red_shared() { return g_red; }
static inline float (*tile_shared())[33] { return g_tile; }
H
sed -i '1i #include "shared.h"' "$OUT/kern.inc"
g++ -std=c++20 -O1 -w -I"$OUT" -I"$SRC/tests/cuda/emu" -o "$OUT/ragged_emu" "$SRC/tests/cuda/emu/ragged_emu.cpp" -lpthread
"$OUT/ragged_emu"
