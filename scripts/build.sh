#!/usr/bin/env bash
# Builds choir into build/ (release) and, with --asan, build-asan/ (ASan + UBSan).
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=$(nproc 2>/dev/null || echo 2)
WERROR=${CHOIR_WERROR:-ON}
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCHOIR_WERROR="$WERROR" >/dev/null
cmake --build build -j "$JOBS"
if [ "${1:-}" = "--asan" ]; then
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DCHOIR_SANITIZE=ON -DCHOIR_WERROR="$WERROR" >/dev/null
  cmake --build build-asan -j "$JOBS"
fi
