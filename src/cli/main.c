/* choir: entry point and subcommand dispatch.
 *
 * Subcommands are defined in their own files. Ones not yet part of this build
 * resolve to the weak fallbacks below, which say so and exit 2, so that the
 * table always lists the whole command surface. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

static int not_built(const char *name) {
    fprintf(stderr, "choir %s: not available in this build\n", name);
    return 2;
}

#define FALLBACK(fn, name) \
    __attribute__((weak)) int fn(int argc, char **argv) { (void)argc; (void)argv; return not_built(name); }
FALLBACK(choir_cmd_tts, "tts")
FALLBACK(choir_cmd_stt, "stt")
FALLBACK(choir_cmd_vad, "vad")
FALLBACK(choir_cmd_sts, "sts")
FALLBACK(choir_cmd_sep, "sep")
FALLBACK(choir_cmd_convert, "convert")
FALLBACK(choir_cmd_serve, "serve")
FALLBACK(choir_cmd_bench, "bench")
FALLBACK(choir_cmd_stats, "stats")
FALLBACK(choir_cmd_pull, "pull")
FALLBACK(choir_cmd_worker, "worker")
FALLBACK(choir_cmd_submit, "submit")
FALLBACK(choir_cmd_jobs, "jobs")
FALLBACK(choir_cmd_dev_weights, "dev weights")
FALLBACK(choir_cmd_parity_whisper, "dev parity whisper")
FALLBACK(choir_cmd_parity_kokoro, "dev parity kokoro")
FALLBACK(choir_cmd_parity_mossformer2, "dev parity mossformer2")
FALLBACK(choir_cmd_parity_sam_audio, "dev parity sam-audio")
FALLBACK(choir_cmd_parity_vibevoice, "dev parity vibevoice")

typedef struct command {
    const char *name;
    int (*fn)(int, char **);
    const char *summary;
} command;

static const command g_commands[] = {
    {"info", choir_cmd_info, "backends, kernels, memory and models on this machine"},
    {"tts", choir_cmd_tts, "text to speech (Kokoro)"},
    {"stt", choir_cmd_stt, "speech to text (Whisper)"},
    {"vad", choir_cmd_vad, "speech segments (Silero VAD)"},
    {"sts", choir_cmd_sts, "speech enhancement of long recordings (MossFormer2)"},
    {"sep", choir_cmd_sep, "text-prompted source separation of long recordings (SAM-Audio)"},
    {"convert", choir_cmd_convert, "convert checkpoints to the native layout, quantize"},
    {"serve", choir_cmd_serve, "OpenAI-compatible HTTP server"},
    {"bench", choir_cmd_bench, "benchmarks"},
    {"stats", choir_cmd_stats, "a running server's metrics"},
    {"pull", choir_cmd_pull, "download a model from the Hugging Face Hub"},
    {"worker", choir_cmd_worker, "consume jobs from a Redis stream"},
    {"submit", choir_cmd_submit, "enqueue jobs to a Redis stream"},
    {"jobs", choir_cmd_jobs, "show job progress"},
    {"dev", NULL, "developer tools: `dev weights`, `dev parity whisper|kokoro|mossformer2|vibevoice|sam-audio`"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: choir COMMAND [ARGS...]   (choir COMMAND --help for details)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof g_commands / sizeof g_commands[0]; i++)
        fprintf(f, "  %-9s %s\n", g_commands[i].name, g_commands[i].summary);
}

static int dev_main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "weights") == 0) return choir_cmd_dev_weights(argc - 1, argv + 1);
    if (argc >= 3 && strcmp(argv[1], "parity") == 0) {
        if (strcmp(argv[2], "whisper") == 0) return choir_cmd_parity_whisper(argc - 2, argv + 2);
        if (strcmp(argv[2], "kokoro") == 0) return choir_cmd_parity_kokoro(argc - 2, argv + 2);
        if (strcmp(argv[2], "mossformer2") == 0) return choir_cmd_parity_mossformer2(argc - 2, argv + 2);
        if (strcmp(argv[2], "sam-audio") == 0) return choir_cmd_parity_sam_audio(argc - 2, argv + 2);
        if (strcmp(argv[2], "vibevoice") == 0) return choir_cmd_parity_vibevoice(argc - 2, argv + 2);
    }
    fprintf(stderr,
            "usage: choir dev weights --manifest M --config C --out DIR\n"
            "       choir dev parity whisper|kokoro|mossformer2|vibevoice|sam-audio ...\n");
    return 2;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("choir %s\n", CHOIR_VERSION);
        return 0;
    }
    if (strcmp(argv[1], "dev") == 0) return dev_main(argc - 1, argv + 1);
    for (size_t i = 0; i < sizeof g_commands / sizeof g_commands[0]; i++) {
        if (g_commands[i].fn && strcmp(argv[1], g_commands[i].name) == 0)
            return g_commands[i].fn(argc - 1, argv + 1);
    }
    fprintf(stderr, "choir: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
