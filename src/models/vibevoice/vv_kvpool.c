/* The paged KV cache of VibeVoice-ASR (choir/vibevoice.h, "paged KV cache"):
 * one pool of pages on the model's backend shared by many states. A page is
 * CHOIR_VV_PAGE positions of every layer's keys and values; the pool keeps
 * each layer's rows together ([layers][pages 128][kv heads D]), so a page
 * index names the same rows in every layer and a layer's attention reads
 * one base pointer and the sequence's page table.
 *
 * Admission is by reservation: a state reserves the pages its planned
 * context needs when it is created, and takes them from the free stack only
 * as its tokens reach them. Because every state's reservation covers its
 * context, a state never finds the stack empty mid-request, and the pool
 * never holds more than it was given. */
#include <string.h>

#include "choir/alloc.h"
#include "choir/backend_vibevoice.h"
#include "models/vibevoice/vv_state.h"

int64_t choir_vibevoice_kv_page_bytes_as(const choir_vibevoice_dims *dims, choir_dtype kv) {
    const choir_vibevoice_lm_dims *L = &dims->lm;
    return 2 * (int64_t)L->n_layers * CHOIR_VV_PAGE * L->n_kv_heads * L->head_dim *
           (int64_t)(kv == CHOIR_DTYPE_BF16 ? 2 : 4);
}

int64_t choir_vibevoice_kv_page_bytes(const choir_vibevoice_dims *dims) {
    return choir_vibevoice_kv_page_bytes_as(dims, CHOIR_DTYPE_F32);
}

int choir_vibevoice_kv_pages_for(int64_t tokens) {
    return tokens > 0 ? (int)((tokens + CHOIR_VV_PAGE - 1) / CHOIR_VV_PAGE) : 0;
}

choir_vibevoice_kv_pool *choir_vibevoice_kv_pool_create(const choir_vibevoice *m, int64_t bytes, choir_err *err) {
    return choir_vibevoice_kv_pool_create_as(m, bytes, CHOIR_DTYPE_F32, err);
}

choir_vibevoice_kv_pool *choir_vibevoice_kv_pool_create_as(const choir_vibevoice *m, int64_t bytes, choir_dtype kv,
                                                           choir_err *err) {
    if (kv != CHOIR_DTYPE_F32 && kv != CHOIR_DTYPE_BF16)
        return choir_err_set(err, CHOIR_EINVAL, "vibevoice: a KV pool of %s values (f32 or bf16)",
                             choir_dtype_name(kv)), NULL;
    int64_t page = choir_vibevoice_kv_page_bytes_as(&m->dims, kv), pages = bytes / page;
    if (pages < 1 || pages > INT32_MAX / CHOIR_VV_PAGE)
        return choir_err_set(err, CHOIR_EINVAL, "vibevoice: a KV pool of %lld bytes (pages of %lld)",
                             (long long)bytes, (long long)page), NULL;
    choir_vibevoice_kv_pool *p = choir_calloc(CHOIR_MEM_ACTIVATIONS, 1, sizeof *p);
    if (p) p->free_pages = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)pages * sizeof *p->free_pages);
    if (!p || !p->free_pages) {
        choir_vibevoice_kv_pool_free(p);
        return choir_err_set(err, CHOIR_ENOMEM, "vibevoice: out of memory"), NULL;
    }
    p->m = m;
    p->kv = kv;
    p->pages = (int)pages;
    p->layer_rows = pages * CHOIR_VV_PAGE;
    size_t half = (size_t)(pages * page / 2);
    if (!(p->stream = choir_stream_create(m->be, err)) || choir_stream_reserve(p->stream, 2 * half + 1024, 0, err) ||
        !(p->k = choir_stream_alloc(p->stream, half, "vibevoice kv pool keys")) ||
        !(p->v = choir_stream_alloc(p->stream, half, "vibevoice kv pool values"))) {
        if (p->stream) choir_stream_status(p->stream, err);
        choir_vibevoice_kv_pool_free(p);
        return NULL;
    }
    /* Popped from the end: page 0 first. */
    for (int i = 0; i < p->pages; i++) p->free_pages[i] = p->pages - 1 - i;
    p->n_free = p->pages;
    return p;
}

void choir_vibevoice_kv_pool_free(choir_vibevoice_kv_pool *p) {
    if (!p) return;
    choir_stream_free(p->stream);
    choir_free(p->free_pages);
    choir_free(p);
}

void choir_vibevoice_kv_pool_usage(const choir_vibevoice_kv_pool *p, choir_vibevoice_kv_usage *u) {
    u->pages = p->pages;
    u->reserved = p->reserved;
    u->in_use = p->pages - p->n_free;
    u->page_bytes = choir_vibevoice_kv_page_bytes_as(&p->m->dims, p->kv);
}

bool choir_vibevoice_kv_pool_fits(const choir_vibevoice_kv_pool *p, int max_context) {
    return p->reserved + choir_vibevoice_kv_pages_for(max_context > 0 ? max_context : 1) <= p->pages;
}

int vv_paged_reserve(choir_vibevoice_kv_pool *p, int pages, choir_err *err) {
    if (p->reserved + pages > p->pages)
        return choir_err_set(err, CHOIR_EBUSY, "vibevoice: the KV pool has %d of its %d pages unreserved, "
                             "the request needs %d", p->pages - p->reserved, p->pages, pages);
    p->reserved += pages;
    return 0;
}

void vv_paged_release(choir_vibevoice_state *s) {
    choir_vibevoice_kv_pool *p = s->pool;
    for (int i = 0; i < s->held; i++) p->free_pages[p->n_free++] = s->table_host[i];
    p->reserved -= s->max_pages;
    s->held = 0;
}

static int64_t layer_floats(const choir_vibevoice_kv_pool *p) {
    return p->layer_rows * p->m->dims.lm.n_kv_heads * p->m->dims.lm.head_dim;
}

void *vv_pool_k(const choir_vibevoice_state *s, int l) {
    return (char *)s->pool->k + l * layer_floats(s->pool) * (int64_t)choir_dtype_size(s->pool->kv);
}
void *vv_pool_v(const choir_vibevoice_state *s, int l) {
    return (char *)s->pool->v + l * layer_floats(s->pool) * (int64_t)choir_dtype_size(s->pool->kv);
}

void vv_paged_hold(choir_vibevoice_state *s, int64_t tokens) {
    choir_vibevoice_kv_pool *p = s->pool;
    int need = choir_vibevoice_kv_pages_for(tokens);
    /* need <= max_pages (the context check came first), and the
     * reservation keeps the stack from running dry. */
    while (s->held < need && p->n_free > 0) {
        s->table_host[s->held++] = p->free_pages[--p->n_free];
        s->table_dirty = 1;
    }
    if (s->table_dirty) {
        choir_op_upload(s->stream, s->table, s->table_host, (size_t)s->max_pages * sizeof *s->table);
        s->table_dirty = 0;
    }
}

void vv_paged_slots(choir_vibevoice_state *s, int64_t rows) {
    int32_t *h = s->slots_host;
    for (int64_t r = 0; r < rows; r++) {
        int64_t pos = s->n_past + r;
        h[r] = s->table_host[pos / CHOIR_VV_PAGE] * CHOIR_VV_PAGE + (int32_t)(pos % CHOIR_VV_PAGE);
    }
    choir_op_upload(s->stream, s->slots, h, (size_t)rows * sizeof *h);
}
