#!/usr/bin/env bash
# ctest: labels=slow;nosan cost=100
# Whisper's GPU code (src/models/whisper/whisper_cuda*.c) on a machine without
# a GPU: tests/cuda/whisper_gpu_check.c against tests/cuda/fake/fake_cuda.c, an
# emulation of choir/cuda.h on the host (CPU kernels, graphs recorded and
# replayed). Every check must pass: encoder, decoder logits at batch 1 and 4,
# graph replay equal to direct steps, greedy and beam decoding equal to the
# CPU's, word timestamps from the device's alignment pass equal to the CPU's.
# Objects are cached in the build tree (first run ~1 min on 2 cores).
set -eu
SRC=${CHOIR_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
OUT=${CHOIR_BUILD_DIR:-/tmp}/whisper-gpu-fake
cd "$SRC"
log=$(bash tests/cuda/fake/run_fake.sh "$OUT" 2>&1) || { echo "$log"; echo "FAIL: run_fake.sh"; exit 1; }
echo "$log" | grep -E '^(PASS|FAIL|INFO)|checks passed'
if echo "$log" | grep -q '^FAIL'; then exit 1; fi
echo "$log" | grep -qE '^([0-9]+) of \1 checks passed'
