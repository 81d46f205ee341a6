#!/usr/bin/env bash
# Installs every Debian package choir needs to build, run and test. Idempotent:
# packages already present are left as they are. Run as root (or through sudo).
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config git ca-certificates curl
  libcmocka-dev            # test framework
  libcjson-dev             # config and API JSON
  libopenblas-dev          # large f32 matrix products
  libfftw3-dev             # FFT for mel / STFT
  libsndfile1-dev libvorbis-dev libmpg123-dev libsoxr-dev  # audio decode, resample
  libmp3lame-dev libopus-dev libogg-dev libopusenc-dev  # audio encode
  libespeak-ng-dev espeak-ng-data                   # phonemizer
  libmicrohttpd-dev libcurl4-openssl-dev           # HTTP server, `choir pull`
  libzip-dev               # PyTorch .pth archives
  libicu-dev               # Unicode normal forms and graphemes (Unigram tokenizers)
  libhiredis-dev redis-server haproxy yamllint  # job queue, scale-out tests (deploy/)
  clang libclang-rt-14-dev # fuzz harnesses (built on demand)
  nodejs npm               # API client tests, npm-hosted demo assets
  chromium                 # the web UI test (tests/sh_ui.sh, headless)
  time                     # /usr/bin/time -v peak RSS (bench/sts_long_memory.sh)
  python3-numpy            # bench/peers/kokoro_onnx_unpack.py (rebuilds the ONNX peer's weights)
)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

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
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all Debian packages present"
fi
