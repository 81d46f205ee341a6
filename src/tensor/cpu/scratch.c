/* Kernel scratch bound to a thread (choir_kernels_bind_scratch).
 *
 * A kernel takes its temporary block with choir_kscratch_get and gives it
 * back with choir_kscratch_put. With a block bound, pieces are carved from it
 * one after the other; a piece given back frees the space above the highest
 * piece still taken, so pieces may be returned in any order. Without a bound
 * block, or when it has no room, the piece comes from choir_alloc and the
 * binding (when there is one) counts the miss. The bookkeeping is per
 * thread, so nothing here is shared between threads. */
#include <string.h>

#include "choir/alloc.h"
#include "choir/kernels.h"
#include "tensor/cpu/cpu_kernels.h"

#define KS_MAX_LIVE 8

static _Thread_local choir_kernel_scratch *g_bound;
static _Thread_local size_t g_live_start[KS_MAX_LIVE], g_live_end[KS_MAX_LIVE];
static _Thread_local int g_live;

choir_kernel_scratch *choir_kernels_bind_scratch(choir_kernel_scratch *ks) {
    choir_kernel_scratch *prev = g_bound;
    g_bound = ks;
    g_live = 0;
    if (ks) ks->used = 0;
    return prev;
}

void *choir_kscratch_get(size_t bytes) {
    choir_kernel_scratch *ks = g_bound;
    if (ks) {
        size_t start = (ks->used + CHOIR_ALIGN - 1) / CHOIR_ALIGN * CHOIR_ALIGN;
        size_t end = start + bytes;
        if (end > ks->need) ks->need = end;
        if (ks->base && g_live < KS_MAX_LIVE && start <= ks->bytes && bytes <= ks->bytes - start) {
            g_live_start[g_live] = start;
            g_live_end[g_live++] = end;
            ks->used = end;
            return (char *)ks->base + start;
        }
        ks->misses++;
    }
    return choir_alloc(CHOIR_MEM_ACTIVATIONS, bytes);
}

void choir_kscratch_put(void *p) {
    choir_kernel_scratch *ks = g_bound;
    if (!p) return;
    if (ks && ks->base && (char *)p >= (char *)ks->base &&
        (char *)p < (char *)ks->base + ks->bytes) {
        size_t start = (size_t)((char *)p - (char *)ks->base), top = 0;
        int k = 0;
        for (int i = 0; i < g_live; i++) {
            if (g_live_start[i] == start) continue;
            g_live_start[k] = g_live_start[i];
            g_live_end[k++] = g_live_end[i];
            if (g_live_end[i] > top) top = g_live_end[i];
        }
        g_live = k;
        ks->used = top;
        return;
    }
    choir_free(p);
}
