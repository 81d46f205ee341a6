/* The devices an engine places models on: the CPU, then the GPUs that
 * params.gpus selects, each with a memory budget. GPUs are the CUDA devices
 * the backends see (choir_backend_device_count / _query: none in a CPU
 * build), or simulated ones (params.fake_gpus) for tests. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "choir/backend.h"
#include "engine/engine_internal.h"

/* Parses "all", "none" or "0,2" into want[] (ascending, no repeats) against
 * `avail` devices (CHOIR_EUNSUPPORTED: a build without CUDA, so none).
 * Returns the count or a negative code (and err). */
static int parse_gpus(const char *spec, int avail, int want[CHOIR_ENGINE_MAX_GPUS], choir_err *err)
{
    if (!spec || strcmp(spec, "all") == 0) {
        int n = avail < 0 ? 0 : avail < CHOIR_ENGINE_MAX_GPUS ? avail : CHOIR_ENGINE_MAX_GPUS;
        for (int i = 0; i < n; i++)
            want[i] = i;
        return n;
    }
    if (strcmp(spec, "none") == 0 || !*spec)
        return 0;
    if (avail == CHOIR_EUNSUPPORTED)
        return choir_err_set(err, CHOIR_EINVAL,
                             "--gpus %s: choir was built without CUDA (configure with -DCHOIR_CUDA=ON), "
                             "so only --gpus none or all (no GPU) work", spec);
    int n = 0;
    const char *p = spec;
    for (;;) {
        char *end = NULL;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > 1000 || (*end && *end != ','))
            return choir_err_set(err, CHOIR_EINVAL, "--gpus '%s': expected all, none or indices like 0,1", spec);
        if (v >= avail)
            return choir_err_set(err, CHOIR_EINVAL, "--gpus '%s': there is no GPU %ld (%d visible)", spec, v, avail);
        for (int i = 0; i < n; i++)
            if (want[i] == v)
                return choir_err_set(err, CHOIR_EINVAL, "--gpus '%s': GPU %ld is listed twice", spec, v);
        if (n == CHOIR_ENGINE_MAX_GPUS)
            return choir_err_set(err, CHOIR_EINVAL, "--gpus '%s': at most %d GPUs", spec, CHOIR_ENGINE_MAX_GPUS);
        want[n++] = (int)v;
        if (!*end)
            break;
        p = end + 1;
    }
    /* Ascending, so device numbers follow CUDA's order. */
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && want[j - 1] > want[j]; j--) {
            int t = want[j];
            want[j] = want[j - 1];
            want[j - 1] = t;
        }
    return n;
}

/* Fills the card's name and memory size. */
static int probe_gpu(const choir_engine_params *p, int index, engine_device *d, choir_err *err)
{
    if (p->fake_gpus > 0) {
        if (p->fake_gpu_bytes[index] <= 0)
            return choir_err_set(err, CHOIR_EINVAL, "fake GPU %d: no memory size given", index);
        d->total_bytes = p->fake_gpu_bytes[index];
        d->fake = 1;
        snprintf(d->hw_name, sizeof d->hw_name, "fake");
        return 0;
    }
    choir_backend_device gpu;
    int rc = choir_backend_device_query(index, &gpu, err);
    if (rc < 0)
        return rc;
    d->total_bytes = gpu.total_bytes;
    snprintf(d->hw_name, sizeof d->hw_name, "%.120s", gpu.name);
    return 0;
}

int engine_devices_resolve(choir_engine *e, choir_err *err)
{
    const choir_engine_params *p = &e->p;
    engine_device *cpu = &e->devices[0];
    memset(cpu, 0, sizeof *cpu);
    cpu->kind = CHOIR_DEVICE_KIND_CPU;
    snprintf(cpu->name, sizeof cpu->name, "cpu");
    snprintf(cpu->hw_name, sizeof cpu->hw_name, "host");
    cpu->total_bytes = cpu->budget = p->memory_budget;
    e->n_devices = 1;
    /* fake_gpus and gpu_memory_fraction were bounded by engine_params_check. */
    int avail = p->fake_gpus > 0 ? p->fake_gpus : choir_backend_device_count();
    int want[CHOIR_ENGINE_MAX_GPUS];
    int n = parse_gpus(p->gpus, avail, want, err);
    if (n < 0)
        return n;
    for (int i = 0; i < n; i++) {
        engine_device *d = &e->devices[1 + i];
        memset(d, 0, sizeof *d);
        d->kind = CHOIR_DEVICE_KIND_GPU;
        d->index = want[i];
        snprintf(d->name, sizeof d->name, "gpu%d", want[i]);
        int rc = probe_gpu(p, want[i], d, err);
        if (rc < 0)
            return rc;
        d->budget = p->gpu_memory_bytes > 0 ? (p->gpu_memory_bytes < d->total_bytes ? p->gpu_memory_bytes
                                                                                    : d->total_bytes)
                                            : (int64_t)((double)d->total_bytes * p->gpu_memory_fraction);
        if (d->budget <= 0)
            return choir_err_set(err, CHOIR_EINVAL, "%s: no memory budget", d->name);
        e->n_devices++;
    }
    return 0;
}
