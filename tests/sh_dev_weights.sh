#!/bin/bash
# `choir dev weights` end to end: the full Kokoro manifest (81,810,022 float32
# parameters) becomes one checkpoint of exactly the right size, quickly, and
# bad usage is refused with exit code 2.
set -euo pipefail
: "${CHOIR_BIN:?}" "${CHOIR_SHARED_DIR:?}"
fx="$CHOIR_SHARED_DIR/fixtures/kokoro/kokoro-v1"
out=$(mktemp -d "${TMPDIR:-/tmp}/choir-devw-XXXXXX")
trap 'rm -rf "$out"' EXIT

start=$(date +%s)
"$CHOIR_BIN" dev weights --manifest "$fx/manifest.json" --config "$fx/config.json" --out "$out/kokoro"
took=$(( $(date +%s) - start ))

cmp "$fx/config.json" "$out/kokoro/config.json"
file="$out/kokoro/model.safetensors"
size=$(stat -c %s "$file")
# 8-byte little-endian header length, then the header, then the data.
hlen=$(od -An -t u8 -N 8 "$file" | tr -d ' ')
want=$(( 8 + hlen + 81810022 * 4 ))
if [ "$size" -ne "$want" ]; then
    echo "model.safetensors is $size bytes, expected $want" >&2
    exit 1
fi
if [ $(( (8 + hlen) % 8 )) -ne 0 ]; then
    echo "header not padded to 8 bytes" >&2
    exit 1
fi
echo "kokoro checkpoint: $size bytes in ${took}s"
if [ "$took" -gt 60 ]; then
    echo "too slow: ${took}s" >&2
    exit 1
fi

set +e
"$CHOIR_BIN" dev weights --out "$out/x" >/dev/null 2>&1
rc=$?
set -e
[ "$rc" -eq 2 ] || { echo "missing --manifest gave exit $rc, expected 2" >&2; exit 1; }
set +e
"$CHOIR_BIN" dev weights --manifest "$out/absent.json" --out "$out/x" 2>"$out/err.txt"
rc=$?
set -e
[ "$rc" -eq 1 ] || { echo "absent manifest gave exit $rc, expected 1" >&2; exit 1; }
grep -q "absent.json" "$out/err.txt"
echo ok
