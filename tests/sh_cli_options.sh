#!/usr/bin/env bash
# The commands' table-driven option parser (src/cli/opt.c): every flag of a
# converted command is parsed and bounded by its table row, --help lists the
# rows, and bad values, missing values, unknown flags and extra arguments
# exit 2 with a message naming them.
set -euo pipefail
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
refuses() { # refuses REASON COMMAND...
    local want=$1 rc=0
    shift
    "$@" >/dev/null 2>"$dir/err" || rc=$?
    if [ $rc -ne 2 ] || ! grep -qF -- "$want" "$dir/err"; then
        echo "FAIL: $* -> exit $rc, wanted 2 and '$want':"; cat "$dir/err"; exit 1
    fi
}
refuses "--pad needs a whole number in [0, 3600000], got '2.5'" "$CHOIR_BIN" vad --pad 2.5 x.wav
refuses "--threshold needs a number in [0.01, 1], got '7'" "$CHOIR_BIN" vad --threshold 7 x.wav
refuses "--threshold needs a value" "$CHOIR_BIN" vad x.wav --threshold
refuses "unknown or incomplete option '--bogus'" "$CHOIR_BIN" vad --bogus x.wav
refuses "unexpected argument 'b.wav' (one input file only)" "$CHOIR_BIN" vad a.wav b.wav
refuses "--chunk-seconds needs a number, got 'abc'" "$CHOIR_BIN" sts --model m --chunk-seconds abc x.wav
refuses "--threads needs a whole number in [1, 1024], got '0'" "$CHOIR_BIN" sts --model m --threads 0 x.wav
refuses "--seed needs a whole number, got 'x'" "$CHOIR_BIN" sts --model m --seed x x.wav
refuses "--seed needs a whole number, got '-1'" "$CHOIR_BIN" sep --model m --prompt p --seed -1 x.wav
refuses "--steps needs a whole number in [1, 1024], got '0'" "$CHOIR_BIN" sep --model m --prompt p --steps 0 x.wav
refuses "--method is midpoint or euler, got 'rk4'" "$CHOIR_BIN" sep --model m --prompt p --method rk4 x.wav
refuses "--prompt TEXT is required" "$CHOIR_BIN" sep --model m x.wav
refuses "--q-bits needs a whole number in [1, 1024], got 'four'" "$CHOIR_BIN" convert --in a --out b --q-bits four
refuses "--in SRC and --out DST are required" "$CHOIR_BIN" convert --in a
refuses "--dead needs a whole number in [0, 1000000], got 'ten'" "$CHOIR_BIN" jobs --stream s --dead ten
refuses "--stream NAME is required" "$CHOIR_BIN" jobs --wait
refuses "--stream, --task, --out and at least one PATH are required" "$CHOIR_BIN" submit --stream s --task vad
refuses "unknown or incomplete option '--bogus'" "$CHOIR_BIN" stats --bogus
refuses "--concurrency needs a whole number in [1, 256], got '0'" "$CHOIR_BIN" worker --stream s --model m --concurrency 0
refuses "--model at most 16 times" "$CHOIR_BIN" worker --stream s $(for i in $(seq 17); do printf -- '--model m%d ' "$i"; done)
refuses "--models at most 16 times" "$CHOIR_BIN" info $(for i in $(seq 17); do printf -- '--models d%d ' "$i"; done)
refuses "--speed needs a number in [0.01, 100], got 'fast'" "$CHOIR_BIN" tts --model m --voice v -o x.wav --speed fast hi
refuses "unexpected argument 'there' (one TEXT only)" "$CHOIR_BIN" tts --model m --voice v -o x.wav hi there
refuses "--batch needs a whole number in [1, 1024], got '0'" "$CHOIR_BIN" tts --model m --voice v -o x.wav --batch 0 hi
refuses "--beam needs a whole number in [1, 16], got 'wide'" "$CHOIR_BIN" stt --model m --beam wide x.wav
# each bound once, in the table (they were checked twice, with other limits, after it)
refuses "--beam needs a whole number in [1, 16], got '17'" "$CHOIR_BIN" stt --model m --beam 17 x.wav
refuses "--best-of needs a whole number in [1, 16], got '0'" "$CHOIR_BIN" stt --model m --best-of 0 x.wav
refuses "--batch-size needs a whole number in [1, 64], got '65'" "$CHOIR_BIN" stt --model m --batch-size 65 x.wav
refuses "--max-tokens needs a whole number in [1, 224], got '225'" "$CHOIR_BIN" stt --model m --max-tokens 225 x.wav
refuses "--task is transcribe or translate" "$CHOIR_BIN" stt --model m --task summarise x.wav
# choir serve: its own rows, the checks a row cannot make, and the engine's flags
mkdir "$dir/m"
serve() { "$CHOIR_BIN" serve --models "$dir/m" --port 0 "$@"; }
refuses "--port needs a whole number in [0, 65535], got '70000'" serve --port 70000
refuses "--port needs a value" serve --port
refuses "--max-upload needs a whole number in [1, 1048576], got '0'" serve --max-upload 0
refuses "--request-timeout needs a number in [0.001, 1000000000], got 'soon'" serve --request-timeout soon
refuses "--idle-timeout needs a number in [1, 1000000000], got '0.5'" serve --idle-timeout 0.5
refuses "--max-client-connections needs -1 (no limit) or at least 1, got '0'" serve --max-client-connections 0
refuses "--body-min-rate needs a positive number of bytes/s, or -1 for none" serve --body-min-rate 0
refuses "--alias needs NAME=MODEL, got 'tts-1'" serve --alias tts-1
refuses "--voice-alias needs NAME=VOICE, got '=af_heart'" serve --voice-alias =af_heart
refuses "--max-audio-s ID=S needs a model id and seconds" serve --max-audio-s kokoro=long
# one model's limit takes the engine flag's bounds (1..1e6 s)
refuses "--max-audio-s ID=S needs a model id and seconds, got 'kokoro=0.5' (--max-audio-s: bad value '0.5'" serve --max-audio-s kokoro=0.5
refuses "--max-audio-s ID=S needs a model id and seconds, got '=60'" serve --max-audio-s =60
refuses "max-audio-s: bad value '-3'" serve --max-audio-s -3
refuses "--cors needs an origin" serve --cors ''
refuses "--models at most 16 times" "$CHOIR_BIN" serve $(for i in $(seq 17); do printf -- '--models d%d ' "$i"; done)
refuses "max-batch: bad value '0'" serve --max-batch 0
refuses "unknown or incomplete option '--bogus'" serve --bogus
refuses "unexpected argument 'extra'" serve extra
out=$("$CHOIR_BIN" serve --help)
for flag in --models --host --port --port-file --api-key --admin-key --max-upload --no-ui --cors --alias \
    --voice-alias --json --preload --preload-strict --request-timeout --max-audio-s --max-connections \
    --max-client-connections --header-timeout --keepalive-timeout --body-timeout --body-min-rate \
    --idle-timeout --shutdown-deadline --profile --memory-budget --max-batch --gpus; do
    grep -q -- "^  $flag" <<<"$out" || { echo "FAIL: serve --help lacks $flag"; exit 1; }
done
# the usage is the table: every row is listed, help exits 0 on stdout
out=$("$CHOIR_BIN" vad --help)
for flag in --model --probs --threshold --min-speech --min-silence --pad --max-speech; do
    grep -q -- "^  $flag" <<<"$out" || { echo "FAIL: vad --help lacks $flag"; exit 1; }
done
"$CHOIR_BIN" sts -h | grep -q -- '^  --overlap-seconds O'
"$CHOIR_BIN" sep --help | grep -q -- '^  --chunk-seconds S'
"$CHOIR_BIN" convert --help | grep -q -- '^  --mlx-exact'

# choir-dev (choir bench / choir dev) on the same parser: values that atoi/atof
# read as 0 (or that were dropped in silence) are refused by name, exit 2
refuses "--seconds needs a number in [0.001, 3600], got '0'" "$CHOIR_BIN" bench vad --seconds 0
refuses "--batch must be 1..256" "$CHOIR_BIN" bench vad --batch 1,0
refuses "--steps needs a whole number in [1, 1048576], got 'x'" "$CHOIR_BIN" bench whisper --steps x
refuses "--dims is tiny, base, small, medium, large-v3 or large-v3-turbo, got 'huge'" "$CHOIR_BIN" bench whisper --dims huge
refuses "--tf32 is on or off, got 'yes'" "$CHOIR_BIN" bench whisper --tf32 yes
refuses "--requests needs a whole number in [0, 1048576], got 'many'" "$CHOIR_BIN" bench kokoro --model m --requests many
refuses "--batch 1,: want up to 16 sizes" "$CHOIR_BIN" bench kokoro --model m --batch 1,
refuses "--method is midpoint or euler, got 'rk4'" "$CHOIR_BIN" bench sam-audio --method rk4
refuses "--backend is cpu or cuda, got 'tpu'" "$CHOIR_BIN" bench sam-audio --backend tpu
refuses "--isa is ref, got 'avx2'" "$CHOIR_BIN" bench quant --isa avx2
refuses "--m needs up to 8 whole numbers" "$CHOIR_BIN" bench quant --m 1,2,3,4,5,6,7,8,9
refuses "--q-bits is 4 or 8, got '6'" "$CHOIR_BIN" bench vibevoice --q-bits 6
refuses "--audio-min needs a number in [0.001, 90], got '-1'" "$CHOIR_BIN" bench vibevoice --audio-min -1
refuses "--chunk-seconds needs a number, got 'long'" "$CHOIR_BIN" bench sts --model m --chunk-seconds long
refuses "--loads needs 1..16 rates > 0" "$CHOIR_BIN" bench engine --loads 5x
# every list flag is read by one helper (cli_parse_numbers): an empty item,
# NaN or a fraction where whole numbers are wanted are refused alike
refuses "--loads needs 1..16 rates > 0" "$CHOIR_BIN" bench engine --loads 10,nan
refuses "--batch is a list of 1..64 (at most 8)" "$CHOIR_BIN" bench whisper --batch 8,
refuses "--batch 1,2.5: want up to 16 sizes" "$CHOIR_BIN" bench kokoro --model m --batch 1,2.5
refuses "--m needs up to 8 whole numbers" "$CHOIR_BIN" bench quant --m 1,,2
refuses "--shards needs a whole number in [1, 100000], got 'two'" "$CHOIR_BIN" dev weights --manifest m --out o --shards two
refuses "--manifest and --out are required" "$CHOIR_BIN" dev weights --out o
refuses "--greedy-min needs a number in [0, 1], got '2'" "$CHOIR_BIN" dev parity whisper --greedy-min 2
refuses "--dur-tol needs a whole number in [0, 1048576], got '1.5'" "$CHOIR_BIN" dev parity kokoro --dur-tol 1.5
refuses "--tol-net needs a number in [0, 1000000000], got 'tight'" "$CHOIR_BIN" dev parity mossformer2 --tol-net tight
refuses "--isa is ref, got 'x'" "$CHOIR_BIN" dev parity sam-audio --isa x
refuses "unknown or incomplete option '--bogus'" "$CHOIR_BIN" dev parity vibevoice --bogus
"$CHOIR_BIN" bench whisper --help | grep -q -- '^  --greedy-steps N'
"$CHOIR_BIN" dev parity kokoro -h | grep -q -- '^  --force-durations'
echo ok
