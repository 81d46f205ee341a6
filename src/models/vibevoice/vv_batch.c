/* Decoding steps of several sequences at once (continuous batching on one
 * backend): the token rows of every live sequence go through each linear
 * layer together, so a step streams the weights once for all of them, while
 * attention runs per sequence over its own KV cache (sequences sit at
 * different lengths). Which sequences take part may change from one step to
 * the next: requests join and leave at step boundaries. Each step is exactly
 * the single-sequence step (vv_lm.c) for every row, up to the summation
 * order of a product over more rows. */
#include <string.h>

#include "choir/alloc.h"
#include "choir/backend_vibevoice.h"
#include "models/vibevoice/vv_state.h"

struct choir_vibevoice_batch {
    const choir_vibevoice *m;
    choir_stream *stream;
    int max_batch, host;
    float *x, *xn, *tmp;  /* [B][H] */
    float *q, *att;       /* [B][heads D] */
    float *k, *v;         /* [B][kv heads D] new rows, before they go to the caches */
    float *gate, *up;     /* [B][I] */
    float *logits;        /* [B][vocab] */
    int32_t *ids, *pos;   /* [B] backend memory */
    int32_t *next;        /* [B] backend memory: the greedy picks (choir_vibevoice_step_batch_greedy) */
    int32_t *stage;       /* [2 B] host staging of ids and positions */
    /* Over paged states of `pool`: each row's page table at a stride of
     * `cap` entries (the pages of the longest context), the pool rows of
     * the new keys. */
    choir_vibevoice_kv_pool *pool;
    int cap;
    int32_t *tables, *slots, *zeros; /* [B cap], [B], [B] backend memory */
    int32_t *tables_stage;           /* [B cap + B] host staging of tables and slots */
    /* Paged steps recorded as graphs (choir_vibevoice_batch_set_graph): one
     * per row count n and kind (entry n: logits out; B + 1 + n: greedy
     * picks out), recorded at a table stride; direct_stride[] is the
     * stride of the last step of that shape run op by op (0: none yet). */
    int graph_on, graph_last, graph_failed;
    choir_graph **graphs;  /* [2 (B + 1)] */
    int *graph_stride;     /* [2 (B + 1)] */
    int *direct_stride;    /* [2 (B + 1)] */
};

/* Floats of each buffer, in layout order. */
static int64_t batch_layout(const choir_vibevoice_dims *d, int B, int cap, choir_vibevoice_batch *b, void *block) {
    const choir_vibevoice_lm_dims *L = &d->lm;
    int64_t H = L->hidden, qd = (int64_t)L->n_heads * L->head_dim, kvd = (int64_t)L->n_kv_heads * L->head_dim;
    struct {
        float **dst;
        int64_t n;
    } parts[] = {
        {b ? &b->x : NULL, B * H},     {b ? &b->xn : NULL, B * H},   {b ? &b->tmp : NULL, B * H},
        {b ? &b->q : NULL, B * qd},    {b ? &b->att : NULL, B * qd}, {b ? &b->k : NULL, B * kvd},
        {b ? &b->v : NULL, B * kvd},   {b ? &b->gate : NULL, B * L->intermediate},
        {b ? &b->up : NULL, B * L->intermediate}, {b ? &b->logits : NULL, B * (int64_t)L->vocab},
        {b ? (float **)&b->ids : NULL, B}, {b ? (float **)&b->pos : NULL, B},
        {b ? (float **)&b->next : NULL, B},
        {b ? (float **)&b->tables : NULL, (int64_t)B * cap}, {b ? (float **)&b->slots : NULL, cap ? B : 0},
        {b ? (float **)&b->zeros : NULL, cap ? B : 0},
    };
    int64_t off = 0;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        if (b) *parts[i].dst = (float *)((char *)block + off);
        off += (parts[i].n * (int64_t)sizeof(float) + 63) & ~(int64_t)63;
    }
    return off;
}

int64_t choir_vibevoice_batch_bytes(const choir_vibevoice_dims *dims, int max_batch) {
    return max_batch > 0 ? batch_layout(dims, max_batch, 0, NULL, NULL) + 256 : 0;
}

/* Entries of a row's page table in a paged batch: the pages of the longest
 * context the model has (a state's table is never longer), so the batch's
 * size does not depend on its pool's. */
static int table_cap(const choir_vibevoice_dims *dims) {
    return choir_vibevoice_kv_pages_for(dims->lm.max_positions > 0 ? dims->lm.max_positions : 1);
}

int64_t choir_vibevoice_batch_bytes_paged(const choir_vibevoice_dims *dims, int max_batch,
                                          const choir_vibevoice_kv_pool *pool) {
    (void)pool;
    return max_batch > 0 ? batch_layout(dims, max_batch, table_cap(dims), NULL, NULL) + 256 : 0;
}

static choir_vibevoice_batch *batch_make(const choir_vibevoice *m, int max_batch, choir_vibevoice_kv_pool *pool,
                                         choir_stream *stream, choir_err *err) {
    if (max_batch <= 0 || max_batch > 4096)
        return choir_err_set(err, CHOIR_EINVAL, "vibevoice: a batch of %d sequences", max_batch), NULL;
    if (choir_stream_backend(stream) != m->be)
        return choir_err_set(err, CHOIR_EINVAL, "vibevoice: the stream is not on the model's backend"), NULL;
    int cap = pool ? table_cap(&m->dims) : 0;
    choir_vibevoice_batch *b = choir_calloc(CHOIR_MEM_ACTIVATIONS, 1, sizeof *b);
    int32_t *stage = choir_alloc(CHOIR_MEM_IO, (size_t)max_batch * 2 * sizeof *stage);
    int32_t *tstage = pool ? choir_calloc(CHOIR_MEM_IO, (size_t)max_batch * ((size_t)cap + 1), sizeof *tstage)
                           : NULL;
    void *block = b && stage && (tstage || !pool)
                      ? choir_stream_alloc(stream, (size_t)batch_layout(&m->dims, max_batch, cap, NULL, NULL),
                                           "vibevoice batch")
                      : NULL;
    if (!block) {
        choir_free(tstage);
        choir_free(stage);
        choir_free(b);
        if (choir_stream_status(stream, err) == 0) choir_err_set(err, CHOIR_ENOMEM, "vibevoice: out of memory");
        return NULL;
    }
    b->m = m;
    b->stream = stream;
    b->max_batch = max_batch;
    b->host = choir_backend_is_host(m->be);
    b->stage = stage;
    b->pool = pool;
    b->cap = cap;
    b->tables_stage = tstage;
    batch_layout(&m->dims, max_batch, cap, b, block);
    if (pool) {
        size_t kinds = 2 * ((size_t)max_batch + 1);
        b->graphs = choir_calloc(CHOIR_MEM_OTHER, kinds, sizeof *b->graphs);
        b->graph_stride = choir_calloc(CHOIR_MEM_OTHER, kinds, sizeof *b->graph_stride);
        b->direct_stride = choir_calloc(CHOIR_MEM_OTHER, kinds, sizeof *b->direct_stride);
        if (!b->graphs || !b->graph_stride || !b->direct_stride) {
            choir_vibevoice_batch_free(b);
            return choir_err_set(err, CHOIR_ENOMEM, "vibevoice: out of memory"), NULL;
        }
    }
    if (pool) {
        /* tstage is all zeros yet: the rows' slot for rows_scatter. */
        choir_op_upload(stream, b->zeros, tstage, (size_t)max_batch * sizeof *b->zeros);
        if (choir_stream_status(stream, err)) {
            choir_vibevoice_batch_free(b);
            return NULL;
        }
    }
    return b;
}

choir_vibevoice_batch *choir_vibevoice_batch_create(const choir_vibevoice *m, int max_batch, choir_stream *stream,
                                                    choir_err *err) {
    return batch_make(m, max_batch, NULL, stream, err);
}

choir_vibevoice_batch *choir_vibevoice_batch_create_paged(const choir_vibevoice *m, int max_batch,
                                                          choir_vibevoice_kv_pool *pool, choir_stream *stream,
                                                          choir_err *err) {
    if (!pool || pool->m != m)
        return choir_err_set(err, CHOIR_EINVAL, "vibevoice: a KV pool of another model"), NULL;
    return batch_make(m, max_batch, pool, stream, err);
}

static void batch_free_graphs(choir_vibevoice_batch *b) {
    for (int n = 0; b->graphs && n < 2 * (b->max_batch + 1); n++) {
        choir_graph_free(b->graphs[n]);
        b->graphs[n] = NULL;
    }
}

void choir_vibevoice_batch_set_graph(choir_vibevoice_batch *b, bool on) {
    if (!on) batch_free_graphs(b);
    b->graph_on = on && b->pool && !b->host;
    b->graph_failed = 0;
}

bool choir_vibevoice_batch_graphed(const choir_vibevoice_batch *b) { return b->graph_last; }

void choir_vibevoice_batch_free(choir_vibevoice_batch *b) {
    if (!b) return;
    batch_free_graphs(b);
    choir_free(b->graphs);
    choir_free(b->graph_stride);
    choir_free(b->direct_stride);
    choir_free(b->tables_stage);
    choir_free(b->stage);
    choir_free(b);
}

/* The device side of a step of n rows: embedding, the layers, the output
 * head, into b->logits, and with `greedy` each row's pick into b->next.
 * Paged: nothing but n and the table stride comes from the host (what a
 * graph records). */
static void batch_ops(const choir_vibevoice *m, choir_vibevoice_batch *b, choir_vibevoice_state *const *states,
                      int n, int stride, int greedy) {
    const choir_vibevoice_lm_dims *L = &m->dims.lm;
    choir_stream *st = b->stream;
    int64_t D = L->head_dim, qd = (int64_t)L->n_heads * D, kvd = (int64_t)L->n_kv_heads * D;
    choir_op_rows_gather(st, &m->embed, b->ids, n, b->x);
    for (int l = 0; l < L->n_layers; l++) {
        const vv_layer *w = &m->layers[l];
        if (b->pool) {
            void *kp = vv_pool_k(states[0], l), *vp = vv_pool_v(states[0], l);
            choir_dtype kv = b->pool->kv;
            /* Row i's new key and value to pool row slots[i]. */
            choir_rows_out ko = {kp, kv, 0, kvd, b->zeros, b->slots}, vo = {vp, kv, 0, kvd, b->zeros, b->slots};
            vv_layer_qkv_store(m, w, st, b->x, b->xn, n, b->pos, b->q, b->k, b->v, &ko, &vo);
            choir_op_attention_paged_at_kv(st, b->q, n, kp, vp, kv, b->tables, stride, b->pos,
                                           (int64_t)stride * CHOIR_VV_PAGE, L->n_heads, L->n_kv_heads, (int)D,
                                           b->att);
        } else {
            /* Each row's key and value join its own cache, then it attends there. */
            vv_layer_qkv(m, w, st, b->x, b->xn, n, b->pos, b->q, b->k, b->v);
            for (int i = 0; i < n; i++) {
                const choir_vibevoice_state *s = states[i];
                float *kl = s->k_cache + (int64_t)l * s->ctx * kvd, *vl = s->v_cache + (int64_t)l * s->ctx * kvd;
                choir_op_copy(st, kl + (int64_t)s->n_past * kvd, b->k + i * kvd, (size_t)kvd * sizeof(float));
                choir_op_copy(st, vl + (int64_t)s->n_past * kvd, b->v + i * kvd, (size_t)kvd * sizeof(float));
                choir_op_attention_cached(st, b->q + i * qd, 1, kl, vl, s->n_past, L->n_heads, L->n_kv_heads,
                                          (int)D, b->att + i * qd);
            }
        }
        vv_layer_mlp(m, w, st, b->x, b->xn, b->att, n, b->gate, b->up, b->tmp);
    }
    vv_lm_head(m, st, b->x, b->xn, n, b->logits);
    if (greedy) choir_op_argmax_rows(st, b->logits, n, L->vocab, b->next);
}

static int step_batch(const choir_vibevoice *m, choir_vibevoice_batch *b, choir_vibevoice_state *const *states,
                      const int32_t *tokens, int n, int32_t *next, choir_err *err) {
    const choir_vibevoice_lm_dims *L = &m->dims.lm;
    if (n <= 0 || n > b->max_batch)
        return choir_err_set(err, CHOIR_EINVAL, "vibevoice: %d sequences for a batch of %d", n, b->max_batch);
    for (int i = 0; i < n; i++) {
        const choir_vibevoice_state *s = states[i];
        if (s->m != m) return choir_err_set(err, CHOIR_EINVAL, "vibevoice: sequence %d is of another model", i);
        if (s->n_past + 1 > s->ctx)
            return choir_err_set(err, CHOIR_ETOOBIG, "vibevoice: sequence %d is at its planned context of %d", i,
                                 s->ctx);
        if (tokens[i] < 0 || tokens[i] >= L->vocab)
            return choir_err_set(err, CHOIR_EINVAL, "vibevoice: token %d outside the vocabulary of %d",
                                 (int)tokens[i], L->vocab);
        for (int j = 0; j < i; j++)
            if (states[j] == s) return choir_err_set(err, CHOIR_EINVAL, "vibevoice: sequence %d appears twice", i);
        if (s->pool != b->pool)
            return choir_err_set(err, CHOIR_EINVAL, "vibevoice: sequence %d is %s the batch's KV pool", i,
                                 s->pool ? "not on" : "paged without");
    }
    choir_stream *st = b->stream;
    int32_t *pos_h = b->stage + b->max_batch;
    for (int i = 0; i < n; i++) {
        b->stage[i] = tokens[i];
        pos_h[i] = states[i]->n_past;
    }
    choir_op_upload(st, b->ids, b->stage, (size_t)n * sizeof *b->ids);
    choir_op_upload(st, b->pos, pos_h, (size_t)n * sizeof *b->pos);
    /* Paged: every row's table at one stride (the longest table of the
     * step), its new keys' pool rows; one attention for all rows. */
    int stride = 0;
    if (b->pool) {
        for (int i = 0; i < n; i++) {
            vv_paged_hold(states[i], states[i]->n_past + 1);
            if (states[i]->max_pages > stride) stride = states[i]->max_pages;
        }
        int32_t *slots_h = b->tables_stage + (int64_t)n * stride;
        for (int i = 0; i < n; i++) {
            const choir_vibevoice_state *s = states[i];
            memcpy(b->tables_stage + (int64_t)i * stride, s->table_host, (size_t)s->max_pages * sizeof(int32_t));
            memset(b->tables_stage + (int64_t)i * stride + s->max_pages, 0,
                   (size_t)(stride - s->max_pages) * sizeof(int32_t));
            slots_h[i] = s->table_host[s->n_past / CHOIR_VV_PAGE] * CHOIR_VV_PAGE + s->n_past % CHOIR_VV_PAGE;
        }
        choir_op_upload(st, b->tables, b->tables_stage, (size_t)n * (size_t)stride * sizeof(int32_t));
        choir_op_upload(st, b->slots, slots_h, (size_t)n * sizeof(int32_t));
    }
    /* A paged step is the same operations for every step of n rows at one
     * table stride (positions, tables and slots are read from backend
     * memory), so it can be recorded once and replayed: after one step of
     * that shape op by op (which sized the kernels' scratch). */
    int greedy = next != NULL, g = n + (greedy ? b->max_batch + 1 : 0);
    b->graph_last = 0;
    if (b->graph_on && !b->graph_failed) {
        if (b->graphs[g] && b->graph_stride[g] != stride) {
            choir_graph_free(b->graphs[g]);
            b->graphs[g] = NULL;
        }
        if (!b->graphs[g] && b->direct_stride[g] == stride) {
            choir_err gerr = {0};
            if (choir_stream_graph_begin(st, &gerr) == 0) {
                batch_ops(m, b, states, n, stride, greedy);
                b->graphs[g] = choir_stream_graph_end(st, &gerr);
                b->graph_stride[g] = stride;
            }
            if (!b->graphs[g]) b->graph_failed = 1;
        }
    }
    if (b->graph_on && b->graphs[g]) {
        choir_stream_graph_launch(st, b->graphs[g]);
        b->graph_last = 1;
    } else {
        batch_ops(m, b, states, n, stride, greedy);
        if (b->graphs) b->direct_stride[g] = stride;
    }
    /* Greedy: n ids come back, the logits stay where they are. */
    if (greedy) choir_op_download(st, next, b->next, (size_t)n * sizeof *next);
    for (int i = 0; !greedy && i < n; i++) {
        choir_vibevoice_state *s = states[i];
        const float *row = b->logits + (int64_t)i * L->vocab;
        choir_op_copy(st, s->logits, row, (size_t)L->vocab * sizeof(float));
        if (!s->host) choir_op_download(st, s->logits_host, row, (size_t)L->vocab * sizeof(float));
    }
    int rc = choir_stream_status(st, err);
    if (rc) return rc;
    for (int i = 0; i < n; i++) states[i]->n_past++;
    return 0;
}

int choir_vibevoice_step_batch(const choir_vibevoice *m, choir_vibevoice_batch *b, choir_vibevoice_state *const *states,
                               const int32_t *tokens, int n, choir_err *err) {
    return step_batch(m, b, states, tokens, n, NULL, err);
}

int choir_vibevoice_step_batch_greedy(const choir_vibevoice *m, choir_vibevoice_batch *b,
                                      choir_vibevoice_state *const *states, const int32_t *tokens, int n,
                                      int32_t *next, choir_err *err) {
    if (!next) return choir_err_set(err, CHOIR_EINVAL, "vibevoice: no room for the greedy picks");
    return step_batch(m, b, states, tokens, n, next, err);
}
