/* SAM-Audio's memory plan: where a call's working memory comes from (the
 * estimates built on it are in sam_sep.c, beside the round they plan; this
 * file needs no T5 or file code, so the standalone CUDA build links it).
 *
 * Every call runs in one host arena (sam_mem): the engine's batch arena, or
 * without one an arena of the call's planned size reserved up front from
 * the counted allocator, so the forward itself allocates nothing. Its
 * stages (T5, each encode, each ODE, each decode) run one after another,
 * each carving what it needs above the call's longer-lived buffers and
 * giving it back at its end (sam_stage). On the CPU a stage's buffers and
 * its kernel scratch (sized for its own lengths) come from the arena,
 * through one stream per call; on a GPU the device memory comes from a
 * stream the stage opens on the device, and the arena holds the host side.
 *
 * The estimate (choir_sam_job_bytes) is that plan's peak: a job's state
 * (text features, crossfade tails) plus the larger of its T5 encoding and
 * its first round (the first chunk is the longest). Summed over the
 * requests of a batch it covers the batch: states add up, a round of
 * several chunks takes at most the sum of their rounds alone (sam_sep.c's
 * order), and each stage's share is subadditive in its items. */
#include <string.h>

#include "choir/alloc.h"
#include "sam_internal.h"

size_t sam_up(size_t bytes) { return (bytes + 255) / 256 * 256; }

size_t sam_need_arena(const choir_sam *m, const sam_need *need) {
    size_t b = sam_up(need->host);
    if (choir_backend_is_host(m->be)) b += sam_up(need->work) + sam_up(need->scratch);
    return b;
}

int sam_mem_open(const choir_sam *m, choir_arena *arena, size_t plan_bytes, sam_mem *mem,
                 choir_err *err) {
    memset(mem, 0, sizeof *mem);
    if (!arena) {
        mem->own = choir_arena_create(plan_bytes > 4096 ? plan_bytes : 4096, CHOIR_MEM_ACTIVATIONS, err);
        if (!mem->own) return err && err->code ? err->code : CHOIR_ENOMEM;
        arena = mem->own;
    }
    mem->a = arena;
    if (choir_backend_is_host(m->be) && !(mem->s = choir_stream_create(m->be, err))) {
        sam_mem_close(mem);
        return CHOIR_ENOMEM;
    }
    return 0;
}

void sam_mem_close(sam_mem *mem) {
    choir_stream_free(mem->s);
    choir_arena_free(mem->own);
    memset(mem, 0, sizeof *mem);
}

void *sam_host_alloc(const sam_mem *mem, size_t bytes, choir_err *err) {
    void *p = choir_arena_alloc(mem->a, bytes ? bytes : 1);
    if (!p)
        choir_err_set(err, CHOIR_ENOMEM, "sam-audio: the arena has no room for %zu bytes (%zu of %zu used)",
                      bytes, choir_arena_used(mem->a), choir_arena_capacity(mem->a));
    return p;
}

int sam_stage_begin(const choir_sam *m, const sam_mem *mem, const sam_need *need, sam_stage *st,
                    choir_err *err) {
    memset(st, 0, sizeof *st);
    st->mem = mem;
    st->mark = choir_arena_mark(mem->a);
    if (mem->s) {
        int rc = choir_stream_use_arena(mem->s, mem->a, need->scratch, err);
        if (rc) return rc;
        st->s = mem->s;
        return 0;
    }
    choir_backend_lock(m->be);
    if (!(st->s = sam_stream_open(m, need->work, err))) {
        choir_backend_unlock(m->be);
        return err && err->code ? err->code : CHOIR_ENOMEM;
    }
    st->device = 1;
    return 0;
}

void sam_stage_end(const choir_sam *m, sam_stage *st) {
    if (!st->mem) return;
    if (st->device) {
        choir_stream_free(st->s);
        choir_backend_unlock(m->be);
    } else if (st->s) {
        /* unbinds the stage's scratch before the arena takes it back */
        choir_stream_use_arena(st->s, NULL, 0, NULL);
    }
    choir_arena_release(st->mem->a, st->mark);
    memset(st, 0, sizeof *st);
}

/* --- geometry and the job's plan ------------------------------------------ */

void sam_job_geometry(const choir_sam *m, int64_t n, const choir_sam_params *p, sam_geometry *g) {
    g->chunk = (int64_t)(p->chunk_seconds * CHOIR_SAM_RATE);
    g->overlap = (int64_t)(p->overlap_seconds * CHOIR_SAM_RATE);
    /* A chunk longer than the model's position table (400 s for the
     * published models) is cut to it; the overlap stays at most half. */
    if (g->chunk > m->dit.max_pos * m->codec.hop) {
        g->chunk = m->dit.max_pos * m->codec.hop;
        if (g->overlap > g->chunk / 2) g->overlap = g->chunk / 2;
    }
    g->hop = g->chunk - g->overlap;
    g->n_chunks = n <= g->chunk ? 1 : (int)((n - g->overlap + g->hop - 1) / g->hop);
    g->first_len = g->n_chunks == 1 ? n : g->chunk;
}

