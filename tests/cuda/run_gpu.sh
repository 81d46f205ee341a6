#!/usr/bin/env bash
# Builds the standalone CUDA project and runs its checks (kernels, backend
# operations, Whisper) and the roofline
# bench, for a GPU machine without choir's Debian libraries. Run from the
# repository root:   bash tests/cuda/run_gpu.sh [BUILD_DIR]   (default /tmp/b)
# Every step runs even when an earlier one fails; a summary follows, and the
# exit status is nonzero when any step failed (77 from a check = skipped).
set -u
BUILD=${1:-/tmp/b}
JOBS=${JOBS:-16}
declare -a NAMES=() STATUS=()

step() { # step NAME COMMAND...
    local name=$1
    shift
    echo
    echo "=== $name: $*"
    local t0=$SECONDS
    "$@"
    local rc=$?
    echo "=== $name: exit $rc after $((SECONDS - t0)) s"
    NAMES+=("$name")
    STATUS+=("$rc")
    return 0
}

if [ ! -f tests/cuda/CMakeLists.txt ]; then
    echo "run_gpu.sh: run me from the repository root" >&2
    exit 2
fi
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
step configure cmake -S tests/cuda -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release
step build cmake --build "$BUILD" -j"$JOBS"
step kernels "$BUILD/cuda/choir_cuda_check"
step backend "$BUILD/cuda/choir_backend_gpu_check"
step whisper "$BUILD/cuda/choir_whisper_gpu_check"
step roofline "$BUILD/cuda/bench_cuda_roofline" --quick

echo
echo "=== summary"
fail=0
for i in "${!NAMES[@]}"; do
    rc=${STATUS[$i]}
    case $rc in
        0) verdict=ok ;;
        77) verdict="skipped (no GPU visible)" ;;
        *) verdict="FAILED (exit $rc)"; fail=1 ;;
    esac
    printf '%-10s %s\n' "${NAMES[$i]}" "$verdict"
done
exit $fail
