#!/usr/bin/env bash
# Runs the persistent BiLSTM kernel (k_lstm_persist of cuda_audio.cu, CHOIR_KOKORO_LSTM_PERSIST=1)
# in the host emulation of lstm_emu.cpp on cases that reach every branch: one piece, pieces of
# different lengths (1 to T), more pieces than one staged chunk of 32, hidden sizes 32 and 64.
# Fails when an output is further than 1e-5 from a double reference or a value past a piece's
# length is written. Needs g++ with C++20; about a minute on 2 cores (8,192 to 16,384 host threads
# a case). Not a ctest (a host emulation of device code): run it before a device call when the
# kernel changes.
#   bash tests/cuda/emu/run_lstm_emu.sh [WORK_DIR]
set -eu
SRC=$(cd "$(dirname "$0")/../../.." && pwd)
OUT=${1:-/tmp/lstm-emu}
mkdir -p "$OUT"
python3 - "$SRC/src/tensor/cuda/cuda_audio.cu" "$OUT/kern.inc" <<'PY'
import sys
s = open(sys.argv[1]).read()
t = s[s.index('#define LP_UNITS'):s.index('/* LP_END */')]
t = t.replace('extern __shared__ float lp_smem[];', 'float *lp_smem = emu_smem();')
open(sys.argv[2], 'w').write(t)
PY
g++ -std=c++20 -O1 -w -I"$OUT" -o "$OUT/lstm_emu" "$SRC/tests/cuda/emu/lstm_emu.cpp" -lpthread
fail=0
# B T H SEED
for c in "1 9 32 1" "3 17 32 2" "36 12 32 3" "5 11 64 4"; do
  # shellcheck disable=SC2086
  "$OUT/lstm_emu" $c || fail=1
done
[ $fail = 0 ] && echo "all cases within 1e-5 of the double reference, nothing written past a length" || { echo "FAIL"; exit 1; }
