#!/usr/bin/env bash
# Builds the standalone CUDA project's choir_backend_gpu_check and runs it:
# every backend operation on the GPU against the CPU backend, one line per
# case. For a GPU machine without choir's Debian libraries; run from the
# repository root:   bash tests/cuda/run_backend_gpu.sh [BUILD_DIR]   (default /tmp/bb)
# Output also goes to $OUT/backend_gpu_check.txt when OUT is set. Exit status
# is the check's (0 all pass, 1 a failure, 77 no GPU visible).
set -u
BUILD=${1:-/tmp/bb}
JOBS=${JOBS:-16}
if [ ! -f tests/cuda/CMakeLists.txt ]; then
    echo "run_backend_gpu.sh: run me from the repository root" >&2
    exit 2
fi
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
t0=$SECONDS
cmake -S tests/cuda -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release >"$BUILD.configure.log" 2>&1 ||
    { tail -30 "$BUILD.configure.log"; exit 2; }
cmake --build "$BUILD" -j"$JOBS" --target choir_backend_gpu_check >"$BUILD.build.log" 2>&1 ||
    { grep -E "error|Error" "$BUILD.build.log" | head -40; exit 2; }
echo "built in $((SECONDS - t0)) s"
mkdir -p "${OUT:-/tmp}"
log=${OUT:-/tmp}/backend_gpu_check.txt
timeout 240 "$BUILD/cuda/choir_backend_gpu_check" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
echo "choir_backend_gpu_check: exit $rc"
exit "$rc"
