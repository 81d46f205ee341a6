#!/bin/bash
# Whisper parity on both fixtures: builds each fixture's checkpoint with
# `choir dev weights`, then `choir dev parity whisper` must print PASS
# (fp32: mel <= 1e-4 abs, encoder and logits <= 1e-4 rel L2, greedy identical).
# When `choir convert` is built, the bf16 and 8-bit conversions must pass looser
# bounds too, and 4-bit is run and reported without a bound.
set -u
BIN=${CHOIR_BIN:?}
FIX=${CHOIR_SHARED_DIR:?}/fixtures/whisper
AUDIO=${CHOIR_SHARED_DIR}/fixtures/audio
TMP=$(mktemp -d "${TMPDIR:-/tmp}/choir-whisper-XXXXXX")
trap 'rm -rf "$TMP"' EXIT
fail=0
for fx in whisper-ml80 whisper-v3m128; do
    out="$TMP/$fx"
    if ! "$BIN" dev weights --manifest "$FIX/$fx/manifest.json" --config "$FIX/$fx/config.json" \
        --out "$out" >/dev/null; then
        echo "FAIL: choir dev weights for $fx"; fail=1; continue
    fi
    log=$("$BIN" dev parity whisper --model "$out" --fixture "$FIX/$fx" --audio-dir "$AUDIO")
    rc=$?
    echo "== $fx fp32"; echo "$log"
    if [ $rc -ne 0 ] || [ "$(echo "$log" | tail -n 1)" != "parity: PASS" ]; then
        echo "FAIL: $fx fp32 parity"; fail=1
    fi
    # Converted variants, when the convert command is part of this build.
    if "$BIN" convert --help >/dev/null 2>&1; then
        for v in "bf16:--dtype bf16:--tol-enc 2e-2 --tol-logits 2e-2 --greedy-min 0.9" \
                 "q8:--q-bits 8:--tol-enc 2e-2 --tol-logits 2e-2 --greedy-min 0.9" \
                 "q4:--q-bits 4:"; do
            name=${v%%:*}; rest=${v#*:}; copts=${rest%%:*}; bounds=${rest#*:}
            # shellcheck disable=SC2086
            if ! "$BIN" convert --in "$out" --out "$out-$name" $copts --quiet >/dev/null 2>&1; then
                echo "FAIL: choir convert $copts for $fx"; fail=1; continue
            fi
            if [ -z "$bounds" ]; then
                echo "== $fx $name (reported only)"
                "$BIN" dev parity whisper --model "$out-$name" --fixture "$FIX/$fx" --audio-dir "$AUDIO" \
                    --tol-enc 1 --tol-logits 1 --greedy-min 0 || { echo "FAIL: $fx $name did not run"; fail=1; }
                continue
            fi
            echo "== $fx $name ($bounds)"
            # shellcheck disable=SC2086
            "$BIN" dev parity whisper --model "$out-$name" --fixture "$FIX/$fx" --audio-dir "$AUDIO" \
                $bounds || { echo "FAIL: $fx $name parity"; fail=1; }
        done
    fi
done
exit $fail
