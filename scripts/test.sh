#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite: the release build, then the
# sanitizer build (ASan + UBSan) on every test not labelled `nosan`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh --asan
JOBS=$(nproc 2>/dev/null || echo 2)
echo "== tests (release build)"
ctest --test-dir build --output-on-failure -j "$JOBS"
echo "== tests (ASan + UBSan build)"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j "$JOBS" -LE nosan
