#!/bin/bash
# `choir stt` end to end on the whisper-ml80 fixture weights (random weights:
# the words are noise, the formats and options are what is checked).
set -u
BIN=${CHOIR_BIN:?}
SH=${CHOIR_SHARED_DIR:?}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/choir-stt-XXXXXX")
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
FX=$SH/fixtures/whisper/whisper-ml80
"$BIN" dev weights --manifest "$FX/manifest.json" --config "$FX/config.json" --out "$TMP/m" >/dev/null 2>&1 \
    || fail "choir dev weights"
TOK=$SH/fixtures/real/tokenizer/multilingual.tiktoken
WAV=$SH/fixtures/real/speech/jfk.wav
COMMON=(--model "$TMP/m" --tokenizer "$TOK" --language en --temperature 0 --max-tokens 8)

out=$("$BIN" stt "${COMMON[@]}" "$WAV") || fail "stt txt"
[ -n "$out" ] || fail "empty txt output"

mkdir -p "$TMP/o"
for f in json verbose_json srt vtt; do
    "$BIN" stt "${COMMON[@]}" --format $f --output-dir "$TMP/o" "$WAV" || fail "stt --format $f"
done
[ -s "$TMP/o/jfk.json" ] || fail "no jfk.json"
grep -q '"segments"' "$TMP/o/jfk.json" || fail "verbose_json has no segments"
grep -q '"duration":[[:space:]]*11' "$TMP/o/jfk.json" || fail "verbose_json duration"
head -n 1 "$TMP/o/jfk.vtt" | grep -qx 'WEBVTT' || fail "vtt header"
grep -Eq '^[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3} --> [0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}$' "$TMP/o/jfk.vtt" || fail "vtt cue"
head -n 1 "$TMP/o/jfk.srt" | grep -qx '1' || fail "srt numbering"
grep -Eq '^[0-9]{2}:[0-9]{2}:[0-9]{2},[0-9]{3} --> ' "$TMP/o/jfk.srt" || fail "srt cue"

# Batched pipeline over fixed windows: same text as one window at a time.
a=$("$BIN" stt "${COMMON[@]}" --batch-size 1 --no-timestamps "$WAV" "$WAV") || fail "stt batch 1"
b=$("$BIN" stt "${COMMON[@]}" --batch-size 4 --no-timestamps "$WAV" "$WAV") || fail "stt batch 4"
[ "$a" = "$b" ] || fail "batched output differs"

# Bad usage is refused with exit code 2; a missing file fails with 1.
"$BIN" stt --model "$TMP/m" >/dev/null 2>&1; [ $? -eq 2 ] || fail "missing FILE not refused"
"$BIN" stt "${COMMON[@]}" --format docx "$WAV" >/dev/null 2>&1; [ $? -eq 2 ] || fail "bad format not refused"
"$BIN" stt "${COMMON[@]}" "$TMP/nope.wav" >/dev/null 2>&1; [ $? -eq 1 ] || fail "missing audio not reported"
echo "stt: ok"
