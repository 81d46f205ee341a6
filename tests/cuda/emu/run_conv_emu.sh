#!/usr/bin/env bash
# Runs the implicit-GEMM convolution (k_ig_conv of cuda_conv.cu in every configuration its options
# pick, and the prepass k_ig_prepass) in the host emulation of conv_emu.cpp on small cases that
# reach every branch (the three precisions, the fused AdaIN + Snake or none, a residual or none,
# Cin not a multiple of a chunk, Cout past one 128-row tile, frames past one tile and short of
# one, kernels 1 to 11, dilations 1 to 5, pieces of different lengths). Fails when the wide shape
# or the prepass path (two or three stages, default or wide shape) differs from the default
# kernel in any bit, when a configuration is further than the bound from a double reference over
# the same rounded operands (1e-5; only the f32 accumulation differs there; 1e-3 with Snake's sin
# by the SFU) or leaves an output unwritten; and, with the pre-activation, when the epilogue's
# AdaIN statistics (every configuration writes them, over lengths past Tout, shorter than the
# output's, and full) are further than 1e-12 (relative to the sum of magnitudes) from double
# sums of the values the configuration stored, leave a slot unwritten, or the kernel with them
# stores other bits than the kernel without them. Needs g++ with C++20; several minutes on 2
# cores (~5 minutes a case beside a build). Not
# a ctest (slow, and a host emulation of device code): run it before a device call when the
# kernels change.
#   bash tests/cuda/emu/run_conv_emu.sh [WORK_DIR]
set -eu
SRC=$(cd "$(dirname "$0")/../../.." && pwd)
OUT=${1:-/tmp/conv-emu}
mkdir -p "$OUT"
g++ -std=c++20 -O1 -w -I"$SRC/tests/cuda/emu" -I"$SRC/src" -o "$OUT/conv_emu" \
  "$SRC/tests/cuda/emu/conv_emu.cpp" -lpthread
fail=0
# MODE PRO B CIN COUT T K DIL RESIDUAL
for c in "0 1 2 24 40 300 7 3 1" "0 0 1 40 140 530 3 1 0" "0 1 1 16 128 260 11 5 0" \
         "1 1 2 20 40 300 11 5 1" "1 0 1 8 130 100 1 1 0" "1 1 1 24 128 520 3 1 1" \
         "2 1 2 20 40 300 7 3 1" "2 0 1 12 140 270 11 5 0" "2 1 1 8 128 129 3 1 0" \
         "0 1 2 24 136 170 5 1 1"; do
  # shellcheck disable=SC2086
  line=$("$OUT/conv_emu" $c)
  echo "$line"
  echo "$line" | awk '{ for (i = 1; i <= NF; i++) if ($i == "in") { d = $(i + 1); break }
                        bad = d != 0 || $NF != 0
                        for (i = 1; i < NF; i++) {
                          if ($i == "stats_err" && $(i + 1) + 0 > 1e-12) bad = 1
                          if ($i == "stats_unset" && $(i + 1) != 0) bad = 1
                          if ($i == "nostats_differ" && $(i + 1) != 0) bad = 1 }
                        for (i = 1; i < NF; i++) if ($i ~ /^(v1|wide|fs|pre)/ && $(i + 1) ~ /e/) {
                          lim = $i ~ /fast/ ? 1e-3 : 1e-5; if ($(i + 1) + 0 > lim) bad = 1 }
                        exit bad }' || fail=1
done
[ $fail = 0 ] && echo "all cases: wide and prepass = v1 bit for bit, within 1e-5 of the reference (the SFU-sin configurations 1e-3), every output written, the AdaIN statistics within 1e-12, every slot written, the same bits without them" || { echo "FAIL"; exit 1; }
