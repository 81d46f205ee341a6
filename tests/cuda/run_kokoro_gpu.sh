#!/usr/bin/env bash
# Builds the standalone CUDA project's choir_kokoro_gpu_check and runs it:
# the cuda_audio kernels and the vocoder operations against the CPU, then
# Kokoro's decoder + generator (the one backend forward, kokoro_decoder.c) on
# a CUDA backend against the CPU backend, alone and batched, f32 and bf16,
# then the front (LSTMs, F0 / N through the backend forward, ALBERT, the
# batched front). For a GPU machine without choir's Debian libraries; run from
# the repository root:   bash tests/cuda/run_kokoro_gpu.sh [BUILD_DIR]   (default /tmp/kb)
# Output also goes to $OUT/kokoro_gpu_check.txt when OUT is set. Exit status
# is the check's (0 all pass, 1 a failure, 77 no GPU visible; 2 build failed).
set -u
BUILD=${1:-/tmp/kb}
JOBS=${JOBS:-16}
if [ ! -f tests/cuda/CMakeLists.txt ]; then
    echo "run_kokoro_gpu.sh: run me from the repository root" >&2
    exit 2
fi
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
t0=$SECONDS
cmake -S tests/cuda -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release >"$BUILD.configure.log" 2>&1 ||
    { tail -30 "$BUILD.configure.log"; exit 2; }
cmake --build "$BUILD" -j"$JOBS" --target choir_kokoro_gpu_check >"$BUILD.build.log" 2>&1 ||
    { grep -E "error|Error" "$BUILD.build.log" | head -40; exit 2; }
echo "built in $((SECONDS - t0)) s"
log=${OUT:-/tmp}/kokoro_gpu_check.txt
timeout 240 "$BUILD/cuda/choir_kokoro_gpu_check" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
echo "choir_kokoro_gpu_check: exit $rc"
exit "$rc"
