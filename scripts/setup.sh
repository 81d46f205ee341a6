#!/usr/bin/env bash
# Installs the Debian packages choir needs. Idempotent: packages already
# present are left as they are.
#
#   scripts/setup.sh            everything to build, run and test (the default)
#   scripts/setup.sh --build    to build and run only (no test tools: the Dockerfile's build stage)
#   scripts/setup.sh --runtime  the shared libraries `choir` runs with (the Dockerfile's image)
#   add --cuda                  NVIDIA's CUDA toolkit from NVIDIA's Debian 12 repository
#                               (the nvcc/cuBLAS build with --build, cuBLAS with --runtime)
#
# As root it runs apt-get itself (a fresh Debian container has no sudo); as
# another user through sudo, when there is one. CHOIR_SETUP_DRY_RUN=1 prints
# the commands instead of running them.
set -euo pipefail

BUILD_PACKAGES=(
  build-essential cmake pkg-config git ca-certificates curl
  libcmocka-dev            # test framework (CMake configures the tests with every build)
  libcjson-dev             # config and API JSON
  libopenblas-dev          # large f32 matrix products
  libfftw3-dev             # FFT for mel / STFT
  libsndfile1-dev libvorbis-dev libmpg123-dev libsoxr-dev  # audio decode, resample
  libmp3lame-dev libopus-dev libogg-dev libopusenc-dev  # audio encode
  libavcodec-dev           # AAC encode (ADTS)
  libespeak-ng-dev espeak-ng-data                   # phonemizer
  libmicrohttpd-dev libcurl4-openssl-dev           # HTTP server, `choir pull`
  libzip-dev               # PyTorch .pth archives
  libicu-dev               # Unicode normal forms and graphemes (Unigram tokenizers)
  libhiredis-dev           # job queue (`choir worker`)
)
TEST_PACKAGES=(
  redis-server haproxy yamllint  # job queue, scale-out tests (deploy/)
  clang libclang-rt-14-dev # fuzz harnesses (built on demand)
  nodejs npm               # API client tests, npm-hosted demo assets
  chromium                 # the web UI test (tests/sh_ui.sh, headless)
  time                     # /usr/bin/time -v peak RSS (bench/sts_long_memory.sh)
  python3-numpy            # bench/peers/kokoro_onnx_unpack.py (rebuilds the ONNX peer's weights)
)
# What the `choir` binary links (ldd build/choir, through dpkg -S), plus curl
# for health checks.
RUNTIME_PACKAGES=(
  ca-certificates curl
  libcjson1 libopenblas0-pthread libgomp1 libfftw3-single3
  libsndfile1 libvorbis0a libvorbisenc2 libvorbisfile3 libmpg123-0 libsoxr0
  libmp3lame0 libopus0 libogg0 libopusenc0 libavcodec59
  libespeak-ng1 espeak-ng-data
  libmicrohttpd12 libcurl4 libzip4 libicu72 libhiredis0.14
)
CUDA_VERSION=${CHOIR_CUDA_VERSION:-12-8}  # NVIDIA's package suffix: 12-8 is CUDA 12.8
CUDA_BUILD_PACKAGES=(cuda-nvcc-$CUDA_VERSION cuda-cudart-dev-$CUDA_VERSION libcublas-dev-$CUDA_VERSION)
CUDA_RUNTIME_PACKAGES=(libcublas-$CUDA_VERSION)

profile=all cuda=0
for arg in "$@"; do
  case "$arg" in
    --build) profile=build ;;
    --runtime) profile=runtime ;;
    --cuda) cuda=1 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "setup: unknown option $arg (--build, --runtime, --cuda)" >&2; exit 2 ;;
  esac
done
case "$profile" in
  all) PACKAGES=("${BUILD_PACKAGES[@]}" "${TEST_PACKAGES[@]}") ;;
  build) PACKAGES=("${BUILD_PACKAGES[@]}") ;;
  runtime) PACKAGES=("${RUNTIME_PACKAGES[@]}") ;;
esac

run() {
  if [ "${CHOIR_SETUP_DRY_RUN:-0}" = 1 ]; then echo "+ $*"; else "$@"; fi
}
# Root needs no sudo, and a fresh container has none; anyone else needs it.
SUDO=()
if [ "$(id -u)" -ne 0 ]; then
  if ! command -v sudo >/dev/null 2>&1; then
    echo "setup: installing packages needs root: run this as root, or install sudo" >&2
    exit 1
  fi
  SUDO=(sudo)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
# nodejs/npm may come from elsewhere on a machine (a distro newer than Debian's); keep what works.
if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
  filtered=()
  for p in "${missing[@]}"; do
    case "$p" in nodejs|npm) ;; *) filtered+=("$p") ;; esac
  done
  missing=("${filtered[@]}")
fi
export DEBIAN_FRONTEND=noninteractive
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  run "${SUDO[@]}" apt-get update -qq
  run "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all Debian packages present"
fi

if [ "$cuda" = 1 ]; then
  # NVIDIA's repository for Debian 12, through its keyring package.
  if ! dpkg-query -W -f='${Status}' cuda-keyring 2>/dev/null | grep -q "install ok installed"; then
    run curl -fsSL -o /tmp/cuda-keyring.deb \
      https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/cuda-keyring_1.1-1_all.deb
    run "${SUDO[@]}" dpkg -i /tmp/cuda-keyring.deb
    run "${SUDO[@]}" apt-get update -qq
  fi
  if [ "$profile" = runtime ]; then cuda_pkgs=("${CUDA_RUNTIME_PACKAGES[@]}"); else cuda_pkgs=("${CUDA_BUILD_PACKAGES[@]}"); fi
  run "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${cuda_pkgs[@]}"
fi
