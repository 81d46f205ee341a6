/* choir: entry point and subcommand dispatch.
 *
 * Subcommands are defined in their own files. Ones not yet part of this build
 * resolve to the weak fallbacks below, which say so and exit 2, so that the
 * table always lists the whole command surface. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "choir/alloc.h"
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
FALLBACK(choir_cmd_stats, "stats")
FALLBACK(choir_cmd_pull, "pull")
FALLBACK(choir_cmd_worker, "worker")
FALLBACK(choir_cmd_submit, "submit")
FALLBACK(choir_cmd_jobs, "jobs")

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
    {"bench", choir_cmd_dev_tools, "benchmarks (developer tools: runs choir-dev)"},
    {"stats", choir_cmd_stats, "a running server's metrics"},
    {"pull", choir_cmd_pull, "download a model from the Hugging Face Hub"},
    {"worker", choir_cmd_worker, "consume jobs from a Redis stream"},
    {"submit", choir_cmd_submit, "enqueue jobs to a Redis stream"},
    {"jobs", choir_cmd_jobs, "show job progress"},
    {"dev", choir_cmd_dev_tools, "developer tools (choir-dev): `dev weights`, `dev parity whisper|kokoro|mossformer2|vibevoice|sam-audio`"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: choir COMMAND [ARGS...]   (choir COMMAND --help for details)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof g_commands / sizeof g_commands[0]; i++)
        fprintf(f, "  %-9s %s\n", g_commands[i].name, g_commands[i].summary);
}

/* The developer tools are their own program, so that this one includes no
 * model internals: it is started in this process's place with the same
 * arguments ("bench ..." or "dev ..."). */
int choir_cmd_dev_tools(int argc, char **argv) {
    char path[4096];
    const char *env = getenv("CHOIR_DEV");
    if (env && *env) {
        snprintf(path, sizeof path, "%s", env);
    } else {
        ssize_t n = readlink("/proc/self/exe", path, sizeof path - sizeof "choir-dev");
        char *slash = n > 0 ? memrchr(path, '/', (size_t)n) : NULL;
        if (slash)
            memcpy(slash + 1, "choir-dev", sizeof "choir-dev");
        else
            snprintf(path, sizeof path, "choir-dev");
    }
    char **args = choir_calloc(CHOIR_MEM_OTHER, (size_t)argc + 2, sizeof *args);
    if (!args) {
        fprintf(stderr, "choir %s: out of memory\n", argv[0]);
        return 1;
    }
    args[0] = "choir-dev";
    for (int i = 0; i < argc; i++) args[i + 1] = argv[i];
    execv(path, args);
    fprintf(stderr, "choir %s: the developer tools are a program of their own, %s, which could not be started: %s\n"
            "(build the choir_dev target, or point $CHOIR_DEV at it)\n", argv[0], path, strerror(errno));
    choir_free(args);
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
    for (size_t i = 0; i < sizeof g_commands / sizeof g_commands[0]; i++) {
        if (g_commands[i].fn && strcmp(argv[1], g_commands[i].name) == 0)
            return g_commands[i].fn(argc - 1, argv + 1);
    }
    fprintf(stderr, "choir: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
