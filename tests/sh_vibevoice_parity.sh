#!/bin/bash
# VibeVoice-ASR parity on both fixture cases, each under two namings: the
# checkpoint `choir dev weights` writes from the manifest (transformers'
# names, one file), and the same weights renamed to the original
# microsoft/VibeVoice-ASR names (original_names.json) in three shards with an
# index. `choir dev parity vibevoice` runs the pipeline from the WAV and must
# print PASS (input values <= 1e-5 abs; latents, embeddings, hidden states,
# logits <= 1e-4 rel L2; prompt and greedy tokens identical; chunked encoder
# equal to one pass). Then `choir stt` on the model: the untrained weights
# write no JSON, which must be reported (exit 1, a message), not crash.
set -u
BIN=${CHOIR_BIN:?}
FIX=${CHOIR_SHARED_DIR:?}/fixtures/vibevoice-asr
AUDIO=${CHOIR_SHARED_DIR}/fixtures/audio
TOK=${CHOIR_SHARED_DIR}/fixtures/real/tokenizer/qwen2.5/tokenizer.json
TMP=$(mktemp -d "${TMPDIR:-/tmp}/choir-vibevoice-XXXXXX")
trap 'rm -rf "$TMP"' EXIT
fail=0
for c in vv-hello vv-fox-chunked; do
    for layout in transformers original; do
        out="$TMP/$c-$layout"
        extra=""
        [ "$layout" = original ] && extra="--rename $FIX/$c/original_names.json --shards 3"
        # shellcheck disable=SC2086
        if ! "$BIN" dev weights --manifest "$FIX/$c/manifest.json" --config "$FIX/$c/config.json" \
            --out "$out" $extra 2>/dev/null; then
            echo "FAIL: choir dev weights for $c ($layout)"; fail=1; continue
        fi
        cp "$TOK" "$out/tokenizer.json"
        log=$("$BIN" dev parity vibevoice --model "$out" --case "$FIX/$c" --audio-dir "$AUDIO")
        rc=$?
        echo "== $c ($layout names)"; echo "$log"
        if [ $rc -ne 0 ] || [ "$(echo "$log" | tail -n 1)" != "parity: PASS" ]; then
            echo "FAIL: $c $layout parity"; fail=1
        fi
        echo "$log" | grep -q "^model: $layout layout" || { echo "FAIL: $c: layout not detected as $layout"; fail=1; }
    done
done
m="$TMP/vv-hello-transformers"
"$BIN" stt --model "$m" "$AUDIO/hello24k.wav" --format verbose_json --max-new-tokens 24 >"$TMP/out.json" 2>"$TMP/err.txt"
rc=$?
if [ $rc -ne 1 ] || ! grep -q "not a JSON transcript" "$TMP/err.txt" || ! grep -q "generated 24 (max_new_tokens)" "$TMP/err.txt"; then
    echo "FAIL: choir stt on untrained weights: exit $rc"; cat "$TMP/err.txt"; fail=1
fi
# The maximum duration is enforced with a clear error.
"$BIN" stt --model "$m" "$AUDIO/hello24k.wav" --max-audio-seconds 1 >/dev/null 2>"$TMP/err2.txt"
rc=$?
if [ $rc -ne 1 ] || ! grep -q "at most 1 s" "$TMP/err2.txt"; then
    echo "FAIL: --max-audio-seconds not enforced (exit $rc)"; cat "$TMP/err2.txt"; fail=1
fi
# A folder without the tokenizer says what is missing.
rm "$m/tokenizer.json"
"$BIN" stt --model "$m" "$AUDIO/hello24k.wav" >/dev/null 2>"$TMP/err3.txt"
grep -q "tokenizer.json" "$TMP/err3.txt" || { echo "FAIL: missing tokenizer not reported"; cat "$TMP/err3.txt"; fail=1; }
[ $fail -eq 0 ] && echo "all vibevoice parity checks passed"
exit $fail
