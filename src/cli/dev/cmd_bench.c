/* `choir bench TARGET ...`: dispatch to the benchmark of each component. The
 * targets live beside the components' commands; absent ones say so. */
#include <stdio.h>
#include <string.h>

#include "cli/dev/dev.h"

#define BENCH_FALLBACK(fn, name)                                         \
    __attribute__((weak)) int fn(int argc, char **argv) {               \
        (void)argc; (void)argv;                                          \
        fprintf(stderr, "choir bench %s: not available in this build\n", name); \
        return 2;                                                        \
    }
BENCH_FALLBACK(choir_bench_whisper, "whisper")
BENCH_FALLBACK(choir_bench_kokoro, "kokoro")
BENCH_FALLBACK(choir_bench_sts, "sts")
BENCH_FALLBACK(choir_bench_vad, "vad")
BENCH_FALLBACK(choir_bench_quant, "quant")
BENCH_FALLBACK(choir_bench_engine, "engine")
BENCH_FALLBACK(choir_bench_vibevoice, "vibevoice")
BENCH_FALLBACK(choir_bench_sam_audio, "sam-audio")

int choir_cmd_bench(int argc, char **argv) {
    static const struct {
        const char *name;
        int (*fn)(int, char **);
        const char *what;
    } targets[] = {
        {"whisper", choir_bench_whisper, "encoder/decoder speed at real Whisper sizes (random weights)"},
        {"kokoro", choir_bench_kokoro, "real-time factor and time to first audio"},
        {"sts", choir_bench_sts, "enhancement real-time factor and peak memory"},
        {"vad", choir_bench_vad, "Silero VAD throughput"},
        {"quant", choir_bench_quant, "quantized GEMV/GEMM throughput"},
        {"engine", choir_bench_engine, "scheduler throughput and latency under load"},
        {"vibevoice", choir_bench_vibevoice, "VibeVoice-ASR load, encoder, prefill, decode speed, peak memory"},
        {"sam-audio", choir_bench_sam_audio, "SAM-Audio separation RTF and peak memory at published sizes (random weights)"},
    };
    if (argc >= 2) {
        for (size_t i = 0; i < sizeof targets / sizeof targets[0]; i++)
            if (strcmp(argv[1], targets[i].name) == 0) return targets[i].fn(argc - 1, argv + 1);
    }
    FILE *f = (argc >= 2 && strcmp(argv[1], "--help") == 0) ? stdout : stderr;
    fprintf(f, "usage: choir bench TARGET [ARGS...]\n\ntargets:\n");
    for (size_t i = 0; i < sizeof targets / sizeof targets[0]; i++)
        fprintf(f, "  %-8s %s\n", targets[i].name, targets[i].what);
    return f == stdout ? 0 : 2;
}
