#!/bin/bash
# End-to-end `choir convert` on the whisper-ml80 fixture weights: quantize,
# report, round trip, and the refusals' exit codes and messages.
set -u
BIN=${CHOIR_BIN:?}
SHARED=${CHOIR_SHARED_DIR:?}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
F=$SHARED/fixtures/whisper/whisper-ml80

"$BIN" dev weights --manifest "$F/manifest.json" --config "$F/config.json" --out "$T/f32" >/dev/null \
  || fail "dev weights"
"$BIN" convert --in "$T/f32" --out "$T/q4" --q-bits 4 --dtype bf16 >"$T/report" || fail "convert q4"
grep -q "quantize  model.decoder.embed_tokens.weight \[51865, 64\] F32 -> 4-bit g64 (BF16 scales)" "$T/report" \
  || fail "embed_tokens choice not reported"
grep -q "cast      model.decoder.embed_positions.weight" "$T/report" || fail "positions not kept float"
grep -q "^size: " "$T/report" || fail "no size line"
grep -q '"quantization_config"' "$T/q4/config.json" || fail "config lacks quantization_config"
in=$(stat -c %s "$T/f32/model.safetensors"); out=$(stat -c %s "$T/q4/model.safetensors")
[ "$out" -lt $((in / 5)) ] || fail "4-bit file not smaller: $in -> $out"

# an already quantized input converts to the same tensors
"$BIN" convert --in "$T/q4" --out "$T/q4b" --quiet || fail "copy convert"
cmp -s "$T/q4/model.safetensors" "$T/q4b/model.safetensors" || fail "round trip changed the file"

"$BIN" convert --in "$T/f32" --out "$T/x" --q-bits 7 2>"$T/err"; rc=$?
[ $rc -eq 1 ] && grep -q "7-bit" "$T/err" || fail "7 bits: rc $rc $(cat "$T/err")"
"$BIN" convert --in "$T/f32" --out "$T/x" --q-bits 4 --dequantize 2>"$T/err"; rc=$?
[ $rc -eq 2 ] || fail "dequantize+q-bits: rc $rc"
"$BIN" convert --in "$T/f32" --out "$T/x" --dtype f8 2>"$T/err"; rc=$?
[ $rc -eq 2 ] || fail "bad dtype: rc $rc"
"$BIN" convert --in "$T/f32" 2>/dev/null; [ $? -eq 2 ] || fail "missing --out"
echo "sh_convert: ok"
