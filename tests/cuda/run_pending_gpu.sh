#!/usr/bin/env bash
# The GPU checks and the A/B benches of the switches that were drafts until
# their H100 run of 7 Dec 2026 (now on by default; each =0 turns it off), in
# parts that each fit one 10-minute call. For a packed CUDA build
# (tools/device_pack.sh with CHOIR_PACK_EXTRA naming the check programs and,
# for the engine part, CHOIR_PACK_FIXTURES naming real/tokenizer/qwen2.5):
#
#   mkdir -p /tmp/p && tar -xJf PACK -C /tmp/p && . /tmp/p/env.sh
#   bash tests/cuda/run_pending_gpu.sh checks|defaults|final|verify|att-tc|att-tc-2|night|pdl|engine-chunks|q8-fx|prefill-chunks|q8-shape7|vv|q8|kokoro|engine|profile|drafts[-checks|-ab] [LIMIT_S]
#
# LIMIT_S (default 560): a step that would start with less than 25 s left is
# skipped. Everything goes to $OUT/pending-PART.log (or /tmp); the terminal
# gets the verdict lines and the figures. The switches (docs/cuda.md):
#   CHOIR_VV_FLASH_V2   VibeVoice's second flash prefill kernel
#   CHOIR_VV_ATT_V2     VibeVoice's decode attention v2 (splits sized to the device, combine folded)
#   CHOIR_VV_ROPE_KV    a decode step's ropes and new cache rows in one launch
#   CHOIR_VV_PREFILL_FUSED  q/k/v and gate/up grouped into one product each
#   CHOIR_Q8_GEMV=0..6  the 8-bit GEMV's shape (4 by default); CHOIR_Q8_DEQUANT the 16-byte dequantize
#   CHOIR_KOKORO_FRONT_BATCH  Kokoro's ALBERT attention and text encoder as batches
#   CHOIR_CONV_WIDE     the convolutions' wide tile (bf16 by default; 1 also TF32)
#   CHOIR_KOKORO_TOUCH_AUDIO  the audio buffers written on the host while the generator runs
# Part `drafts`: the switches written on 7 Dec late morning, off by default
# and NOT RUN ON A GPU when committed (docs/cuda.md): CHOIR_GEMV_MMA,
# CHOIR_VV_FLASH_WG=1|2, CHOIR_KOKORO_CONV_STATS, CHOIR_CUDA_RMS_CACHE,
# CHOIR_CUDA_SKINNY_ACC.
set -u
PART=${1:-checks}
LIMIT=${2:-560}
T0=$SECONDS
LOG=${OUT:-/tmp}/pending-$PART.log
: >"$LOG"
command -v choir_vibevoice_gpu_check >/dev/null || {
    echo "run_pending_gpu.sh: no packed build on PATH (. /tmp/p/env.sh first)" >&2
    exit 2
}
nvidia-smi -L
FAILED=0
# st NAME TIMEOUT FILTER COMMAND...: the whole output to $LOG, the lines
# matching FILTER (all when empty) to the terminal.
st() {
    local name=$1 t=$2 filter=$3
    shift 3
    local left=$((LIMIT - (SECONDS - T0)))
    if [ $left -lt 25 ]; then
        echo "=== SKIP $name ($left s left)"
        return
    fi
    [ "$t" -gt "$left" ] && t=$left
    echo "=== $name"
    local t1=$SECONDS out
    out=$(timeout "$t" "$@" 2>&1)
    local rc=$?
    printf '===== %s (exit %d)\n%s\n' "$name" "$rc" "$out" >>"$LOG"
    if [ -z "$filter" ]; then echo "$out"; else grep -E "$filter" <<<"$out" | head -60; fi
    echo "--- $name: exit $rc, $((SECONDS - t1)) s"
    [ $rc -ne 0 ] && [ $rc -ne 77 ] && FAILED=$((FAILED + 1))
}
# Kokoro's page-locked staging (CHOIR_KOKORO_PINNED) off, on, off, on at
# 32 pieces, each in a process of its own, with the call's profile line.
# Each process runs the 32 pieces twice (--batch 32,32): the first call
# grows the page-locked block (a few hundred MB of cudaHostAlloc), the
# second is what a serving process sees after its first batch.
kokoro_pinned_ab() {
    K=$CHOIR_SHARED_DIR/fixtures/kokoro/kokoro-v1
    st weights 60 '' choir dev weights --manifest "$K/manifest.json" --config "$K/config.json" --out /tmp/kmodel
    for v in 0 1 0 1; do
        st "kokoro-pinned-$v" 60 'requests at once|kokoro decode: 32|error' env CHOIR_KOKORO_PINNED=$v \
            CHOIR_KOKORO_PROFILE=1 choir bench kokoro --model /tmp/kmodel \
            --voice "$CHOIR_SHARED_DIR/fixtures/kokoro/voices/af_heart.bin" --backend cuda --batch 32,32 --gpu-dtype bf16-tf32
    done
}
CHK='FAIL|passed|PASS$|check: PASS|error'
VV="choir_vibevoice_gpu_check --bench 7b --layers 28"
# The tensor-core decode attention (CHOIR_VV_ATT_TC) off / on / on / off at
# 1 and 8 rows of 60 minutes, bf16 pages, with the attention alone; and 8
# requests of 10 minutes through the engine with it on.
att_tc_60() {
    st att-tc-60 150 'attention  |att tc|batch  |error' $VV --audio-min 1 --steps 16 --batch 1,8 --batch-min 60 \
        --kv bf16 --att-tc ab --att-bench 1
}
engine_8_tc() {
    st engine-8-tc 150 'engine|error|FAIL' env CHOIR_VV_ATT_TC=1 $VV --engine 8 --batch-min 10 --steps 3000 --kv bf16
}
# The one-row GEMVs launched to overlap the kernel before them
# (CHOIR_CUDA_PDL, written 8 Dec 2026, NOT RUN ON A GPU when committed): the
# one-row graph step at 10 and 60 minutes with mode 1 off / on / on / off,
# then mode 2 (its blocks also ask L2 for their first rows) the same way.
pdl_ab() {
    st pdl-ab 150 'pdl [12] |^decode|^bound|error' $VV --audio-min 10,60 --steps 32 --pdl ab
}
# The 8-bit one-row step with shapes 7 / 8 / 7 / 8 (CHOIR_Q8_GEMV) in one process.
q8_sweep_78() {
    st q8-sweep 150 'q8 gemv shape|error' $VV --audio-min 10 --steps 32 --bits 8 --q8-sweep 7,8,7,8
}
case $PART in
checks)
    for c in choir_cuda_check choir_backend_gpu_check choir_vibevoice_gpu_check choir_kokoro_gpu_check \
        choir_whisper_gpu_check choir_sam_audio_gpu_check; do
        st "$c" 120 "$CHK" "$c"
    done
    st vibevoice-drafts-off 120 "$CHK" env CHOIR_VV_FLASH_V2=0 CHOIR_VV_ATT_V2=0 CHOIR_VV_ROPE_KV=0 \
        CHOIR_VV_PREFILL_FUSED=0 choir_vibevoice_gpu_check
    st backend-q8-old 100 "$CHK" env CHOIR_Q8_GEMV=1 CHOIR_Q8_DEQUANT=0 choir_backend_gpu_check
    st kokoro-front-per-piece 60 "$CHK" env CHOIR_KOKORO_FRONT_BATCH=0 CHOIR_CONV_WIDE=0 choir_kokoro_gpu_check
    ;;
vv)
    st att-v2 150 'att v2|attention [0-9]|choir vibevoice att|error' \
        $VV --audio-min 10,60 --steps 32 --att-v2 ab --att-bench 1
    st rope-kv 100 'rope kv|choir vibevoice rope|error' $VV --audio-min 10 --steps 32 --rope-kv ab
    st flash-v2 120 'prefill|pf_v2|error' $VV --audio-min 10,60 --steps 4 --pf-att v2
    st prefill-fused 120 'prefill|error' $VV --audio-min 10,60 --steps 4 --pf-fused both
    ;;
q8)
    st q8-shapes 240 'q8|shape|8-bit|error' \
        $VV --audio-min 10 --steps 32 --bits 8 --q8-sweep 1,4,5,6,1 --batch 8 --q8-dequant both
    ;;
kokoro)
    K=$CHOIR_SHARED_DIR/fixtures/kokoro/kokoro-v1
    st weights 60 '' choir dev weights --manifest "$K/manifest.json" --config "$K/config.json" --out /tmp/kmodel
    KB="choir bench kokoro --model /tmp/kmodel --voice $CHOIR_SHARED_DIR/fixtures/kokoro/voices/af_heart.bin --backend cuda"
    KF='requests at once|paragraph, batch 1:|error'
    for v in "tf32" "bf16" "bf16-tf32" "bf16-tf32 CHOIR_CONV_WIDE=0" "bf16-tf32 CHOIR_CONV_WIDE=1" \
        "bf16-tf32 CHOIR_KOKORO_TOUCH_AUDIO=0" "bf16-tf32 CHOIR_KOKORO_FRONT_BATCH=0" "bf16-tf32"; do
        set -- $v
        st "kokoro-$1${2:+-$2}" 60 "$KF" env ${2:-} $KB --batch 1,32 --gpu-dtype "$1"
    done
    st profile-bf16-tf32 60 'pieces' env CHOIR_KOKORO_PROFILE=1 $KB --batch 32 --gpu-dtype bf16-tf32
    # Where batch 32's device time goes, kernel by kernel (the generator's stage 1 first).
    st ncu-batch32 200 '==PROF==|error' ncu --clock-control none --metrics gpu__time_duration.sum --csv \
        --print-summary per-kernel --log-file "${OUT:-/tmp}/pending-kokoro-ncu.csv" $KB --batch 32 --gpu-dtype bf16-tf32
    ;;
profile)
    # Where a decode step's time goes, one sequence against 8 in a batched
    # step (10 minutes of context each; op by op, kernel by kernel).
    for r in step batch-step; do
        st "ncu-$r" 200 '==PROF==|error' env CHOIR_VGC_PROFILE=$r ncu --profile-from-start off --clock-control none \
            --metrics gpu__time_duration.sum --csv --print-summary per-kernel \
            --log-file "${OUT:-/tmp}/pending-profile-$r.csv" $VV --audio-min 10 --steps 4 --batch 8 --batch-min 10
    done
    ;;
defaults)
    # After the drafts went on by default (7 Dec 2026, afternoon): the 8-bit
    # products' mma GEMV against the CUDA-core GEMV / dequantizing cuBLAS by
    # rows (where the auto mode's threshold sits), Kokoro at 1 and 32 pieces
    # at the defaults, and where the 8-bit step's time goes, 1 row and 8.
    st q8-mma-rows 150 'gemv_mma=|error' $VV --audio-min 10 --steps 32 --batch 2,4,16,32 --batch-min 10 --kv bf16 \
        --bits 8 --gemv-mma ab
    # The 8-bit mma launch's shapes (CHOIR_GEMV_MMA_Q8_SHAPE) at 1, 2 and 8 rows.
    for sh in 1 2 0; do
        st "q8-mma-shape-$sh" 90 'gemv_mma=|error' env CHOIR_GEMV_MMA_Q8_SHAPE=$sh $VV --audio-min 10 --steps 32 \
            --batch 2,8 --batch-min 10 --kv bf16 --bits 8 --gemv-mma ab
    done
    K=$CHOIR_SHARED_DIR/fixtures/kokoro/kokoro-v1
    st weights 60 '' choir dev weights --manifest "$K/manifest.json" --config "$K/config.json" --out /tmp/kmodel
    for i in 1 2; do
        st "kokoro-defaults-$i" 60 'requests at once|paragraph, batch 1:|batch 1|error' choir bench kokoro \
            --model /tmp/kmodel --voice "$CHOIR_SHARED_DIR/fixtures/kokoro/voices/af_heart.bin" --backend cuda \
            --batch 1,32 --gpu-dtype bf16-tf32
    done
    for r in step batch-step; do
        st "ncu-q8-$r" 150 '==PROF==|error' env CHOIR_VGC_PROFILE=$r ncu --profile-from-start off --clock-control none \
            --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv --print-summary per-kernel \
            --log-file "${OUT:-/tmp}/pending-profile-q8-$r.csv" $VV --audio-min 10 --steps 4 --batch 8 --batch-min 10 --bits 8
    done
    ;;
final)
    # The defaults' last look (7 Dec 2026, evening): the checks the auto
    # mma GEMV and its launch shape touch, the 8-bit rows around the auto
    # mode's threshold, why the 8-bit one-row GEMV (q8_stream) streams 1-1.7
    # TB/s (Nsight Compute's sections over 2 layers' kernels), and 8
    # requests of 10 minutes through the engine.
    st backend 90 "$CHK" choir_backend_gpu_check
    st vibevoice 150 "$CHK" choir_vibevoice_gpu_check
    st q8-mma-rows 120 'gemv_mma=|error' $VV --audio-min 10 --steps 32 --batch 4,5,6,8 --batch-min 10 --kv bf16 \
        --bits 8 --gemv-mma ab
    st ncu-q8-sections 150 '==PROF==|error' env CHOIR_VGC_PROFILE=step ncu --profile-from-start off \
        --section SpeedOfLight --section WarpStateStats --section Occupancy --section LaunchStats \
        --section MemoryWorkloadAnalysis --csv --page details --log-file "${OUT:-/tmp}/pending-q8-sections.csv" \
        choir_vibevoice_gpu_check --bench 7b --layers 2 --audio-min 10 --steps 2 --bits 8
    st engine-8 200 'engine|error|FAIL' $VV --engine 8 --batch-min 10 --steps 3000 --kv bf16
    ;;
verify)
    # Main's code not yet run on a GPU when committed (7 Dec 2026, evening:
    # the mma GEMV's folded mg_run, shape 7 for one row only), and where the
    # 60-minute decode attention over a bf16 cache spends its time (Nsight
    # Compute's sections of the deep-ring kernel, f32 and bf16).
    st backend 90 "$CHK" choir_backend_gpu_check
    st vibevoice 150 "$CHK" choir_vibevoice_gpu_check
    st q8-rows 120 'q8 gemv shape|gemv_mma=|error' $VV --audio-min 10 --steps 32 --bits 8 --q8-sweep 4,7 \
        --batch 2,8 --batch-min 10 --kv bf16 --gemv-mma ab
    st ncu-att-sections 150 '==PROF==|error' ncu --kernel-name-base demangled \
        -k 'regex:k_vv_att_dec<128, (float, 7, 3|__nv_bfloat16, 7, 4)' -c 2 \
        --section SpeedOfLight --section WarpStateStats --section Occupancy --section LaunchStats \
        --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section InstructionStats \
        --csv --page details --log-file "${OUT:-/tmp}/pending-att-sections.csv" \
        choir_vibevoice_gpu_check --bench 7b --layers 2 --audio-min 60 --steps 2 --att-bench 1
    ;;
att-tc)
    # Decode attention on the tensor cores (CHOIR_VV_ATT_TC, written 7 Dec
    # 2026 late evening, NOT RUN ON A GPU when committed): its check cases
    # (within v2's 1e-5), the attention alone beside v2's deep ring, the
    # graph step off / on at 8 rows of 10 minutes and 1 and 8 rows of 60,
    # bf16 pages; then the backend's check (main's unrun mma GEMV fold).
    st vibevoice 150 "$CHK|attention tc" choir_vibevoice_gpu_check
    st att-bench-10 150 'attention  |att tc|batch  |error' $VV --audio-min 10 --steps 16 --att-bench 1 --batch 8 \
        --batch-min 10 --kv bf16 --att-tc ab
    att_tc_60
    st backend 90 "$CHK" choir_backend_gpu_check
    ;;
att-tc-2)
    # The second look: every VibeVoice check with the tensor-core attention
    # on, 8 requests of 10 minutes through the engine with it (and the
    # batch's members all prepared before its first step), then Kokoro's
    # page-locked staging (CHOIR_KOKORO_PINNED, NOT RUN ON A GPU when
    # committed) off / on / off / on at 32 pieces.
    st vibevoice-tc-on 150 "$CHK" env CHOIR_VV_ATT_TC=1 choir_vibevoice_gpu_check
    engine_8_tc
    kokoro_pinned_ab
    st kokoro-check-pinned 60 "$CHK" env CHOIR_KOKORO_PINNED=1 choir_kokoro_gpu_check
    ;;
night)
    # Everything unrun in one call, most needed first (7 Dec 2026, night,
    # with little device time left): the tensor-core decode attention's
    # cases alone, its A/B at 1 and 8 rows of 60 minutes, Kokoro's pinned
    # A/B, 8 requests through the engine with it on, the prefill's chunk
    # sizes, and the 8-bit shape 8 beside shape 7.
    st att-check 90 "$CHK|attention tc" choir_vibevoice_gpu_check --only att
    att_tc_60
    pdl_ab
    kokoro_pinned_ab
    engine_8_tc
    st prefill-chunks 150 'prefill|error' $VV --audio-min 60 --steps 4 --prefill-chunk 1024,1792,4224,1024
    q8_sweep_78
    ;;
pdl)
    # The programmatic launch's checks (the backend's chain of six layers,
    # bf16 and 8-bit, bit for bit with it off, directly and as a graph;
    # every VibeVoice check with mode 2, then mode 1), then its A/Bs (bf16
    # at 10 and 60 minutes, 8-bit at 10, the 8-row step at 10).
    st backend 90 "$CHK|gemv pdl" choir_backend_gpu_check
    st vibevoice-pdl-2 150 "$CHK" env CHOIR_CUDA_PDL=2 choir_vibevoice_gpu_check
    st vibevoice-pdl-1 150 "$CHK" env CHOIR_CUDA_PDL=1 choir_vibevoice_gpu_check
    pdl_ab
    st pdl-ab-q8 120 'pdl [12] |^decode|^bound|error' $VV --audio-min 10 --steps 32 --bits 8 --pdl ab
    st pdl-ab-8rows 150 'pdl [12] |^batch|error' $VV --audio-min 1 --steps 32 --batch 8 --batch-min 10 --kv bf16 \
        --pdl ab
    ;;
engine-chunks)
    # The engine's GPU replica prefills in chunks of VV_DEFAULT_PREFILL
    # (256 rows) unless CHOIR_VV_GPU_PREFILL says otherwise, where the bench
    # quotes 1,024: at 256 rows the flash kernel has 56 blocks for 132 SMs.
    # One 60-minute request through the engine (16 tokens, so that the
    # latency is mostly encoders and prefill) at 256, 1,024, 1,792, 256.
    for c in 256 1024 1792 256; do
        st "engine-60-chunk-$c" 120 'engine|error|FAIL' env CHOIR_VV_GPU_PREFILL=$c $VV --engine 1 --batch-min 60 \
            --steps 16 --kv bf16
    done
    ;;
q8-fx)
    # The 8-bit GEMV with x staged in one pass (CHOIR_Q8_GEMV=8, written 7
    # Dec 2026 night, NOT RUN ON A GPU when committed): the backend check
    # (its cases against shape 1, bit for bit in one piece), the one-row
    # step 7 / 8 / 7 / 8 in one process, the VibeVoice check with it, and
    # the step's kernels with it (rates of o/down against shape 7's 1.10
    # TB/s).
    st backend 90 "$CHK|q8 gemv shape 8" choir_backend_gpu_check
    q8_sweep_78
    st vibevoice-q8-8 150 "$CHK" env CHOIR_Q8_GEMV=8 choir_vibevoice_gpu_check
    st ncu-q8-8 120 '==PROF==|error' env CHOIR_Q8_GEMV=8 CHOIR_VGC_PROFILE=step ncu --profile-from-start off \
        --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv --print-summary per-kernel \
        --log-file "${OUT:-/tmp}/pending-profile-q8-8.csv" $VV --audio-min 10 --steps 4 --bits 8
    ;;
prefill-chunks)
    # The 60-minute prefill by chunk size: the flash kernel runs one block a
    # (query head, 128 rows) and one block an SM, so a chunk of 1,024 rows
    # is 224 blocks, 1.7 waves of 132 SMs in the time of 2; 1,152 rows
    # (252 blocks) fill 1.91 of 2, 1,792 (392) 2.97 of 3, 4,224 (924) 7 of 7.
    st prefill-chunks 200 'prefill|error' $VV --audio-min 60 --steps 4 --prefill-chunk 1024,1152,1792,4224,1024
    ;;
q8-shape7)
    # The 8-bit stream GEMV within 64 registers (CHOIR_Q8_GEMV=7, written 7
    # Dec 2026 evening): the checks with it, the one-row step beside shape
    # 4, and where its step goes.
    st q8-sweep 150 'q8 gemv shape|error' $VV --audio-min 10 --steps 32 --bits 8 --q8-sweep 4,7,4,7
    st backend-q8-7 90 "$CHK" env CHOIR_Q8_GEMV=7 choir_backend_gpu_check
    st vibevoice-q8-7 150 "$CHK" env CHOIR_Q8_GEMV=7 choir_vibevoice_gpu_check
    st ncu-q8-7 150 '==PROF==|error' env CHOIR_Q8_GEMV=7 CHOIR_VGC_PROFILE=step ncu --profile-from-start off \
        --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv --print-summary per-kernel \
        --log-file "${OUT:-/tmp}/pending-profile-q8-7.csv" $VV --audio-min 10 --steps 4 --bits 8
    ;;
engine)
    # VibeVoice 7B through the engine: 1, 8 and 32 requests of 10 minutes
    # decoding 3,000 tokens each, then the hour-long admission and burst.
    st engine 400 'engine|error|FAIL' $VV --engine 1,8,32 --batch-min 10 --steps 3000 --kv bf16 --burst-min 60
    ;;
drafts | drafts-checks | drafts-ab)
    # The drafts of 7 Dec, late morning: the checks (their cases force each
    # switch on in-process), then each A/B, the A/Bs in the order that
    # decides most. `drafts` may not fit one call: `drafts-checks` then
    # `drafts-ab` do the same in two.
    if [ "$PART" != drafts-ab ]; then
        st backend 90 "$CHK|skinny path|rms_norm 8|gemv mma" choir_backend_gpu_check
        st kokoro 60 "$CHK|conv stats" choir_kokoro_gpu_check
        st vibevoice 150 "$CHK|flash wg|not used" choir_vibevoice_gpu_check
        ON="CHOIR_CUDA_RMS_CACHE=1 CHOIR_CUDA_SKINNY_ACC=1"
        st vibevoice-norm-acc-on 150 "$CHK" env $ON choir_vibevoice_gpu_check
    fi
    if [ "$PART" != drafts-checks ]; then
        ON="CHOIR_CUDA_RMS_CACHE=1 CHOIR_CUDA_SKINNY_ACC=1"
        st gemv-mma-q8 90 'gemv_mma=|error' $VV --audio-min 10 --steps 32 --batch 8 --batch-min 10 --kv bf16 --bits 8 --gemv-mma ab
        st gemv-mma-bf16 90 'gemv_mma=|error' $VV --audio-min 10 --steps 32 --batch 8 --batch-min 10 --kv bf16 --gemv-mma ab
        st flash-wg 120 'pf_wg|flash wg|flash v2|error|not used|declined' $VV --audio-min 10,60 --steps 4 --pf-att wg --pf-bench 1
        K=$CHOIR_SHARED_DIR/fixtures/kokoro/kokoro-v1
        st weights 60 '' choir dev weights --manifest "$K/manifest.json" --config "$K/config.json" --out /tmp/kmodel
        st kokoro-conv-stats 90 'requests at once|error' choir bench kokoro --model /tmp/kmodel \
            --voice "$CHOIR_SHARED_DIR/fixtures/kokoro/voices/af_heart.bin" --backend cuda --batch 32 --gpu-dtype bf16-tf32 --conv-stats ab
        for w in off on off on; do
            E=CHOIR_CUDA_RMS_CACHE=0
            [ $w = on ] && E=$ON
            st "batch-step-$w" 60 'batch|graph|error' env $E $VV --audio-min 10 --steps 32 --batch 8 --batch-min 10 --kv bf16
        done
    fi
    ;;
*)
    echo "run_pending_gpu.sh: PART is checks, defaults, final, verify, att-tc, att-tc-2, night, pdl, engine-chunks, q8-fx, prefill-chunks, q8-shape7, vv, q8, kokoro, engine, profile, drafts, drafts-checks or drafts-ab" >&2
    exit 2
    ;;
esac
echo "run_pending_gpu.sh $PART: $FAILED step(s) failed, $((SECONDS - T0)) s; log $LOG"
[ $FAILED -eq 0 ]
