/* Serving profiles and engine parameter defaults. */
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "choir/engine.h"
#include "choir/parse.h"
#include "engine/engine_internal.h"

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
        "memory",
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
        break;
    case CHOIR_PROFILE_REALTIME_STT:
        p.max_batch = 4;
        p.wait_short_ms = 50;
        p.wait_long_ms = 100;
        p.max_audio_seconds = 300;
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

/* Every engine option, parsed, bounded and described here and nowhere else:
 * `choir serve`, `choir worker` and `choir bench engine` take these flags
 * through choir_engine_apply_option, and their usage prints this table. */
typedef enum option_kind {
    OPTION_PROFILE, /* replaces the params with a profile's defaults */
    OPTION_SIZE,    /* int64_t bytes, choir_parse_size, > 0 */
    OPTION_INT,     /* int, whole number in [lo, hi] */
    OPTION_REAL,    /* double in [lo, hi] */
    OPTION_GPUS,    /* const char *, checked against the devices by choir_engine_create */
} option_kind;

typedef struct engine_option {
    const char *name; /* without the dashes; NULL: a field of the API only (no flag),
                         bounded by engine_params_check all the same */
    const char *arg;  /* the value's placeholder in the usage */
    option_kind kind;
    double lo, hi;
    size_t offset;    /* of the field in choir_engine_params */
    const char *field; /* its name (messages of engine_params_check) */
    const char *help;
} engine_option;

#define FIELD(f) offsetof(choir_engine_params, f), #f
static const engine_option options[] = {
    {"profile", "NAME", OPTION_PROFILE, 0, 0, 0, NULL,
     "default, interactive-tts, audiobook, realtime-stt, offline-stt"},
    {"memory-budget", "SIZE", OPTION_SIZE, 0, 0, FIELD(memory_budget),
     "bytes for weights + activations (e.g. 8G; default 75% of RAM/cgroup)"},
    {"max-batch", "N", OPTION_INT, 1, CHOIR_ENGINE_MAX_BATCH, FIELD(max_batch), "largest batch (1..64)"},
    {"workers", "N", OPTION_INT, 1, 256, FIELD(workers), "batches computed at once (1..256)"},
    {"queue", "N", OPTION_INT, 1, 1 << 20, FIELD(queue_capacity), "waiting requests per model before 429"},
    {"wait-ms", "MS", OPTION_REAL, 0.001, 60000, FIELD(wait_short_ms), "batch wait limit for short requests"},
    {"wait-long-ms", "MS", OPTION_REAL, 0.001, 60000, FIELD(wait_long_ms), "batch wait limit for long requests"},
    {"high-water", "F", OPTION_REAL, 0.01, 1, FIELD(high_water), "degrade above this fraction of the budget (0..1)"},
    {"p99-target-ms", "MS", OPTION_REAL, 0, 3.6e6, FIELD(p99_target_ms),
     "degrade when total-latency p99 exceeds it"},
    {"max-audio-s", "S", OPTION_REAL, 1, 1e6, FIELD(max_audio_seconds),
     "refuse longer audio inputs (default 14400, 4 hours)"},
    {"gpus", "all|none|0,1", OPTION_GPUS, 0, 0, FIELD(gpus), "GPUs to place models on (default all; needs a CUDA build)"},
    {"gpu-memory-fraction", "F", OPTION_REAL, 0.01, 1, FIELD(gpu_memory_fraction),
     "each GPU's budget as a fraction of its memory (default 0.90)"},
    {"gpu-memory", "SIZE", OPTION_SIZE, 0, 0, FIELD(gpu_memory_bytes), "each GPU's budget in bytes instead (e.g. 60G)"},
    /* Fields without a flag: their bounds, for API callers. */
    {NULL, NULL, OPTION_REAL, 0.01, 1, FIELD(low_water), NULL},
    {NULL, NULL, OPTION_REAL, 0.001, 1e6, FIELD(long_seconds), NULL},
    {NULL, NULL, OPTION_REAL, 0.01, 0.99, FIELD(max_pad_waste), NULL},
    {NULL, NULL, OPTION_REAL, 0, 1e9, FIELD(unload_idle_s), NULL},
    {NULL, NULL, OPTION_INT, -1, 1, FIELD(model_options.compute_bf16), NULL}, /* -1: off */
    {NULL, NULL, OPTION_INT, 0, CHOIR_ENGINE_MAX_GPUS, FIELD(fake_gpus), NULL},
    {NULL, NULL, OPTION_INT, 1, 1 << 20, FIELD(replica_queue), NULL},
    {NULL, NULL, OPTION_REAL, 0.001, 1e6, FIELD(replica_after_s), NULL},
    {NULL, NULL, OPTION_REAL, 0.001, 1e9, FIELD(replica_idle_s), NULL},
};
#undef FIELD
#define N_OPTIONS (sizeof options / sizeof options[0])

static char options_help[2048];
static pthread_once_t options_help_once = PTHREAD_ONCE_INIT;

static void options_help_build(void)
{
    size_t used = 0;
    for (size_t i = 0; i < N_OPTIONS && used < sizeof options_help; i++) {
        if (!options[i].name)
            continue;
        char flag[64];
        snprintf(flag, sizeof flag, "--%s %s", options[i].name, options[i].arg);
        int n = snprintf(options_help + used, sizeof options_help - used, "  %-24s %s\n", flag, options[i].help);
        if (n < 0)
            break;
        used += (size_t)n;
    }
}

const char *choir_engine_options_help(void)
{
    pthread_once(&options_help_once, options_help_build);
    return options_help;
}

/* The recovery level that goes with a high-water mark set below the default
 * low-water mark, when low_water was not given. */
static double low_water_under(double high_water)
{
    return high_water * 0.8;
}

int choir_engine_apply_option(choir_engine_params *p, const char *name, const char *value, choir_err *err)
{
    if (!p || !name)
        return choir_err_set(err, CHOIR_EINVAL, "engine option: missing name");
    while (*name == '-')
        name++;
    const engine_option *o = NULL;
    for (size_t i = 0; i < N_OPTIONS && !o; i++)
        if (options[i].name && strcmp(name, options[i].name) == 0)
            o = &options[i];
    if (!o)
        return 0;
    if (!value)
        return choir_err_set(err, CHOIR_EINVAL, "--%s needs a value", name);
    char *field = (char *)p + o->offset;
    double v = 0;
    switch (o->kind) {
    case OPTION_PROFILE: {
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
    case OPTION_SIZE: {
        int64_t b = 0;
        if (choir_parse_size(value, &b) < 0 || b <= 0)
            return choir_err_set(err, CHOIR_EINVAL, "--%s: '%s' is not a size (like 8G, 512M or 1.5GiB)", name,
                                 value);
        memcpy(field, &b, sizeof b);
        return 1;
    }
    case OPTION_GPUS:
        if (!*value)
            return choir_err_set(err, CHOIR_EINVAL, "--gpus: expected all, none or indices like 0,1");
        memcpy(field, &value, sizeof value);
        return 1;
    case OPTION_INT:
    case OPTION_REAL:
        if (choir_parse_number(value, o->lo, o->hi, o->kind == OPTION_INT, &v) < 0)
            return choir_err_set(err, CHOIR_EINVAL, "--%s: bad value '%s' (%s %g..%g)", name, value,
                                 o->kind == OPTION_INT ? "a whole number in" : "a number in", o->lo, o->hi);
        if (o->kind == OPTION_INT) {
            int i = (int)v;
            memcpy(field, &i, sizeof i);
        } else {
            memcpy(field, &v, sizeof v);
        }
        break;
    }
    if (o->offset == offsetof(choir_engine_params, high_water) && p->low_water > p->high_water)
        p->low_water = low_water_under(p->high_water);
    return 1;
}

void engine_params_resolve(choir_engine_params *p, const choir_engine_params *in)
{
    choir_profile profile = in ? in->profile : CHOIR_PROFILE_DEFAULT;
    choir_engine_params d = choir_engine_default_params(profile);
    if (!in) {
        *p = d;
        return;
    }
    *p = *in;
    /* Exactly 0 is "the default" (a negative number is left for
     * engine_params_check to refuse). */
#define DEF(f) if (p->f == 0) p->f = d.f
    DEF(memory_budget);
    DEF(high_water);
    DEF(max_batch);
    DEF(wait_short_ms);
    DEF(wait_long_ms);
    DEF(long_seconds);
    DEF(max_pad_waste);
    DEF(queue_capacity);
    DEF(workers);
    DEF(max_audio_seconds);
    DEF(model_options.compute_bf16);
    DEF(gpu_memory_fraction);
    DEF(replica_after_s);
    DEF(replica_idle_s);
#undef DEF
    /* -1 (bf16 off, even where the profile has it on) reaches the models
     * as it is: those whose defaults follow their weights (VibeVoice's GPU
     * cache) take it as "f32" there. */
    /* Defaults that follow other fields: twice the batch this engine forms,
     * and a recovery level under a lowered high-water mark. */
    if (p->replica_queue == 0)
        p->replica_queue = 2 * p->max_batch;
    if (p->low_water == 0)
        p->low_water = d.low_water <= p->high_water ? d.low_water : low_water_under(p->high_water);
    p->model_options.device = CHOIR_DEVICE_CPU;
}

int engine_params_check(const choir_engine_params *p, choir_err *err)
{
    if (!(p->profile >= 0 && p->profile < CHOIR_PROFILE_COUNT))
        return choir_err_set(err, CHOIR_EINVAL, "engine: profile %d is not a profile (0..%d)", (int)p->profile,
                             CHOIR_PROFILE_COUNT - 1);
    for (size_t i = 0; i < N_OPTIONS; i++) {
        const engine_option *o = &options[i];
        const char *field = (const char *)p + o->offset;
        double v = 0;
        if (o->kind == OPTION_SIZE) {
            int64_t b;
            memcpy(&b, field, sizeof b);
            if (b < 0)
                return choir_err_set(err, CHOIR_EINVAL, "engine: %s %lld is negative%s%s%s", o->field,
                                     (long long)b, o->name ? " (--" : "", o->name ? o->name : "",
                                     o->name ? ")" : "");
            continue;
        }
        if (o->kind == OPTION_INT) {
            int k;
            memcpy(&k, field, sizeof k);
            v = k;
        } else if (o->kind == OPTION_REAL) {
            memcpy(&v, field, sizeof v);
        } else {
            continue;
        }
        if (!(v >= o->lo && v <= o->hi))
            return choir_err_set(err, CHOIR_EINVAL, "engine: %s %g is outside %g..%g%s%s%s", o->field, v, o->lo,
                                 o->hi, o->name ? " (--" : "", o->name ? o->name : "", o->name ? ")" : "");
    }
    if (p->low_water > p->high_water)
        return choir_err_set(err, CHOIR_EINVAL, "engine: low_water %g is above high_water %g", p->low_water,
                             p->high_water);
    return 0;
}
