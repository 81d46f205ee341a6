#!/bin/bash
# ctest: labels=slow;nosan timeout=600
# MossFormer2_SE_48K parity: builds the fixture's checkpoint with `choir dev
# weights`, then `choir dev parity mossformer2` must end with PASS on all three
# cases (fbank/features <= 5e-4 abs; net.*, mask <= 2e-4 and audio <= 1e-4
# relative to the reference's largest value). When `choir convert` is built,
# the bf16, 8-bit and 4-bit conversions of it must load and run the `short`
# case. `--q-bits 8` must store all 220 matrices quantized, the 52 kernel-1
# Conv1d weights [out, in, 1] among them (as U32 [out, in/4] + scales and
# biases), the 180-wide encoder in float; its enhanced audio must stay within
# 0.1 of the float model's peak (measured 0.032 on `short`, 0.029 on
# `short-odd`; the float model is the reference to 2e-5). The bf16 and 4-bit
# bounds are loose (random weights over 24 layers amplify rounding: 4-bit
# measures 0.73), so they only catch a broken loader, not quality.
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
# The JSON header of a safetensors file, one "name":{"dtype":... entry a line.
st_header() {
    local n
    n=$(od -An -t u8 -N 8 "$1" | tr -d ' ')
    head -c $((8 + n)) "$1" | tail -c "$n" | sed 's/^{//; s/},"/}\n"/g'
}
if "$BIN" convert --help >/dev/null 2>&1; then
    for v in "bf16:--dtype bf16:--tol-net 1 --tol-mask 0.5 --tol-audio 0.25" \
             "q8:--q-bits 8:--tol-net 1 --tol-mask 0.25 --tol-audio 0.1" \
             "q4:--q-bits 4:--tol-net 10 --tol-mask 2 --tol-audio 2"; do
        name=${v%%:*}; rest=${v#*:}; copts=${rest%%:*}; tols=${rest#*:}
        # shellcheck disable=SC2086
        if ! "$BIN" convert --in "$out" --out "$out-$name" $copts --quiet >/dev/null 2>&1; then
            echo "FAIL: choir convert $copts"; fail=1; continue
        fi
        if [ "$name" = q8 ]; then
            hdr=$(st_header "$out-$name/model.safetensors")
            nq=$(echo "$hdr" | grep -c '\.scales":')
            nconv=$(echo "$hdr" | grep -cE '(conv1\.0|conv2|conv1d_out|output\.0|output_gate\.0|conv1_decoder)\.scales":')
            echo "== q8: $nq quantized layers, $nconv of them 1x1 convolutions"
            if [ "$nq" != 220 ] || [ "$nconv" != 52 ]; then
                echo "FAIL: q8 quantized $nq layers ($nconv convs), want 220 (52)"; fail=1
            fi
            echo "$hdr" | grep -q '^"mossformer.conv1d_out.weight":{"dtype":"U32","shape":\[1024,128\]' ||
                { echo "FAIL: q8 conv1d_out.weight is not U32 [1024, 128]"; fail=1; }
            echo "$hdr" | grep -q '^"mossformer.conv1d_encoder.weight":{"dtype":"F32","shape":\[512,180,1\]' ||
                { echo "FAIL: q8 encoder is not kept float [512, 180, 1]"; fail=1; }
        fi
        cases="short"
        [ "$name" = q8 ] && cases="short short-odd"
        for c in $cases; do
            echo "== $name $c ($tols)"
            # shellcheck disable=SC2086
            "$BIN" dev parity mossformer2 --model "$out-$name" --fixture "$FIX" --audio-dir "$AUDIO" --case $c \
                $tols || { echo "FAIL: $name parity ($c)"; fail=1; }
        done
        rm -rf "$out-$name"
    done
fi
exit $fail
