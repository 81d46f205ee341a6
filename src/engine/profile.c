/* Serving profiles and engine parameter defaults. */
#include <stdio.h>
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
        "none", "queue_full", "overload", "deadline", "too_large", "shutdown", "cancelled", "failed",
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
        .max_audio_seconds = 0,
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
    return p;
}
