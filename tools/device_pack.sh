#!/usr/bin/env bash
# Packs a CUDA build of choir so that it runs on a GPU host that has the CUDA
# toolkit and driver but none of choir's Debian libraries (OpenBLAS, cJSON,
# libsndfile, espeak-ng, ...): the binary, every shared library it needs
# except glibc's own and CUDA's, the espeak-ng data, and the test fixtures.
#
#   tools/device_pack.sh [BUILD_DIR] [OUT_DIR]    (defaults: build-cuda .dev)
#   CHOIR_PACK_EXTRA="src/tensor/cuda/choir_kokoro_gpu_check" tools/device_pack.sh
#   CHOIR_PACK_EXTRA="src/tensor/cuda/choir_backend_gpu_check" tools/device_pack.sh
#
# On the GPU host, from the repository root:
#   mkdir -p /tmp/p && tar -xJf .dev/pack.tar.xz -C /tmp/p && . /tmp/p/env.sh
#   choir info        # now runs from /tmp/p/bin with its libraries
# The fixtures land in /tmp/p/shared/fixtures (CHOIR_SHARED_DIR points there).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-cuda}
OUT=${2:-.dev}
SHARED=${CHOIR_SHARED_DIR:-../shared}
[ -x "$BUILD/choir" ] || { echo "device_pack: $BUILD/choir not built" >&2; exit 1; }
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/bin" "$STAGE/lib" "$STAGE/shared" "$OUT"
cp "$BUILD/choir" "$STAGE/bin/"
# choir-dev (bench, parity, dev weights): `choir bench` and `choir dev` run it
# from beside choir, so it travels with it.
progs="$BUILD/choir"
if [ -x "$BUILD/choir-dev" ]; then
  cp "$BUILD/choir-dev" "$STAGE/bin/"
  progs="$progs $BUILD/choir-dev"
fi
# CHOIR_PACK_EXTRA: more programs of the build (check programs, benches) to pack.
# Paths relative to BUILD, e.g. src/tensor/cuda/choir_backend_gpu_check.
for extra in ${CHOIR_PACK_EXTRA:-}; do
  [ -x "$BUILD/$extra" ] || { echo "device_pack: $BUILD/$extra not built" >&2; exit 1; }
  cp "$BUILD/$extra" "$STAGE/bin/"
done
# Libraries the host provides itself: glibc's, the C++ runtime, and CUDA's
# (which must match the host's driver, so they are never carried).
skip='^(libc|libm|libdl|libpthread|librt|libresolv|ld-linux-x86-64|libgcc_s|libstdc\+\+|libcuda|libcudart|libcublas|libcublasLt)\.so'
# The libraries of choir, choir-dev and every extra program.
for extra in ${CHOIR_PACK_EXTRA:-}; do progs="$progs $BUILD/$extra"; done
# shellcheck disable=SC2086
ldd $progs | awk '$3 ~ /^\// {print $3}' | sort -u | while read -r lib; do
  base=$(basename "$lib")
  if ! [[ $base =~ $skip ]]; then cp -L "$lib" "$STAGE/lib/$base"; fi
done
if [ -d /usr/lib/x86_64-linux-gnu/espeak-ng-data ]; then
  cp -r /usr/lib/x86_64-linux-gnu/espeak-ng-data "$STAGE/espeak-ng-data"
  # English only: the other languages' dictionaries are most of its size.
  find "$STAGE/espeak-ng-data" -maxdepth 1 -name '*_dict' ! -name 'en_dict' -delete
fi
# Fixtures for the parity commands (CHOIR_PACK_FIXTURES picks the folders,
# paths below fixtures/ kept: "real/tokenizer/qwen2.5" is what VibeVoice's
# engine bench reads; the MossFormer2 and the rest of "real" are large and
# left out by default).
mkdir -p "$STAGE/shared/fixtures"
for f in ${CHOIR_PACK_FIXTURES:-README.md randw_reference.py whisper kokoro audio}; do
  if [ -e "$SHARED/fixtures/$f" ]; then
    mkdir -p "$STAGE/shared/fixtures/$(dirname "$f")"
    cp -r "$SHARED/fixtures/$f" "$STAGE/shared/fixtures/$(dirname "$f")/"
  fi
done
cat > "$STAGE/env.sh" <<'EOF'
# Sourced on the GPU host: puts the packed choir first on PATH.
P=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export PATH="$P/bin:$PATH"
export LD_LIBRARY_PATH="$P/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export ESPEAK_DATA_PATH="$P"
export CHOIR_SHARED_DIR="$P/shared"
EOF
tar -C "$STAGE" -cJf "$OUT/pack.tar.xz" .
ls -la "$OUT/pack.tar.xz"
