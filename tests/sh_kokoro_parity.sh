#!/usr/bin/env bash
# ctest: labels=slow;nosan
# Kokoro-82M parity on both fixture cases: builds the randw-v1 weights with
# `choir dev weights` into a temporary model directory, then runs
# `choir dev parity kokoro` on each case; every case must end in `parity: PASS`.
set -euo pipefail
: "${CHOIR_BIN:?}" "${CHOIR_SHARED_DIR:?}"
FIX="$CHOIR_SHARED_DIR/fixtures/kokoro"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

"$CHOIR_BIN" dev weights --manifest "$FIX/kokoro-v1/manifest.json" \
    --config "$FIX/kokoro-v1/config.json" --out "$TMP/model" >/dev/null

for case in hello fox; do
    out="$("$CHOIR_BIN" dev parity kokoro --model "$TMP/model" --case "$FIX/kokoro-v1/$case" \
        --voices "$FIX/voices")" || { echo "$out"; echo "FAIL: $case"; exit 1; }
    echo "$out"
    grep -q '^  pred_dur  *ok' <<<"$out" || { echo "FAIL: $case pred_dur"; exit 1; }
    tail -n 1 <<<"$out" | grep -qx 'parity: PASS' || { echo "FAIL: $case"; exit 1; }
done

# A model directory without weights is refused with a message, not a crash.
mkdir "$TMP/empty"
cp "$FIX/kokoro-v1/config.json" "$TMP/empty/"
if "$CHOIR_BIN" dev parity kokoro --model "$TMP/empty" --case "$FIX/kokoro-v1/hello" \
    --voices "$FIX/voices" >"$TMP/out" 2>&1; then
    echo "FAIL: parity passed without weights"; exit 1
fi
grep -q 'parity: FAIL' "$TMP/out"
grep -q 'holds no model.safetensors' "$TMP/out"
echo "sh_kokoro_parity: ok"
