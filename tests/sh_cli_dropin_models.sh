#!/usr/bin/env bash
# The CLI with real adapters on fixture weights (random weights: the words
# and sounds are noise; what is checked is the plumbing): `choir stt -` and
# `choir sts -` read standard input and give what the file gives;
# --output-dir is created; `choir tts -o x.mp3` writes MP3 (the format from
# the extension), --format still wins; `choir tts` reads its text from
# standard input when given none (or "-").
# ctest: labels=slow;nosan
set -uo pipefail
BIN=${CHOIR_BIN:?}
SH=${CHOIR_SHARED_DIR:?}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/choir-cli-models-XXXXXX")
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
weights() { # FIXTURE-DIR OUT
    "$BIN" dev weights --manifest "$1/manifest.json" --config "$1/config.json" --out "$2" >/dev/null 2>&1 ||
        fail "dev weights $1"
}

# stt: - equals the file; --output-dir is made, parents too
weights "$SH/fixtures/whisper/whisper-ml80" "$TMP/whisper"
STT=(--model "$TMP/whisper" --tokenizer "$SH/fixtures/real/tokenizer/multilingual.tiktoken" --language en
    --temperature 0 --max-tokens 4)
WAV=$SH/fixtures/audio/hello16k.wav
"$BIN" stt "${STT[@]}" --format srt "$WAV" >"$TMP/file.srt" 2>/dev/null || fail "stt FILE"
"$BIN" stt "${STT[@]}" --format srt - <"$WAV" >"$TMP/stdin.srt" 2>/dev/null || fail "stt -"
cmp "$TMP/file.srt" "$TMP/stdin.srt" || fail "stt - differs from stt FILE"
"$BIN" stt "${STT[@]}" --format srt --output-dir "$TMP/new/deeper" - <"$WAV" 2>/dev/null || fail "stt --output-dir"
cmp "$TMP/new/deeper/stdin.srt" "$TMP/file.srt" || fail "--output-dir not created, or stdin.srt differs"
: >"$TMP/a-file"
"$BIN" stt "${STT[@]}" --output-dir "$TMP/a-file/x" "$WAV" >/dev/null 2>"$TMP/err" && fail "--output-dir under a file"
grep -q 'is not a folder\|cannot create' "$TMP/err" || fail "--output-dir failure message: $(cat "$TMP/err")"

# sts: - equals the file
weights "$SH/fixtures/mossformer2/mossformer2-se-48k" "$TMP/mf2"
IN=$SH/fixtures/audio/jfk48k_3s.wav
"$BIN" sts --model "$TMP/mf2" --quiet "$IN" -o "$TMP/file.wav" 2>/dev/null || fail "sts FILE"
"$BIN" sts --model "$TMP/mf2" --quiet - -o "$TMP/stdin.wav" <"$IN" 2>/dev/null || fail "sts -"
cmp "$TMP/file.wav" "$TMP/stdin.wav" || fail "sts - differs from sts FILE"
ls "${TMPDIR:-/tmp}"/choir-stdin-* >/dev/null 2>&1 && fail "sts left its standard-input copy behind"

# tts: the output's extension says the format
weights "$SH/fixtures/kokoro/kokoro-v1" "$TMP/kokoro"
mkdir -p "$TMP/kokoro/voices"
cp "$SH/fixtures/kokoro/voices/"*.bin "$TMP/kokoro/voices/"
TTS=(--model "$TMP/kokoro" --voice af_heart)
"$BIN" tts "${TTS[@]}" -o "$TMP/x.mp3" "Hi." 2>/dev/null || fail "tts -o x.mp3"
"$BIN" tts "${TTS[@]}" -o "$TMP/x.aac" "Hi." 2>/dev/null || fail "tts -o x.aac"
"$BIN" tts "${TTS[@]}" --format wav -o "$TMP/wav.mp3" "Hi." 2>/dev/null || fail "tts --format wav -o wav.mp3"
"$BIN" tts "${TTS[@]}" -o "$TMP/x.wav" "Hi." 2>/dev/null || fail "tts -o x.wav"
# text on standard input: the same speech as the same text in argv
"$BIN" tts "${TTS[@]}" --zero-noise -o "$TMP/arg.wav" "Hi there." 2>/dev/null || fail "tts TEXT"
printf 'Hi there.' | "$BIN" tts "${TTS[@]}" --zero-noise -o "$TMP/stdin.wav" 2>/dev/null || fail "tts <stdin"
cmp "$TMP/arg.wav" "$TMP/stdin.wav" || fail "tts from standard input differs from tts TEXT"
printf 'Hi there.' | "$BIN" tts "${TTS[@]}" --zero-noise -o "$TMP/dash.wav" - 2>/dev/null || fail "tts -"
cmp "$TMP/arg.wav" "$TMP/dash.wav" || fail "tts - differs from tts TEXT"
python3 - "$TMP" <<'PY' || fail "tts output formats"
import sys
d = sys.argv[1]
mp3 = open(d + "/x.mp3", "rb").read()
assert mp3[:3] == b"ID3" or (mp3[0] == 0xFF and mp3[1] & 0xE0 == 0xE0), mp3[:4]
aac = open(d + "/x.aac", "rb").read()
assert aac[0] == 0xFF and aac[1] & 0xF6 == 0xF0, aac[:4]
assert open(d + "/wav.mp3", "rb").read()[:4] == b"RIFF", "--format wav lost to the extension"
assert open(d + "/x.wav", "rb").read()[:4] == b"RIFF"
PY
echo "sh_cli_dropin_models: ok"
