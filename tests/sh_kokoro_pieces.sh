#!/usr/bin/env bash
# ctest: labels=slow;nosan
# `choir bench kokoro --pieces-out DIR` (the inputs bench/peers/kokoro_onnx.sh
# hands to ONNX Runtime): on the randw-v1 weights and a two-sentence text, the
# streamed run's split (short first piece) gives two pieces; each has its ids
# (boundary 0s, 3..512), a 256-float style row equal to the voice pack's row of
# its phoneme count, durations of one float per id, F0 / N of 2 per frame and
# 600 audio samples per frame; the zero-noise audio is the same on a second run.
set -euo pipefail
: "${CHOIR_BIN:?}" "${CHOIR_SHARED_DIR:?}"
FIX="$CHOIR_SHARED_DIR/fixtures/kokoro"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$CHOIR_BIN" dev weights --manifest "$FIX/kokoro-v1/manifest.json" \
    --config "$FIX/kokoro-v1/config.json" --out "$TMP/model" >/dev/null
for d in a b; do
    mkdir "$TMP/$d"
    "$CHOIR_BIN" bench kokoro --model "$TMP/model" --voice "$FIX/voices/af_heart.bin" \
        --text "Hello there. See you." --pieces-out "$TMP/$d" >"$TMP/out" || { cat "$TMP/out"; fail "run $d"; }
done
cat "$TMP/out"
[ -f "$TMP/a/piece-1.ids.i32" ] && [ ! -f "$TMP/a/piece-2.ids.i32" ] || fail "want two pieces"
size() { stat -c %s "$1"; }
for k in 0 1; do
    p="$TMP/a/piece-$k"
    n=$(( $(size "$p.ids.i32") / 4 ))
    [ "$n" -ge 3 ] && [ "$n" -le 512 ] || fail "piece $k: $n ids"
    [ "$(od -An -tu4 -N4 "$p.ids.i32" | tr -d ' ')" = 0 ] || fail "piece $k: first id not 0"
    [ "$(size "$p.style.f32")" = 1024 ] || fail "piece $k: style size"
    # voice row of (n - 2) phonemes: row n - 3, 256 floats each ([510, 1, 256] pack)
    cmp -s "$p.style.f32" <(tail -c +$(( (n - 3) * 1024 + 1 )) "$FIX/voices/af_heart.bin" | head -c 1024) ||
        fail "piece $k: style is not the pack's row for $((n - 2)) phonemes"
    [ "$(size "$p.choir.pred_dur.f32")" = $((n * 4)) ] || fail "piece $k: durations"
    frames=$(od -An -f -v "$p.choir.pred_dur.f32" | awk '{for (i = 1; i <= NF; i++) s += $i} END {print s}')
    [ "$(size "$p.choir.F0_pred.f32")" = $((frames * 8)) ] || fail "piece $k: F0 for $frames frames"
    [ "$(size "$p.choir.N_pred.f32")" = $((frames * 8)) ] || fail "piece $k: N"
    [ "$(size "$p.choir.audio.f32")" = $((frames * 2400)) ] || fail "piece $k: audio"
    cmp -s "$p.choir.audio.f32" "$TMP/b/piece-$k.choir.audio.f32" || fail "piece $k: not reproducible"
done
echo "sh_kokoro_pieces: all checks passed"
