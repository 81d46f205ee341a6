#!/usr/bin/env bash
# VibeVoice-ASR at the published 8.3 B dimensions, random bf16 weights, on one
# GPU machine in one call: choir (the standalone CUDA project's
# choir_vibevoice_gpu_check --bench 7b) and transformers
# (bench/peers/vibevoice_torch.py: VibeVoiceAsrForConditionalGeneration built
# from configs, bf16, SDPA) on the same audio lengths, then one table with
# the ratios and the weight-streaming bound of a decode step measured in the
# same run (language model bytes without the embedding table over the
# device-to-device copy bandwidth, bytes read + written).
#
#   bash bench/peers/vibevoice_gpu.sh [--check] [--audio-min 1,10] [--steps 32] [--layers 28] [--impl auto|hf|spec]
#        [--batch 8,32 [--batch-min 10]] [--bin PATH] [--tokens-per-min 300]
#
# --check first runs choir_vibevoice_gpu_check (CUDA against the CPU at
# reduced dimensions; the failures and the attention lines are printed).
# --bin runs that choir_vibevoice_gpu_check (a packed build of the whole
# project, tools/device_pack.sh) instead of building the standalone one.
# --batch times choir alone decoding B sequences at the context of
# --batch-min minutes in batched steps (aggregate tokens/s against one
# sequence at that context; transformers has no such path to compare).
#
# Run from anywhere on a machine with nvcc, cmake, python3, torch and
# transformers (the lent H200); nothing is downloaded. Everything printed also
# goes to $OUT/vibevoice_gpu.txt (or /tmp). About 3 minutes on an H200.
set -uo pipefail
cd "$(dirname "$0")/../.."
MIN=1,10 STEPS=32 LAYERS=28 IMPL=auto CHECK=0 BATCH= BMIN=10 BUILD=${BUILD:-/tmp/vv-peer} BIN= TPM=300
while [ $# -gt 0 ]; do
  case "$1" in
    --audio-min) MIN=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --layers) LAYERS=$2; shift 2 ;;
    --impl) IMPL=$2; shift 2 ;;
    --check) CHECK=1; shift ;;
    --batch) BATCH=$2; shift 2 ;;
    --batch-min) BMIN=$2; shift 2 ;;
    --bin) BIN=$2; shift 2 ;;
    --tokens-per-min) TPM=$2; shift 2 ;;
    *) echo "vibevoice_gpu.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
LOG=${OUT:-/tmp}/vibevoice_gpu.txt
mkdir -p "$(dirname "$LOG")"
exec > >(tee "$LOG") 2>&1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null
t0=$SECONDS
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
if [ -z "$BIN" ]; then
  cmake -S tests/cuda -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release >"$BUILD.log" 2>&1 &&
    cmake --build "$BUILD" -j"$(nproc)" --target choir_vibevoice_gpu_check >>"$BUILD.log" 2>&1 ||
    { tail -40 "$BUILD.log"; echo "vibevoice_gpu: build failed"; exit 1; }
  echo "built in $((SECONDS - t0)) s"
  BIN=$BUILD/cuda/choir_vibevoice_gpu_check
fi
if [ $CHECK = 1 ]; then
  echo "=== choir_vibevoice_gpu_check"
  timeout 90 "$BIN" >"$BUILD.check.txt" 2>&1
  echo "exit $?"
  grep -E "FAIL|attention| passed, " "$BUILD.check.txt"
fi

echo "=== choir (CUDA backend)"
C=$(timeout 150 "$BIN" --bench 7b --layers "$LAYERS" --audio-min "$MIN" \
      --steps "$STEPS" ${BATCH:+--batch "$BATCH" --batch-min "$BMIN"} 2>&1 | tee /dev/stderr)
echo "=== transformers"
T=$(PYTHONUNBUFFERED=1 timeout 150 python3 bench/peers/vibevoice_torch.py --audio-min "$MIN" --steps "$STEPS" \
      --layers "$LAYERS" --impl "$IMPL" 2>&1 | tee /dev/stderr)

val() { sed -n "s/.* $2=\([0-9.e+-]*\).*/\1/p" <<<"$1" | head -1; }
row() { grep "vibevoice $2 min:" <<<"$1"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else print "n/a" }'; }
bound=$(val "$T" bound_ms)
echo
echo "=== VibeVoice-ASR 7B dims, $LAYERS LM layers, bf16, choir vs transformers $(date -u +%F)"
echo "weight-streaming bound (measured copy $(val "$T" copy_tbs) TB/s, $(val "$T" stream_gb) GB a step): ${bound:-n/a} ms/token"
printf '%-6s %-22s %12s %12s %8s\n' "audio" "figure" "choir" "transformers" "ratio"
for m in ${MIN//,/ }; do
  c=$(row "$C" "$m") t=$(row "$T" "$m")
  ce=$(val "$c" enc_s) te=$(val "$t" enc_s)
  cp=$(val "$c" prefill_tps) tp=$(val "$t" prefill_tps)
  cd=$(val "$c" decode_ms) td=$(val "$t" decode_ms) cgr=$(val "$c" graph_ms)
  cg=$(val "$c" peak_gb) tg=$(val "$t" peak_gb)
  printf '%-6s %-22s %12s %12s %8s\n' "${m}m" "encoders s" "${ce:-n/a}" "${te:-n/a}" "$(ratio "$te" "$ce")"
  printf '%-6s %-22s %12s %12s %8s\n' "" "prefill tokens/s" "${cp:-n/a}" "${tp:-n/a}" "$(ratio "$cp" "$tp")"
  printf '%-6s %-22s %12s %12s %8s\n' "" "decode ms/token" "${cd:-n/a}" "${td:-n/a}" "$(ratio "$td" "$cd")"
  printf '%-6s %-22s %12s %12s %8s\n' "" "decode ms/token, graph" "${cgr:-n/a}" "${td:-n/a}" "$(ratio "$td" "$cgr")"
  tgen=$(val "$t" decode_generate_ms)
  [ -n "$tgen" ] && printf '%-6s %-22s %12s %12s %8s\n' "" "decode ms, generate()" "${cgr:-$cd}" "$tgen" "$(ratio "$tgen" "${cgr:-$cd}")"
  printf '%-6s %-22s %12s %12s %8s\n' "" "decode / bound" "$(ratio "$cd" "$bound")" "$(ratio "$td" "$bound")" ""
  printf '%-6s %-22s %12s %12s %8s\n' "" "graph decode / bound" "$(ratio "$cgr" "$bound")" "" ""
  printf '%-6s %-22s %12s %12s %8s\n' "" "peak device GB" "${cg:-n/a}" "${tg:-n/a}" ""
  # End to end for a transcript of TPM tokens a minute of audio (an hour of
  # speech is about 18,000 tokens): encoders + the prompt's prefill + that
  # many decode steps (choir's graph-replayed step where it has one).
  cn=$(val "$c" prompt) tn=$(val "$t" prompt)
  e2e() { awk -v e="$1" -v n="$2" -v p="$3" -v d="$4" -v k="$5" \
    'BEGIN { if (e > 0 && n > 0 && p > 0 && d > 0) printf "%.1f", e + n / p + k * d / 1000; else print "n/a" }'; }
  k=$(awk -v m="$m" -v t="$TPM" 'BEGIN { printf "%d", m * t }')
  ce2=$(e2e "$ce" "$cn" "$cp" "${cgr:-$cd}" "$k") te2=$(e2e "$te" "$tn" "$tp" "$td" "$k")
  printf '%-6s %-22s %12s %12s %8s\n' "" "end to end s, $k tok" "$ce2" "$te2" "$(ratio "$te2" "$ce2")"
  printf '%-6s %-22s %12s %12s %8s\n' "" "  x real time" "$(ratio "$(awk -v m="$m" 'BEGIN{print m*60}')" "$ce2")" \
    "$(ratio "$(awk -v m="$m" 'BEGIN{print m*60}')" "$te2")" ""
  if [ -n "$tgen" ]; then
    tg2=$(e2e "$te" "$tn" "$tp" "$tgen" "$k")
    printf '%-6s %-22s %12s %12s %8s\n' "" "  same, generate()" "$ce2" "$tg2" "$(ratio "$tg2" "$ce2")"
  fi
done
for b in ${BATCH//,/ }; do
  c=$(grep "vibevoice batch $b at" <<<"$C")
  printf '%-6s %-22s %12s %12s %8s\n' "${BMIN}m" "batch $b: tokens/s" "$(val "$c" agg_tps)" "" ""
  printf '%-6s %-22s %12s %12s %8s\n' "" "  ms/step" "$(val "$c" batch_step_ms)" "" ""
  printf '%-6s %-22s %12s %12s %8s\n' "" "  x one sequence" "$(val "$c" speedup)" "" ""
  printf '%-6s %-22s %12s %12s %8s\n' "" "  ms/step, graph" "$(val "$c" graph_step_ms)" "" ""
  printf '%-6s %-22s %12s %12s %8s\n' "" "  x one seq., graph" "$(val "$c" graph_speedup)" "" ""
  printf '%-6s %-22s %12s %12s %8s\n' "" "  ms/step, dev. greedy" "$(val "$c" greedy_step_ms)" "" ""
  printf '%-6s %-22s %12s %12s %8s\n' "" "  x one seq., greedy" "$(val "$c" greedy_speedup)" "" ""
  printf '%-6s %-22s %12s %12s %8s\n' "" "  peak device GB" "$(val "$c" peak_gb)" "" ""
done
echo "(ratio: choir's speed over transformers'; above 1, choir is faster. Log: $LOG)"
