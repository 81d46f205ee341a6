#!/usr/bin/env bash
# Runs VibeVoice's decode attention v2 (k_vv_att_dec, cuda_vibevoice.cu, CHOIR_VV_ATT_V2=1) in the
# host emulation of vv_dec_emu.cpp on decode-step cases (1, 3, 16 rows; f32 and bf16 K/V;
# contiguous and paged; positions pos0 + i and scattered from memory; 7:1 heads of 128 and
# 2:1 / 8:1 heads of 64; splits of 16 .. 512 keys, inside a page and across pages; the last block
# combining or the combine launch; hundreds to ~27,000 keys) and prints each relative L2 against
# a double reference; fails when one passes 1e-5 (f32) or 1e-5 (bf16: the same values widened),
# leaves an output unwritten or a counter not back at 0. Each case runs v2 and then CHOIR_VV_ATT_V2_DEEP's
# deeper ring (bf16: 4 tiles a warp, 2 a step; f32: 3 tiles) on the same inputs (v2_rel_l2, rel_l2)
# and fails unless the two outputs are the same bit for bit (v2_differ 0); then the tensor-core
# kernel (CHOIR_VV_ATT_TC) on the bf16 cases of 128-value heads, within the same 1e-5. Needs g++ with C++20 and python3; about
# ten minutes on 2 cores (15 beside an ASan build). Not a ctest: run it before a device call when the kernel changes.
#   bash tests/cuda/emu/run_vv_dec_emu.sh [WORK_DIR]
set -eu
SRC=$(cd "$(dirname "$0")/../../.." && pwd)
OUT=${1:-/tmp/vv-dec-emu}
mkdir -p "$OUT"
python3 - "$SRC/src/tensor/cuda/cuda_vibevoice.cu" "$OUT/dec_kern.inc" <<'PY'
import sys
s = open(sys.argv[1]).read()
open(sys.argv[2], 'w').write(s[s.index('#define VV_DEC_WARPS'):s.index('/* --- prefill attention')])
PY
g++ -std=c++20 -O2 -w -I"$OUT" -I"$SRC/tests/cuda/emu" -include mutex -o "$OUT/vv_dec_emu" "$SRC/tests/cuda/emu/vv_dec_emu.cpp" -lpthread
fail=0
# T POS0 HEADS KV_HEADS D BF16 PAGED SPLIT FOLD SCATTERED Q_AMPLITUDE
for c in "1 300 28 4 128 0 0 64 1 0 2" "1 300 28 4 128 1 1 64 1 0 2" "3 700 28 4 128 1 1 96 1 1 2" \
         "3 700 28 4 128 0 0 256 0 0 2" "16 120 14 2 128 0 1 48 1 1 2" "16 40 28 4 128 1 1 32 0 1 2" \
         "1 0 28 4 128 0 0 64 1 0 2" "2 4990 28 4 128 1 1 320 1 0 8" "4 200 4 2 64 0 1 48 1 1 2" \
         "3 150 8 1 64 1 0 64 1 0 2" "5 333 16 2 128 0 1 128 0 1 2" "1 27000 28 4 128 1 1 1024 1 0 2" \
         "1 27000 7 1 128 0 0 416 1 0 2" "16 300 28 4 128 1 0 64 1 0 2"; do
  # shellcheck disable=SC2086
  line=$("$OUT/vv_dec_emu" $c 1)
  echo "$line"
  echo "$line" | awk '{for (i = 1; i <= NF; i++) { if ($i == "rel_l2") e = $(i + 1); if ($i == "v2_rel_l2") e2 = $(i + 1);
                       if ($i == "v2_differ") d = $(i + 1) }
                       if ($NF != 0 || $(NF - 2) != 0 || d != 0 || e + 0 > 1e-5 || e2 + 0 > 1e-5) exit 1}' || fail=1
done
# The tensor-core kernel (k_vv_att_dec_tc, CHOIR_VV_ATT_TC) on the bf16 cases of 128-value heads,
# held to the same 1e-5 (q and the probabilities carried as two bf16 parts each).
for c in "1 300 28 4 128 1 1 64 1 0 2" "3 700 28 4 128 1 1 96 1 1 2" "16 40 28 4 128 1 1 32 0 1 2" \
         "2 4990 28 4 128 1 1 320 1 0 8" "5 333 16 2 128 1 1 128 0 1 2" "1 0 28 4 128 1 0 64 1 0 2" \
         "3 150 8 1 128 1 0 48 1 1 2" "4 200 6 2 128 1 1 48 1 1 2" "16 300 28 4 128 1 0 64 1 0 2" \
         "1 27000 28 4 128 1 1 1024 1 0 2"; do
  # shellcheck disable=SC2086
  line=$("$OUT/vv_dec_emu" $c 2)
  echo "$line"
  echo "$line" | awk '{for (i = 1; i <= NF; i++) if ($i == "rel_l2") e = $(i + 1)
                       if ($NF != 0 || $(NF - 2) != 0 || e + 0 > 1e-5) exit 1}' || fail=1
done
[ $fail = 0 ] && echo "all cases within 1e-5, deep = v2 bit for bit, every output written, counters back at 0" || { echo "FAIL"; exit 1; }
