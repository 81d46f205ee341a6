#!/usr/bin/env bash
# choir against PyTorch on one GPU machine, in one run: the same work through
# `choir bench` (CUDA build) and bench/peers/torch_gpu.py, then the ratios.
#
#   bench/peers/gpu_vs_torch.sh --kokoro-src DIR [--skip whisper|kokoro] [--quick]
#
# Needs `choir` on PATH built with -DCHOIR_CUDA=ON (on a host without choir's
# Debian libraries: tools/device_pack.sh, then `. env.sh` of the unpacked pack),
# python3 with torch and transformers, and a checkout of github.com/hexgrad/kokoro
# for --kokoro-src. Fixtures come from $CHOIR_SHARED_DIR (default ../shared).
# Weights are random on both sides (Kokoro: the same randw-v1 weights), so the
# outputs are noise and only the cost is compared. Ratios are choir's
# throughput over PyTorch's (above 1: choir is faster).
set -uo pipefail
cd "$(dirname "$0")/../.."
SHARED=${CHOIR_SHARED_DIR:-../shared}
KSRC="" SKIP="" QUICK=0
while [ $# -gt 0 ]; do
  case "$1" in
    --kokoro-src) KSRC=$2; shift 2 ;;
    --skip) SKIP="$SKIP $2"; shift 2 ;;
    --quick) QUICK=1; shift ;;
    *) echo "gpu_vs_torch.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
LOG=${OUT:-/tmp}/gpu_vs_torch.log
mkdir -p "$(dirname "$LOG")"
: >"$LOG"
run() { echo "+ $*" | tee -a "$LOG"; "$@" 2>&1 | tee -a "$LOG"; }
field() { sed -n "s/.*$1=\([0-9.e+-]*\).*/\1/p" | head -1; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", b / a; else print "n/a" }'; }
declare -a ROWS=()

if [[ " $SKIP " != *" whisper "* ]]; then
  W=64
  [ $QUICK = 1 ] && W=32
  cw=$(run choir bench whisper --backend cuda --dims large-v3-turbo --batch 1,8,32 --audio-s $((W * 30)))
  tw=$(run python3 bench/peers/torch_gpu.py whisper --dims large-v3-turbo --batch 1,8,32 --windows $W --windows-b1 $W)
  for b in 1 8 32; do
    c=$(echo "$cw" | sed -n "s/.*long form *RTF \([0-9.]*\) .*batch $b,.*/\1/p" | head -1)
    t=$(echo "$tw" | grep "torch whisper batch $b:" | field rtf)
    ROWS+=("whisper large-v3-turbo long form, batch $b|$c|$t|$(ratio "$c" "$t")")
  done
  ce=$(echo "$cw" | sed -n 's/^encoder *\([0-9.]*\) ms per 30-s window (.*windows per pass.*/\1/p' | head -1)
  te=$(echo "$tw" | grep "torch whisper batch 32:" | field enc_ms)
  ROWS+=("whisper encoder ms per window (batched)|$ce|$te|$(ratio "$ce" "$te")")
fi

if [[ " $SKIP " != *" kokoro "* ]]; then
  if [ -z "$KSRC" ]; then
    echo "gpu_vs_torch.sh: --kokoro-src DIR is needed for Kokoro (or --skip kokoro)" >&2
    exit 2
  fi
  K=$SHARED/fixtures/kokoro/kokoro-v1
  M=$(mktemp -d)/kokoro
  run choir dev weights --manifest "$K/manifest.json" --config "$K/config.json" --out "$M" >/dev/null
  ck=$(run choir bench kokoro --model "$M" --voice "$SHARED/fixtures/kokoro/voices/af_heart.bin" \
        --backend cuda --batch 1,32)
  tk=$(run python3 bench/peers/torch_gpu.py kokoro --src "$KSRC" --manifest "$K/manifest.json" \
        --config "$K/config.json" --voice "$SHARED/fixtures/kokoro/voices/af_heart.bin" \
        --randw "$SHARED/fixtures/randw_reference.py")
  # the same with TF32 products, as PyTorch runs its f32 convolutions (cuDNN's default)
  ckt=$(run choir bench kokoro --model "$M" --voice "$SHARED/fixtures/kokoro/voices/af_heart.bin" \
        --backend cuda --batch 1,32 --gpu-dtype tf32)
  c1t=$(echo "$ckt" | sed -n 's/.* 1 requests at once.*RTF \([0-9.]*\).*/\1/p' | head -1)
  c32t=$(echo "$ckt" | sed -n 's/.*32 requests at once.*RTF \([0-9.]*\).*/\1/p' | head -1)
  c1=$(echo "$ck" | sed -n 's/.* 1 requests at once.*RTF \([0-9.]*\).*/\1/p' | head -1)
  c32=$(echo "$ck" | sed -n 's/.*32 requests at once.*RTF \([0-9.]*\).*/\1/p' | head -1)
  t1=$(echo "$tk" | grep "torch kokoro batch 1:" | field rtf)
  ROWS+=("kokoro, one 40-s piece, batch 1|$c1|$t1|$(ratio "$c1" "$t1")")
  ROWS+=("kokoro, 32 requests at once (torch: one piece)|$c32|$t1|$(ratio "$c32" "$t1")")
  ROWS+=("kokoro tf32, one 40-s piece, batch 1|$c1t|$t1|$(ratio "$c1t" "$t1")")
  ROWS+=("kokoro tf32, 32 requests at once|$c32t|$t1|$(ratio "$c32t" "$t1")")
fi

echo
echo "=== choir vs PyTorch on $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1), $(date -u +%F)"
printf '%-48s %12s %12s %10s\n' "work" "choir RTF" "torch RTF" "ratio"
for r in "${ROWS[@]}"; do
  IFS='|' read -r name c t x <<<"$r"
  printf '%-48s %12s %12s %10s\n' "$name" "${c:-n/a}" "${t:-n/a}" "$x"
done
echo "(RTF: compute seconds per second of audio, lower is better; the encoder row is ms per window;"
echo " ratio: choir throughput over PyTorch's. Full log: $LOG)"
