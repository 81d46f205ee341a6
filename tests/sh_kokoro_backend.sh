#!/usr/bin/env bash
# `--backend` and `--batch` of `choir bench kokoro` / `choir dev parity kokoro`:
# without a usable GPU, `--backend cuda` fails at once with a message naming
# the reason (no CUDA backend in this build, or no device), never silently on
# the CPU; bad values are usage errors (exit 2). On a machine with a GPU the
# cuda half is left to tests/cuda (choir_kokoro_gpu_check).
set -u
BIN=${CHOIR_BIN:?}
FIX="${CHOIR_SHARED_DIR:?}/fixtures/kokoro"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; cat "$TMP/out" 2>/dev/null; exit 1; }

mkdir -p "$TMP/model"
cp "$FIX/kokoro-v1/config.json" "$TMP/model/"
no_gpu='this build has no CUDA backend|no CUDA device visible'

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    echo "sh_kokoro_backend: a GPU is present; the no-GPU messages are not checked"
else
    "$BIN" bench kokoro --model "$TMP/model" --backend cuda >"$TMP/out" 2>&1
    rc=$?
    [ $rc = 2 ] || [ $rc = 1 ] || fail "bench --backend cuda exit code $rc"
    grep -Eq "$no_gpu" "$TMP/out" || fail "bench --backend cuda: no reason given"
    "$BIN" dev parity kokoro --model "$TMP/model" --case "$FIX/kokoro-v1/hello" \
        --voices "$FIX/voices" --backend cuda >"$TMP/out" 2>&1
    rc=$?
    [ $rc = 2 ] || [ $rc = 1 ] || fail "parity --backend cuda exit code $rc"
    grep -Eq "$no_gpu" "$TMP/out" || fail "parity --backend cuda: no reason given"
fi

"$BIN" bench kokoro --model "$TMP/model" --backend tpu >"$TMP/out" 2>&1; [ $? = 2 ] || fail "bad --backend"
"$BIN" bench kokoro --model "$TMP/model" --batch 1,x >"$TMP/out" 2>&1; [ $? = 2 ] || fail "bad --batch"
grep -q -- '--batch 1,x' "$TMP/out" || fail "bad --batch not named"
"$BIN" bench kokoro --model "$TMP/model" --batch 0 >"$TMP/out" 2>&1; [ $? = 2 ] || fail "--batch 0"
"$BIN" dev parity kokoro --model "$TMP/model" --case "$FIX/kokoro-v1/hello" --voices "$FIX/voices" \
    --gpu-dtype f16 >"$TMP/out" 2>&1; [ $? = 2 ] || fail "bad --gpu-dtype"
"$BIN" bench kokoro --help | grep -q -- '--backend cpu|cuda' || fail "help lacks --backend"
echo "sh_kokoro_backend: all checks passed"
