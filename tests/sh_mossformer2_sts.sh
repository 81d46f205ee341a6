#!/bin/bash
# `choir sts` end to end on the fixture's 3-s clip (48 kHz mono): the default
# (chunked) and --reference modes both write a 16-bit WAV of exactly the
# input's length, whose samples are not the input's; wrong usage exits 2 and a
# missing model exits 1 with a message; --help states the deterministic default.
set -u
BIN=${CHOIR_BIN:?}
FIX=${CHOIR_SHARED_DIR:?}/fixtures/mossformer2/mossformer2-se-48k
IN=${CHOIR_SHARED_DIR}/fixtures/audio/jfk48k_3s.wav
TMP=$(mktemp -d "${TMPDIR:-/tmp}/choir-sts-XXXXXX")
trap 'rm -rf "$TMP"' EXIT
fail=0
"$BIN" dev weights --manifest "$FIX/manifest.json" --config "$FIX/config.json" --out "$TMP/m" >/dev/null 2>&1 ||
    { echo "FAIL: dev weights"; exit 1; }
"$BIN" sts --help | grep -q "Default 0: output is deterministic" || { echo "FAIL: --help lacks the dither default"; fail=1; }
"$BIN" sts "$IN" >/dev/null 2>&1; [ $? -eq 2 ] || { echo "FAIL: missing --model should exit 2"; fail=1; }
"$BIN" sts --model "$TMP/nope" "$IN" -o "$TMP/x.wav" 2>"$TMP/err"; rc=$?
{ [ $rc -eq 1 ] && grep -q "no model.safetensors" "$TMP/err"; } || { echo "FAIL: missing model: rc $rc"; fail=1; }
# data chunk size of a canonical 44-byte-header WAV, as a decimal number
data_size() { od -An -t u4 -j 40 -N 4 "$1" | tr -d ' '; }
for mode in "" "--reference"; do
    out="$TMP/out${mode:+-ref}.wav"
    # shellcheck disable=SC2086
    if ! "$BIN" sts --model "$TMP/m" "$IN" -o "$out" --quiet $mode; then
        echo "FAIL: choir sts $mode"; fail=1; continue
    fi
    [ "$(head -c 4 "$out")" = "RIFF" ] || { echo "FAIL: $mode output is not RIFF"; fail=1; }
    size=$(data_size "$out")
    [ "$size" = "288000" ] || { echo "FAIL: $mode output has $size data bytes, want 288000"; fail=1; }
    cmp -s <(tail -c 288000 "$out") <(tail -c 288000 "$IN") && { echo "FAIL: $mode output equals input"; fail=1; }
done
# One 3-s chunk: the chunked and reference modes are the same single pass.
cmp -s "$TMP/out.wav" "$TMP/out-ref.wav" || { echo "FAIL: chunked and reference differ on a 3-s input"; fail=1; }
[ $fail -eq 0 ] && echo "sts: PASS"
exit $fail
