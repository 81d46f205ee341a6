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

# Word timestamps: verbose_json lists the words (OpenAI's {word, start, end},
# in order, inside the audio, the segments' words); srt / vtt are laid out by
# words: --max-line-width bounds each line, --max-line-count the lines of a
# cue, --highlight-words gives one cue per word with it underlined.
W=("${COMMON[@]}" --max-tokens 24 --word-timestamps)
"$BIN" stt "${W[@]}" --format verbose_json "$WAV" >"$TMP/w.json" || fail "stt --word-timestamps verbose_json"
"$BIN" stt "${W[@]}" --format srt --max-line-width 16 --max-line-count 2 "$WAV" >"$TMP/w.srt" || fail "srt by words"
"$BIN" stt "${W[@]}" --format vtt --highlight-words "$WAV" >"$TMP/h.vtt" || fail "vtt --highlight-words"
"$BIN" stt "${W[@]}" --format srt "$WAV" >"$TMP/p.srt" || fail "srt by words, no width"
python3 - "$TMP" <<'PY' || fail "word timestamps in the CLI's output"
import json, re, sys
d = sys.argv[1]
js = json.load(open(d + "/w.json"))
words = js["words"]
assert len(words) >= 3, words
assert all(sorted(w) == ["end", "start", "word"] for w in words), words[0]
prev = 0
for w in words:
    assert prev <= w["start"] <= w["end"] <= js["duration"], w
    assert w["word"] == w["word"].strip() and w["word"], w
    prev = w["end"]
# the words are the segments' text, in order
joined = "".join(w["word"] for w in words).replace(" ", "")
assert joined == "".join(s["text"] for s in js["segments"]).replace(" ", ""), (joined, js["segments"])
def cues(path):
    out = []
    for block in open(path).read().strip().split("\n\n"):
        lines = block.split("\n")
        if lines[0] == "WEBVTT":
            continue
        i = next(k for k, l in enumerate(lines) if "-->" in l)
        a, b = [sum(float(x) * m for x, m in zip(re.split("[:]", t.replace(",", ".")), (3600, 60, 1)))
                for t in lines[i].split(" --> ")]
        out.append((a, b, lines[i + 1:]))
    return out
w = cues(d + "/w.srt")
assert w and all(len(c[2]) <= 2 for c in w), w
# a line longer than 16 holds a single word (openai does not cut words)
assert all(len(l) <= 16 or " " not in l.strip() for c in w for l in c[2]), w
assert w[0][0] == words[0]["start"] and abs(w[-1][1] - words[-1]["end"]) < 1e-3, (w[0], w[-1], words[-1])
h = cues(d + "/h.vtt")
under = [c for c in h if any("<u>" in l for l in c[2])]
assert len(under) == len(words), (len(under), len(words))
for c, wd in zip(under, words):
    assert "<u>" + wd["word"] + "</u>" in "".join(c[2]).replace("\n", " ") or wd["word"] in "".join(c[2]), (c, wd)
    assert abs(c[0] - wd["start"]) < 1e-3 and abs(c[1] - wd["end"]) < 1e-3, (c, wd)
# without a width: one cue per segment with words, over its words' span
p = cues(d + "/p.srt")
segs = [s for s in js["segments"]]
assert len(p) == len(segs), (p, segs)
PY
"$BIN" stt "${COMMON[@]}" --max-line-width 20 "$WAV" >/dev/null 2>&1; [ $? -eq 2 ] || fail "--max-line-width alone not refused"
"$BIN" stt "${W[@]}" --no-timestamps "$WAV" >/dev/null 2>&1; [ $? -eq 2 ] || fail "--word-timestamps --no-timestamps not refused"

# Bad usage is refused with exit code 2; a missing file fails with 1.
"$BIN" stt --model "$TMP/m" >/dev/null 2>&1; [ $? -eq 2 ] || fail "missing FILE not refused"
"$BIN" stt "${COMMON[@]}" --format docx "$WAV" >/dev/null 2>&1; [ $? -eq 2 ] || fail "bad format not refused"
"$BIN" stt "${COMMON[@]}" "$TMP/nope.wav" >/dev/null 2>&1; [ $? -eq 1 ] || fail "missing audio not reported"
echo "stt: ok"
