#!/bin/bash
# ctest: labels=slow;nosan
# SAM-Audio parity: builds the fixture's checkpoint and its tiny T5 with
# `choir dev weights` (the real loader reads them), then
# `choir dev parity sam-audio` must end with PASS: tokenizer ids identical,
# T5 / codec latent / batch features / one network evaluation at each
# recorded t <= 1e-4 relative L2, codec decode and the whole 16-step
# midpoint ODE's target and residual <= 1e-3. An impossible tolerance must
# make the same run fail. `choir convert --q-bits 8` must quantize the DiT's
# 26 linears whose rows divide by 64 (and nothing outside transformer.*), and
# the result must load (quantized rows permuted to contiguous heads) and
# stay near the float model: one evaluation measured 4.8e-3, the ODE's audio
# 0.21 on these random weights, so the bounds (2e-2, 0.5) catch a broken
# loader, not quality.
set -u
BIN=${CHOIR_BIN:?}
FIX=${CHOIR_SHARED_DIR:?}/fixtures/sam-audio/sam-tiny
AUDIO=${CHOIR_SHARED_DIR}/fixtures/audio
TMP=$(mktemp -d "${TMPDIR:-/tmp}/choir-sam-XXXXXX")
trap 'rm -rf "$TMP"' EXIT
out="$TMP/sam"
"$BIN" dev weights --manifest "$FIX/manifest.json" --config "$FIX/config.json" --out "$out" >/dev/null 2>&1 &&
"$BIN" dev weights --manifest "$FIX/t5/manifest.json" --config "$FIX/t5/config.json" --out "$out/t5" >/dev/null 2>&1 &&
cp "$FIX/t5/tokenizer.json" "$out/t5/" || { echo "FAIL: choir dev weights"; exit 1; }
fail=0
log=$("$BIN" dev parity sam-audio --model "$out" --case "$FIX" --audio-dir "$AUDIO")
rc=$?
echo "$log"
if [ $rc -ne 0 ] || [ "$(echo "$log" | tail -n 1)" != "parity: PASS" ]; then
    echo "FAIL: parity"; fail=1
fi
if "$BIN" dev parity sam-audio --model "$out" --case "$FIX" --tol-audio 1e-9 >/dev/null; then
    echo "FAIL: parity passed with an impossible tolerance"; fail=1
fi
if "$BIN" convert --help >/dev/null 2>&1; then
    "$BIN" convert --in "$out" --out "$out-q8" --q-bits 8 >"$TMP/convert.log" 2>&1 || { echo "FAIL: convert"; fail=1; }
    nq=$(grep -c "^  quantize" "$TMP/convert.log")
    other=$(grep "^  quantize" "$TMP/convert.log" | grep -vc " transformer\.")
    [ "$nq" = 26 ] && [ "$other" = 0 ] || { echo "FAIL: q8 quantized $nq layers ($other outside the DiT), want 26 (0)"; fail=1; }
    qlog=$("$BIN" dev parity sam-audio --model "$out-q8" --case "$FIX" --tol-net 2e-2 --tol-audio 0.5)
    echo "== q8"; echo "$qlog" | tail -n 12
    [ "$(echo "$qlog" | tail -n 1)" = "parity: PASS" ] || { echo "FAIL: q8 parity"; fail=1; }
fi
exit $fail
