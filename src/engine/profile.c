/* Serving profiles and engine parameter defaults. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "choir/engine.h"

static const char *const profile_names[CHOIR_PROFILE_COUNT] = {
    "default", "interactive-tts", "audiobook", "realtime-stt", "offline-stt",
};

const char *choir_profile_name(choir_profile p)
{
    return (p >= 0 && p < CHOIR_PROFILE_COUNT) ? profile_names[p] : "unknown";
}

int choir_profile_parse(const char *name, choir_profile *out)
{
    for (int i = 0; name && i < CHOIR_PROFILE_COUNT; i++) {
        if (strcmp(name, profile_names[i]) == 0) {
            if (out)
                *out = (choir_profile)i;
            return CHOIR_OK;
        }
    }
    return CHOIR_EINVAL;
}

const char *choir_reject_reason_name(choir_reject_reason r)
{
    static const char *const names[CHOIR_REJECT_COUNT] = {
        "none", "queue_full", "overload", "deadline", "too_large", "shutdown", "cancelled", "failed", "backlog",
    };
    return (r >= 0 && r < CHOIR_REJECT_COUNT) ? names[r] : "unknown";
}

/* The smaller of physical memory and the cgroup (v2, then v1) limit. */
static int64_t machine_memory(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    int64_t phys = (pages > 0 && page > 0) ? (int64_t)pages * page : (int64_t)8 << 30;
    const char *limits[] = {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"};
    for (int i = 0; i < 2; i++) {
        FILE *f = fopen(limits[i], "r");
        if (!f)
            continue;
        long long v = 0;
        /* "max" (no limit) does not parse as a number and is skipped */
        if (fscanf(f, "%lld", &v) == 1 && v > 0 && v < phys)
            phys = v;
        fclose(f);
    }
    return phys;
}

choir_engine_params choir_engine_default_params(choir_profile profile)
{
    choir_engine_params p = {
        .profile = profile,
        .memory_budget = machine_memory() / 4 * 3,
        .high_water = 0.85,
        .low_water = 0.70,
        .p99_target_ms = 0,
        .max_batch = 8,
        .wait_short_ms = 50,
        .wait_long_ms = 250,
        .long_seconds = 10,
        .max_pad_waste = 0.25,
        .queue_capacity = 256,
        .workers = 1,
        .unload_idle_s = 0,
        .max_audio_seconds = 4 * 3600,
        .gpus = NULL,
        .gpu_memory_fraction = 0.90,
        .replica_after_s = 1.0,
        .replica_idle_s = 30.0,
    };
    switch (profile) {
    case CHOIR_PROFILE_INTERACTIVE_TTS:
        /* One request per batch: nothing waits for company, first audio comes soonest. */
        p.max_batch = 1;
        p.wait_short_ms = 1;
        p.wait_long_ms = 1;
        p.model_options.compute_bf16 = 1;
        break;
    case CHOIR_PROFILE_AUDIOBOOK:
        p.max_batch = 8;
        p.wait_short_ms = 200;
        p.wait_long_ms = 300;
        p.model_options.q_bits = 4;
        break;
    case CHOIR_PROFILE_REALTIME_STT:
        p.max_batch = 4;
        p.wait_short_ms = 50;
        p.wait_long_ms = 100;
        p.max_audio_seconds = 300;
        p.model_options.q_bits = 6;
        break;
    case CHOIR_PROFILE_OFFLINE_STT:
        p.max_batch = 16;
        p.wait_short_ms = 250;
        p.wait_long_ms = 300;
        break;
    default:
        break;
    }
    p.replica_queue = 2 * p.max_batch;
    return p;
}

/* "8G", "512M", "1.5GiB", "1000000" -> bytes (binary units); -1 when malformed. */
static int64_t parse_size(const char *s)
{
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s || !(v >= 0))
        return -1;
    double mul = 1;
    switch (*end) {
    case 'k': case 'K': mul = 1024.0; end++; break;
    case 'm': case 'M': mul = 1024.0 * 1024; end++; break;
    case 'g': case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
    case 't': case 'T': mul = 1024.0 * 1024 * 1024 * 1024; end++; break;
    default: break;
    }
    if (mul > 1 && (strcmp(end, "iB") == 0 || strcmp(end, "B") == 0))
        end += strlen(end);
    if (*end || v * mul > 9.2e18)
        return -1;
    return (int64_t)llround(v * mul);
}

static int parse_num(const char *s, double lo, double hi, double *out)
{
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s || *end || !(v >= lo && v <= hi))
        return -1;
    *out = v;
    return 0;
}

const char *choir_engine_options_help(void)
{
    return "  --profile NAME        default, interactive-tts, audiobook, realtime-stt, offline-stt\n"
           "  --memory-budget SIZE  bytes for weights + activations (e.g. 8G; default 75% of RAM/cgroup)\n"
           "  --max-batch N         largest batch (1..64)\n"
           "  --workers N           batches computed at once\n"
           "  --queue N             waiting requests per model before 429\n"
           "  --wait-ms MS          batch wait limit for short requests\n"
           "  --wait-long-ms MS     batch wait limit for long requests\n"
           "  --high-water F        degrade above this fraction of the budget (0..1)\n"
           "  --p99-target-ms MS    degrade when total-latency p99 exceeds it\n"
           "  --q-bits N            quantize weights on load (2..8)\n"
           "  --max-audio-s S       refuse longer audio inputs (default 14400, 4 hours)\n"
           "  --gpus all|none|0,1   GPUs to place models on (default all; needs a CUDA build)\n"
           "  --gpu-memory-fraction F  each GPU's budget as a fraction of its memory (default 0.90)\n"
           "  --gpu-memory SIZE     each GPU's budget in bytes instead (e.g. 60G)\n";
}

int choir_engine_apply_option(choir_engine_params *p, const char *name, const char *value, choir_err *err)
{
    if (!p || !name)
        return choir_err_set(err, CHOIR_EINVAL, "engine option: missing name");
    while (*name == '-')
        name++;
    static const char *const known[] = {"profile", "memory-budget", "max-batch", "workers", "queue", "wait-ms",
                                        "wait-long-ms", "high-water", "p99-target-ms", "q-bits", "max-audio-s",
                                        "gpus", "gpu-memory-fraction", "gpu-memory"};
    int k = -1;
    for (int i = 0; i < (int)(sizeof known / sizeof known[0]); i++)
        if (strcmp(name, known[i]) == 0)
            k = i;
    if (k < 0)
        return 0;
    if (!value)
        return choir_err_set(err, CHOIR_EINVAL, "--%s needs a value", name);
    double v = 0;
    int bad = 0;
    switch (k) {
    case 0: {
        choir_profile prof;
        if (choir_profile_parse(value, &prof) < 0)
            return choir_err_set(err, CHOIR_EINVAL,
                                 "unknown profile '%s' (default, interactive-tts, audiobook, realtime-stt, "
                                 "offline-stt)", value);
        int64_t budget = p->memory_budget;
        *p = choir_engine_default_params(prof);
        if (budget > 0)
            p->memory_budget = budget;
        return 1;
    }
    case 1: {
        int64_t b = parse_size(value);
        if (b <= 0)
            return choir_err_set(err, CHOIR_EINVAL, "--memory-budget: '%s' is not a size (like 8G)", value);
        p->memory_budget = b;
        return 1;
    }
    case 2: bad = parse_num(value, 1, 64, &v); p->max_batch = (int)v; break;
    case 3: bad = parse_num(value, 1, 256, &v); p->workers = (int)v; break;
    case 4: bad = parse_num(value, 1, 1 << 20, &v); p->queue_capacity = (int)v; break;
    case 5: bad = parse_num(value, 0.001, 60000, &v); p->wait_short_ms = v; break;
    case 6: bad = parse_num(value, 0.001, 60000, &v); p->wait_long_ms = v; break;
    case 7: bad = parse_num(value, 0.01, 1, &v); p->high_water = v; break;
    case 8: bad = parse_num(value, 0, 3.6e6, &v); p->p99_target_ms = v; break;
    case 9: bad = parse_num(value, 2, 8, &v); p->model_options.q_bits = (int)v; break;
    case 10: bad = parse_num(value, 1, 1e6, &v); p->max_audio_seconds = v; break;
    case 11:
        /* Checked against the devices by choir_engine_create. */
        if (!*value)
            return choir_err_set(err, CHOIR_EINVAL, "--gpus: expected all, none or indices like 0,1");
        p->gpus = value;
        return 1;
    case 12: bad = parse_num(value, 0.01, 1, &v); p->gpu_memory_fraction = v; break;
    default: {
        int64_t b = parse_size(value);
        if (b <= 0)
            return choir_err_set(err, CHOIR_EINVAL, "--gpu-memory: '%s' is not a size (like 60G)", value);
        p->gpu_memory_bytes = b;
        return 1;
    }
    }
    if (bad || (k >= 2 && k <= 4 && v != floor(v)) || (k == 9 && v != floor(v)))
        return choir_err_set(err, CHOIR_EINVAL, "--%s: bad value '%s'", name, value);
    if (k == 7 && p->low_water > p->high_water)
        p->low_water = p->high_water * 0.8;
    return 1;
}
