#!/usr/bin/env bash
# `choir info`: backends, kernels, and the models of a models folder, each
# recognised by the same rule `choir serve` uses.
set -u
BIN=${CHOIR_BIN:?}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; cat "$TMP/out" 2>/dev/null; exit 1; }

mkdir -p "$TMP/models/vad" "$TMP/models/odd" "$TMP/models/notes"
"$BIN" convert --in "$CHOIR_SHARED_DIR/fixtures/real/vad/silero_vad_16k_op15.onnx" --out "$TMP/models/vad" >/dev/null ||
    fail "convert the VAD model"
echo '{"model_type": "no-such-model"}' >"$TMP/models/odd/config.json"

"$BIN" info --models "$TMP/models" >"$TMP/out" || fail "info exit code"
grep -q '^backends:' "$TMP/out" || fail "no backends section"
grep -Eq '^  cpu +(avx512f\+bw\+vl|avx2\+fma|c-reference)' "$TMP/out" || fail "no cpu backend line"
grep -Eq '^  (linear|choir_linear|gemm)' "$TMP/out" || grep -q 'linear' "$TMP/out" || fail "kernels not listed"
grep -Eq '^  vad +silero-vad +vad +1\.[0-9] MB' "$TMP/out" || fail "VAD model not listed with kind, task and size"
grep -Eq '^  odd +\(not recognised' "$TMP/out" || fail "unrecognised model not reported"
grep -q 'notes' "$TMP/out" && fail "a folder without config.json was listed"
"$BIN" info --models "$TMP/models/vad" | grep -Eq '^  vad +silero-vad' || fail "a single model dir"
"$BIN" info --bogus >/dev/null 2>&1; [ $? = 2 ] || fail "bad argument exit code"
echo "sh_info: all checks passed"
