#!/usr/bin/env bash
# Builds the standalone CUDA project's choir_vibevoice_gpu_check and runs it
# twice: the check (VibeVoice-ASR on the GPU against the CPU at reduced
# dimensions, one line per stage; 90-s limit) and its --bench mode at the
# 7B model's widths with 4 LM layers, 10 minutes of audio, 32 decode steps
# (90-s limit). For a GPU machine without choir's Debian libraries; run from
# the repository root:   bash tests/cuda/run_vibevoice_gpu.sh [BUILD_DIR]   (default /tmp/vb)
# Output also goes to $OUT/vibevoice_gpu_check.txt and $OUT/vibevoice_gpu_bench.txt
# when OUT is set. Exit status: the check's (0 all pass, 1 a failure, 77 no GPU).
set -u
BUILD=${1:-/tmp/vb}
JOBS=${JOBS:-16}
if [ ! -f tests/cuda/CMakeLists.txt ]; then
    echo "run_vibevoice_gpu.sh: run me from the repository root" >&2
    exit 2
fi
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
t0=$SECONDS
cmake -S tests/cuda -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release >"$BUILD.configure.log" 2>&1 ||
    { tail -30 "$BUILD.configure.log"; exit 2; }
cmake --build "$BUILD" -j"$JOBS" --target choir_vibevoice_gpu_check >"$BUILD.build.log" 2>&1 ||
    { grep -E "error|Error" "$BUILD.build.log" | head -40; exit 2; }
echo "built in $((SECONDS - t0)) s"
dir=${OUT:-/tmp}
timeout 90 "$BUILD/cuda/choir_vibevoice_gpu_check" 2>&1 | tee "$dir/vibevoice_gpu_check.txt"
rc=${PIPESTATUS[0]}
echo "choir_vibevoice_gpu_check: exit $rc"
if [ "$rc" != 77 ]; then
    timeout 90 "$BUILD/cuda/choir_vibevoice_gpu_check" --bench 7b --layers 4 --audio-min 10 --steps 32 2>&1 |
        tee "$dir/vibevoice_gpu_bench.txt"
    echo "bench: exit ${PIPESTATUS[0]}"
fi
exit "$rc"
