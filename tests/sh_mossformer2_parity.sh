#!/bin/bash
# ctest: labels=slow;nosan timeout=600
# MossFormer2_SE_48K parity: builds the fixture's checkpoint with `choir dev
# weights`, then `choir dev parity mossformer2` must end with PASS on all three
# cases (fbank/features <= 5e-4 abs; net.*, mask <= 2e-4 and audio <= 1e-4
# relative to the reference's largest value). When `choir convert` is built,
# the bf16 and 8-bit conversions of it must load and run the `short` case; their
# error is reported against loose bounds (random weights over 24 layers amplify
# rounding, so these bounds only catch a broken loader, not quality).
set -u
BIN=${CHOIR_BIN:?}
FIX=${CHOIR_SHARED_DIR:?}/fixtures/mossformer2/mossformer2-se-48k
AUDIO=${CHOIR_SHARED_DIR}/fixtures/audio
TMP=$(mktemp -d "${TMPDIR:-/tmp}/choir-mf2-XXXXXX")
trap 'rm -rf "$TMP"' EXIT
fail=0
out="$TMP/mf2"
if ! "$BIN" dev weights --manifest "$FIX/manifest.json" --config "$FIX/config.json" --out "$out" >/dev/null 2>&1; then
    echo "FAIL: choir dev weights"; exit 1
fi
log=$("$BIN" dev parity mossformer2 --model "$out" --fixture "$FIX" --audio-dir "$AUDIO")
rc=$?
echo "== fp32"; echo "$log"
if [ $rc -ne 0 ] || [ "$(echo "$log" | tail -n 1)" != "parity: PASS" ]; then
    echo "FAIL: fp32 parity"; fail=1
fi
# A tampered tolerance must make the same run fail (the check can fail).
if "$BIN" dev parity mossformer2 --model "$out" --fixture "$FIX" --audio-dir "$AUDIO" --case short-odd \
    --tol-audio 1e-9 >/dev/null; then
    echo "FAIL: parity passed with an impossible tolerance"; fail=1
fi
if "$BIN" convert --help >/dev/null 2>&1; then
    for v in "bf16:--dtype bf16" "q8:--q-bits 8"; do
        name=${v%%:*}; copts=${v#*:}
        # shellcheck disable=SC2086
        if ! "$BIN" convert --in "$out" --out "$out-$name" $copts --quiet >/dev/null 2>&1; then
            echo "FAIL: choir convert $copts"; fail=1; continue
        fi
        echo "== $name (loose bounds)"
        "$BIN" dev parity mossformer2 --model "$out-$name" --fixture "$FIX" --audio-dir "$AUDIO" --case short \
            --tol-net 1 --tol-mask 0.5 --tol-audio 0.25 || { echo "FAIL: $name parity"; fail=1; }
        rm -rf "$out-$name"
    done
fi
exit $fail
