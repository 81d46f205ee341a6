#!/usr/bin/env bash
# GPUs on the command line: `choir stats` shows each device's memory and
# batches and each model's replicas and placement (from a saved Prometheus
# page); `choir serve` takes --gpus / --gpu-memory-fraction and refuses GPUs
# that do not exist (or any, in a build without CUDA) with a reason.
set -euo pipefail
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat > "$dir/metrics" <<'PAGE'
choir_requests_submitted_total 40
choir_device_memory_bytes{device="cpu",kind="budget"} 1073741824
choir_device_memory_bytes{device="cpu",kind="weights"} 104857600
choir_device_memory_bytes{device="cpu",kind="reserved"} 0
choir_device_memory_bytes{device="cpu",kind="peak"} 209715200
choir_device_memory_bytes{device="gpu0",kind="budget"} 10737418240
choir_device_memory_bytes{device="gpu0",kind="weights"} 6442450944
choir_device_memory_bytes{device="gpu0",kind="reserved"} 1048576
choir_device_memory_bytes{device="gpu0",kind="peak"} 7516192768
choir_device_batches_total{device="cpu"} 3
choir_device_batches_total{device="gpu0"} 17
choir_model_replicas{model="whisper"} 2
choir_model_placement{model="whisper",device="cpu"} 0
choir_model_placement{model="whisper",device="gpu0"} 1
choir_model_placement{model="whisper",device="gpu1"} 1
choir_model_replicas{model="kokoro"} 0
choir_model_placement{model="kokoro",device="cpu"} 0
PAGE
out=$("$CHOIR_BIN" stats --url "file://$dir/")
echo "$out"
grep -Eq '^  cpu +100 / 0 / 200 of 1024; 3$' <<<"$out"
[ "$(grep -Ec '^  (cpu|gpu0) ' <<<"$out")" -eq 2 ]
grep -Eq '^  gpu0 +6144 / 1 / 7168 of 10240; 17$' <<<"$out"
grep -Eq '^  whisper +2: gpu0 gpu1$' <<<"$out"
grep -Eq '^  kokoro +0: not loaded$' <<<"$out"
"$CHOIR_BIN" serve --help | grep -q -- '--gpus all|none|0,1'
mkdir "$dir/models"
set +e
"$CHOIR_BIN" serve --models "$dir/models" --port 0 --gpus 99 2>"$dir/err"
rc=$?
set -e
cat "$dir/err"
[ $rc -eq 2 ]
grep -Eq 'built without CUDA|there is no GPU 99' "$dir/err"
set +e
"$CHOIR_BIN" serve --models "$dir/models" --port 0 --gpu-memory-fraction 2 2>"$dir/err"
rc=$?
set -e
[ $rc -eq 2 ]
grep -q 'gpu-memory-fraction' "$dir/err"
echo ok
