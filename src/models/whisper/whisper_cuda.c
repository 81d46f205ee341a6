/* Whisper on the CUDA backend: attaching a model to a GPU places its
 * memory there, and from then on the forward written over backend
 * operations (whisper_enc.c, whisper_dec.c), the CPU's own code, runs on a
 * CUDA backend. What is here is only placement: the weights uploaded
 * through the backend, the pools the caches are slots of, the streams and
 * the decoder's step buffers, pinned logits. Built with CHOIR_HAVE_CUDA;
 * without it the public functions say so. */
#include "choir/whisper.h"

#ifdef CHOIR_HAVE_CUDA

#include <math.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/cuda.h"
#include "models/whisper/whisper_cuda.h"

/* --- weights ---------------------------------------------------------------- */

/* One block on the device (the cross members for decoder blocks). */
static void block_up(choir_backend_weights *ws, const wh_block *h, int64_t d, int64_t ffn,
                     bool dec, wh_block *b) {
    memset(b, 0, sizeof *b);
    b->attn_ln_g = choir_backend_vec(ws, h->attn_ln_g, d);
    b->attn_ln_b = choir_backend_vec(ws, h->attn_ln_b, d);
    b->mlp_ln_g = choir_backend_vec(ws, h->mlp_ln_g, d);
    b->mlp_ln_b = choir_backend_vec(ws, h->mlp_ln_b, d);
    const wh_attn *ha[2] = {&h->attn, &h->cross};
    wh_attn *ba[2] = {&b->attn, &b->cross};
    for (int i = 0; i < (dec ? 2 : 1); i++) {
        choir_backend_weight(ws, &ha[i]->q, &ba[i]->q);
        choir_backend_weight(ws, &ha[i]->k, &ba[i]->k);
        choir_backend_weight(ws, &ha[i]->v, &ba[i]->v);
        choir_backend_weight(ws, &ha[i]->o, &ba[i]->o);
        ba[i]->bq = choir_backend_vec(ws, ha[i]->bq, d);
        ba[i]->bv = choir_backend_vec(ws, ha[i]->bv, d);
        ba[i]->bo = choir_backend_vec(ws, ha[i]->bo, d);
    }
    if (dec) {
        b->cross_ln_g = choir_backend_vec(ws, h->cross_ln_g, d);
        b->cross_ln_b = choir_backend_vec(ws, h->cross_ln_b, d);
    }
    choir_backend_weight(ws, &h->fc1, &b->fc1);
    b->fc1_b = choir_backend_vec(ws, h->fc1_b, ffn);
    choir_backend_weight(ws, &h->fc2, &b->fc2);
    b->fc2_b = choir_backend_vec(ws, h->fc2_b, d);
}

static int weights_up(choir_whisper_gpu *g, choir_err *err) {
    const choir_whisper *m = g->m;
    const choir_whisper_dims *D = &m->dims;
    int64_t d = D->d_model, ffn = D->ffn_dim;
    if (!(g->ws = choir_backend_weights_create(g->be, err))) return CHOIR_ENOMEM;
    g->enc = choir_calloc(CHOIR_MEM_OTHER, (size_t)(D->n_audio_layer > 0 ? D->n_audio_layer : 1),
                          sizeof(wh_block));
    g->dec = choir_calloc(CHOIR_MEM_OTHER, (size_t)(D->n_text_layer > 0 ? D->n_text_layer : 1),
                          sizeof(wh_block));
    if (!g->enc || !g->dec) return choir_err_set(err, CHOIR_ENOMEM, "out of host memory");
    choir_backend_weights *ws = g->ws;
    wh_net *w = &g->net;
    *w = (wh_net){.be = g->be, .enc_windows = g->opts.max_windows, .enc = g->enc, .dec = g->dec};
    w->conv1_w = choir_backend_vec(ws, m->conv1_w, d * D->n_mels * 3);
    w->conv1_b = choir_backend_vec(ws, m->conv1_b, d);
    w->conv2_w = choir_backend_vec(ws, m->conv2_w, d * d * 3);
    w->conv2_b = choir_backend_vec(ws, m->conv2_b, d);
    w->enc_pos = choir_backend_vec(ws, m->enc_pos, (int64_t)D->n_audio_ctx * d);
    w->enc_ln_g = choir_backend_vec(ws, m->enc_ln_g, d);
    w->enc_ln_b = choir_backend_vec(ws, m->enc_ln_b, d);
    for (int l = 0; l < D->n_audio_layer; l++) block_up(ws, &m->enc[l], d, ffn, false, &g->enc[l]);
    choir_backend_weight(ws, &m->tok_emb, &w->tok_emb);
    w->dec_pos = choir_backend_vec(ws, m->dec_pos, (int64_t)D->n_text_ctx * d);
    for (int l = 0; l < D->n_text_layer; l++) block_up(ws, &m->dec[l], d, ffn, true, &g->dec[l]);
    w->dec_ln_g = choir_backend_vec(ws, m->dec_ln_g, d);
    w->dec_ln_b = choir_backend_vec(ws, m->dec_ln_b, d);
    return choir_backend_weights_status(ws, err);
}

const wh_net *wg_net(const choir_whisper_gpu *g) { return &g->net; }

/* --- streams ------------------------------------------------------------------- */

choir_stream *wg_stream_open(choir_whisper_gpu *g, size_t work, choir_err *err) {
    if (choir_cuda_make_current(g->cu, err)) return NULL;
    if (work > g->enc_reserved) {
        if (choir_stream_reserve(g->enc_stream, work, 0, err)) return NULL;
        g->enc_reserved = work;
    }
    g->enc_mark = choir_stream_mark(g->enc_stream);
    return g->enc_stream;
}

int wg_stream_done(choir_whisper_gpu *g, int rc, choir_err *err) {
    choir_stream *s = g->enc_stream;
    choir_err e = {0};
    int st = choir_stream_sync(s, &e);
    if (st) choir_stream_clear(s);
    choir_stream_release(s, g->enc_mark);
    if (!rc && st) {
        rc = st;
        if (err) *err = e;
    }
    if (rc) choir_err_prefix(err, "whisper gpu");
    return rc;
}

/* Scratch the context needs for the largest call with `rows` decoder rows:
 * attention scores of an encoder window and of a decoder prompt's cross
 * attention; conv1d im2col; then half-precision operands of the tensor core
 * products (x converted; a quantized matrix expanded). */
static size_t scratch_need(const choir_whisper_gpu *g, int64_t rows) {
    const choir_whisper_dims *D = &g->m->dims;
    int64_t H = D->n_head, A = D->n_audio_ctx, C = D->n_text_ctx, d = D->d_model;
    int64_t ffn = D->ffn_dim, F = CHOIR_WHISPER_N_FRAMES;
    int64_t enc_rows = (int64_t)g->opts.max_windows * A;
    int64_t need = H * A * A * 4;
    if (H * C * A * 4 > need) need = H * C * A * 4;
    int64_t conv = (D->n_mels * 3 * F > d * 3 * A ? D->n_mels * 3 * F : d * 3 * A) * 4;
    if (conv > need) need = conv;
    const choir_whisper *m = g->m;
    bool half = g->opts.bf16 || m->tok_emb.kind != CHOIR_WEIGHT_F32 ||
                (D->n_audio_layer > 0 && m->enc[0].fc1.kind != CHOIR_WEIGHT_F32) ||
                (D->n_text_layer > 0 && m->dec[0].fc1.kind != CHOIR_WEIGHT_F32);
    if (half) {
        int64_t r = enc_rows > rows ? enc_rows : rows;
        int64_t lin =
            ((r * (ffn > d ? ffn : d) * 2 + 255) & ~(int64_t)255) + (int64_t)D->n_vocab * d * 2;
        if (lin > need) need = lin;
    }
    return (size_t)need;
}

wh_dec_rt *wg_dec_rt(choir_whisper_gpu *g, int64_t N, int64_t n_out, size_t extra,
                     choir_err *err) {
    wh_dec_rt *rt = &g->rt;
    if (choir_cuda_make_current(g->cu, err)) return NULL;
    if (N <= rt->rows_cap && n_out <= g->logits_cap && extra <= g->extra_cap) return rt;
    /* Growing moves the stream's memory: the graphs, which hold its
     * addresses, go first, and the scratch grows while none lives. */
    wh_dec_graphs_drop(rt);
    int cap = rt->rows_cap, lcap = g->logits_cap;
    while (cap < N) cap = cap ? 2 * cap : 8;
    while (lcap < n_out) lcap = lcap ? 2 * lcap : 8;
    size_t xcap = extra > g->extra_cap ? extra : g->extra_cap;
    int32_t *staging =
        choir_backend_host_alloc(g->be, (size_t)(WH_META * cap) * sizeof(int32_t));
    choir_graph **graphs = choir_calloc(CHOIR_MEM_OTHER, (size_t)cap + 1, sizeof *graphs);
    choir_graph **ggraphs =
        choir_calloc(CHOIR_MEM_OTHER, (size_t)(cap + 1) * WH_GREEDY_KS, sizeof *ggraphs);
    int rc = !staging || !graphs || !ggraphs
                 ? choir_err_set(err, CHOIR_ENOMEM, "whisper gpu: out of host memory")
                 : 0;
    if (!rc)
        rc = choir_stream_reserve(rt->s,
                                  wh_dec_work_bytes(&g->m->dims, cap, lcap) +
                                      wh_greedy_work_bytes(&g->m->dims, cap) + xcap,
                                  0, err);
    if (!rc) rc = choir_cuda_scratch_reserve(g->cu, scratch_need(g, cap), err);
    if (rc) {
        if (staging) choir_backend_host_free(g->be, staging);
        choir_free(graphs);
        choir_free(ggraphs);
        choir_err_prefix(err, "whisper gpu: decoder memory for %d rows", cap);
        return NULL;
    }
    if (rt->staging) choir_backend_host_free(g->be, rt->staging);
    choir_free(rt->graphs);
    choir_free(rt->ggraphs);
    rt->staging = staging;
    rt->graphs = graphs;
    rt->ggraphs = ggraphs;
    rt->be = g->be;
    rt->rows_cap = cap;
    g->logits_cap = lcap;
    g->extra_cap = xcap;
    return rt;
}

/* --- pools of caches ------------------------------------------------------- */

static void pool_bufs_free(choir_cuda *cu, void *k, void *v, size_t bytes) {
    choir_cuda_buf bk = {k, bytes}, bv = {v, bytes};
    if (k) choir_cuda_buf_free(cu, &bk);
    if (v) choir_cuda_buf_free(cu, &bv);
}

static size_t pool_bytes(const wh_pool *p) {
    return (size_t)p->cap * (size_t)p->slot_elems * wh_kv_size(p->dt);
}

static void pool_free(choir_cuda *cu, wh_pool *p) {
    pool_bufs_free(cu, p->k, p->v, pool_bytes(p));
    choir_free(p->used);
    choir_free(p->owner);
    p->k = p->v = NULL;
    p->used = NULL;
    p->owner = NULL;
    p->cap = 0;
}

/* Points slot i's owner at its memory. */
static void pool_point(wh_pool *p, int i) {
    void *k = wh_kv_at(p->k, p->dt, (int64_t)i * p->slot_elems);
    void *v = wh_kv_at(p->v, p->dt, (int64_t)i * p->slot_elems);
    if (p->of_seqs) {
        choir_whisper_seq *s = p->owner[i];
        s->k = k, s->v = v, s->positions = p->positions, s->kv = p->dt;
    } else {
        choir_whisper_cross *c = p->owner[i];
        c->k = k, c->v = v, c->kv = p->dt;
    }
}

/* The pool laid out anew for `cap` slots of `positions` per layer, the
 * filled rows of every slot kept (one strided copy: slot i's layer l is row
 * i n_layer + l of positions d elements; copied as floats, d being even). */
static int pool_relayout(choir_whisper_gpu *g, wh_pool *p, int cap, int positions,
                         choir_err *err) {
    const choir_whisper_dims *D = &g->m->dims;
    int64_t d = D->d_model, L = D->n_text_layer;
    wh_pool n = *p;
    n.cap = cap;
    n.positions = positions;
    n.slot_elems = L * positions * d;
    n.used = choir_calloc(CHOIR_MEM_OTHER, (size_t)cap, 1);
    n.owner = choir_calloc(CHOIR_MEM_OTHER, (size_t)cap, sizeof(void *));
    choir_cuda_buf k = {0}, v = {0};
    int rc = !n.used || !n.owner ? choir_err_set(err, CHOIR_ENOMEM, "out of host memory") : 0;
    if (!rc) rc = choir_cuda_buf_alloc(g->cu, pool_bytes(&n), &k, err);
    if (!rc) rc = choir_cuda_buf_alloc(g->cu, pool_bytes(&n), &v, err);
    if (!rc && p->cap) {
        int64_t f = (int64_t)wh_kv_size(p->dt), rows = (int64_t)p->cap * L;
        int64_t cols = (int64_t)p->positions * d * f / 4, ldd = (int64_t)positions * d * f / 4;
        if (!(rc = choir_cuda_copy_rows(g->cu, k.ptr, ldd, p->k, cols, rows, cols, err)))
            rc = choir_cuda_copy_rows(g->cu, v.ptr, ldd, p->v, cols, rows, cols, err);
        if (!rc) rc = choir_cuda_sync(g->cu, err);
    }
    if (rc) {
        choir_cuda_buf_free(g->cu, &k);
        choir_cuda_buf_free(g->cu, &v);
        choir_free(n.used);
        choir_free(n.owner);
        return choir_err_prefix(err, "whisper gpu: a cache pool of %d slots of %d positions", cap,
                                positions);
    }
    /* Captured steps point into the old buffers. */
    wh_dec_graphs_drop(&g->rt);
    if (p->cap) {
        memcpy(n.used, p->used, (size_t)p->cap);
        memcpy(n.owner, p->owner, (size_t)p->cap * sizeof(void *));
    }
    n.k = k.ptr, n.v = v.ptr;
    pool_free(g->cu, p);
    *p = n;
    for (int i = 0; i < p->cap; i++)
        if (p->used[i]) pool_point(p, i);
    return 0;
}

/* A free slot of the pool for `owner`, with room for `positions` per layer;
 * the pool grows (twice the slots, or the positions asked for) when it has
 * none. -1 and err when the device is full. */
static int pool_take(choir_whisper_gpu *g, wh_pool *p, void *owner, int positions,
                     choir_err *err) {
    if (choir_cuda_make_current(g->cu, err)) return -1;
    int slot = -1;
    for (int i = 0; i < p->cap && slot < 0; i++)
        if (!p->used[i]) slot = i;
    if (slot < 0 || positions > p->positions) {
        int cap = slot < 0 ? (p->cap ? 2 * p->cap : 4) : p->cap;
        if (pool_relayout(g, p, cap, positions > p->positions ? positions : p->positions, err))
            return -1;
        if (slot < 0)
            for (int i = 0; i < p->cap && slot < 0; i++)
                if (!p->used[i]) slot = i;
    }
    p->used[slot] = 1;
    p->owner[slot] = owner;
    pool_point(p, slot);
    return slot;
}

void wg_slot_release(wh_pool *p, int slot) {
    if (slot >= 0 && slot < p->cap) {
        p->used[slot] = 0;
        p->owner[slot] = NULL;
    }
}

int wg_cross_init(choir_whisper_gpu *g, choir_whisper_cross *c, choir_err *err) {
    int slot = pool_take(g, &g->cross, c, g->m->dims.n_audio_ctx, err);
    if (slot < 0) return err && err->code ? err->code : CHOIR_ENOMEM;
    c->gpu = g;
    c->pool = &g->cross;
    c->slot = slot;
    return 0;
}

int wg_seq_init(choir_whisper_gpu *g, choir_whisper_seq *s, choir_err *err) {
    int slot = pool_take(g, &g->self, s, s->n_ctx, err);
    if (slot < 0) return err && err->code ? err->code : CHOIR_ENOMEM;
    s->gpu = g;
    s->pool = &g->self;
    s->slot = slot;
    return 0;
}

void wg_seq_copy(choir_whisper_gpu *g, choir_whisper_seq *dst, const choir_whisper_seq *src,
                 int n_keep) {
    choir_stream *s = g->rt.s;
    if (dst->gpu != g || src->gpu != g) {
        choir_stream_fail(s, CHOIR_EINVAL, "whisper gpu: sequence copied between the CPU and the GPU");
        return;
    }
    /* Layer l's first n_keep rows, for every layer at once (as floats: d is
     * even); in stream order before the next step. Errors surface at the
     * next decoder call. */
    int64_t f = (int64_t)wh_kv_size(g->self.dt), d = g->m->dims.d_model * f / 4;
    int64_t L = g->m->dims.n_text_layer;
    choir_cuda_make_current(g->cu, NULL);
    choir_op_copy_rows(s, dst->k, dst->positions * d, src->k, src->positions * d, L, n_keep * d);
    choir_op_copy_rows(s, dst->v, dst->positions * d, src->v, src->positions * d, L, n_keep * d);
}

/* --- pinned logits --------------------------------------------------------------- */

float *wg_logits_alloc(choir_whisper_gpu *g, size_t bytes) {
    for (int i = 0; i < WG_MAX_LENT; i++)
        if (!g->lent[i].p) {
            void *p = choir_backend_host_alloc(g->be, bytes);
            if (!p) return NULL;
            g->lent[i].p = p;
            g->lent[i].bytes = bytes;
            return p;
        }
    return NULL;
}

bool wg_logits_free(choir_whisper_gpu *g, float *p) {
    for (int i = 0; p && i < WG_MAX_LENT; i++)
        if (g->lent[i].p == (void *)p) {
            choir_backend_host_free(g->be, p);
            g->lent[i].p = NULL;
            return true;
        }
    return false;
}

/* --- attaching --------------------------------------------------------------- */

void choir_whisper_default_gpu_opts(choir_whisper_gpu_opts *o) {
    memset(o, 0, sizeof(*o));
    o->device = 0;
    o->bf16 = false;
    o->max_windows = 8;
    o->graphs = true;
    o->greedy_steps = 8;
}

int wg_greedy_steps(const choir_whisper_gpu *g) { return g->opts.greedy_steps; }

static void gpu_free(choir_whisper_gpu *g) {
    if (!g) return;
    if (g->cu) choir_cuda_make_current(g->cu, NULL);
    wh_dec_graphs_drop(&g->rt);
    choir_free(g->rt.graphs);
    choir_free(g->rt.ggraphs);
    if (g->rt.staging) choir_backend_host_free(g->be, g->rt.staging);
    if (g->rt.gstage) choir_backend_host_free(g->be, g->rt.gstage);
    for (int i = 0; i < WG_MAX_LENT; i++)
        if (g->lent[i].p) choir_backend_host_free(g->be, g->lent[i].p);
    choir_stream_free(g->rt.s);
    choir_stream_free(g->enc_stream);
    if (g->cu) {
        pool_free(g->cu, &g->self);
        pool_free(g->cu, &g->cross);
    }
    choir_backend_weights_free(g->ws);
    choir_backend_free(g->be);
    choir_free(g->enc);
    choir_free(g->dec);
    choir_free(g);
}

int choir_whisper_gpu_attach(choir_whisper *m, const choir_whisper_gpu_opts *o, choir_err *err) {
    const choir_whisper_dims *D = &m->dims;
    if (m->gpu) return choir_err_set(err, CHOIR_EINVAL, "whisper gpu: model already attached");
    if (D->n_audio_ctx * 2 != CHOIR_WHISPER_N_FRAMES)
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "whisper gpu: n_audio_ctx %d (expected %d)",
                             D->n_audio_ctx, CHOIR_WHISPER_N_FRAMES / 2);
    choir_whisper_gpu *g = choir_calloc(CHOIR_MEM_OTHER, 1, sizeof(*g));
    if (!g) return choir_err_set(err, CHOIR_ENOMEM, "whisper gpu: out of host memory");
    g->m = m;
    if (o)
        g->opts = *o;
    else
        choir_whisper_default_gpu_opts(&g->opts);
    if (g->opts.max_windows < 1) g->opts.max_windows = 1;
    g->self.of_seqs = true;
    /* The caches hold the model's dtype: bf16 when the decoder's weights on
     * the device are half precision (bf16 storage, or stored f16/bf16 or
     * quantized), unless opts.kv_f32; the strided copies need an even d. */
    bool half = g->opts.bf16 || (D->n_text_layer > 0 && m->dec[0].fc1.kind != CHOIR_WEIGHT_F32);
    g->self.dt = g->cross.dt =
        half && !g->opts.kv_f32 && D->d_model % 2 == 0 ? CHOIR_DTYPE_BF16 : CHOIR_DTYPE_F32;
    int rc = 0;
    choir_backend_cuda_opts bo = {.device = g->opts.device, .bf16 = g->opts.bf16,
                                  .tf32 = g->opts.tf32};
    if (!(g->be = choir_backend_cuda(&bo, err))) {
        rc = err && err->code ? err->code : CHOIR_ENOTFOUND;
        goto fail;
    }
    g->cu = choir_backend_cuda_context(g->be);
    if ((rc = weights_up(g, err))) goto fail;
    /* The encoder's stream with one pass's memory: mel [W, n_mels, F], rows
     * [W, A, d] and the forward's working memory. */
    int64_t W = g->opts.max_windows;
    size_t io = (size_t)(W * D->n_mels * CHOIR_WHISPER_N_FRAMES + W * D->n_audio_ctx * D->d_model) *
                    sizeof(float) + 512;
    if (!(g->enc_stream = choir_stream_create(g->be, err)) ||
        !(g->rt.s = choir_stream_create(g->be, err))) {
        rc = CHOIR_ENOMEM;
        goto fail;
    }
    g->enc_reserved = wh_enc_work_bytes(D, W) + io;
    if ((rc = choir_stream_reserve(g->enc_stream, g->enc_reserved, 0, err))) goto fail;
    g->rt.use_graphs = g->opts.graphs;
    if ((rc = choir_cuda_scratch_reserve(g->cu, scratch_need(g, 0), err))) goto fail;
    m->gpu = g;
    return 0;
fail:
    choir_err_prefix(err, "whisper gpu");
    gpu_free(g);
    return rc ? rc : CHOIR_EINTERNAL;
}

void choir_whisper_gpu_detach(choir_whisper *m) {
    if (!m || !m->gpu) return;
    gpu_free(m->gpu);
    m->gpu = NULL;
}

bool choir_whisper_on_gpu(const choir_whisper *m) { return m && m->gpu; }

struct choir_cuda *choir_whisper_gpu_context(const choir_whisper *m) {
    return m && m->gpu ? m->gpu->cu : NULL;
}

int choir_whisper_gpu_get_stats(const choir_whisper *m, choir_whisper_gpu_stats *s,
                                choir_err *err) {
    memset(s, 0, sizeof(*s));
    if (!m || !m->gpu) return choir_err_set(err, CHOIR_EINVAL, "whisper gpu: model not attached");
    const choir_whisper_gpu *g = m->gpu;
    s->device_bytes = choir_cuda_mem_current(g->cu);
    s->weight_bytes = choir_backend_weights_bytes(g->ws);
    int64_t step = (int64_t)choir_weight_bytes(&g->net.tok_emb);
    for (int l = 0; l < m->dims.n_text_layer; l++) {
        const wh_block *b = &g->dec[l];
        const choir_weight *ws[] = {&b->attn.q,  &b->attn.k,  &b->attn.v, &b->attn.o,
                                    &b->cross.q, &b->cross.o, &b->fc1,    &b->fc2};
        for (size_t i = 0; i < sizeof(ws) / sizeof(ws[0]); i++)
            step += (int64_t)choir_weight_bytes(ws[i]);
    }
    s->step_weight_bytes = step;
    s->steps_graph = g->rt.steps_graph;
    s->steps_direct = g->rt.steps_direct;
    for (int b = 0; g->rt.graphs && b <= g->rt.rows_cap; b++) s->graphs += g->rt.graphs[b] != NULL;
    for (int i = 0; g->rt.ggraphs && i < (g->rt.rows_cap + 1) * WH_GREEDY_KS; i++)
        s->graphs += g->rt.ggraphs[i] != NULL;
    s->graph_failures = g->rt.graph_failures;
    s->pinned_bytes = choir_cuda_host_mem_current(g->cu);
    s->kv_elem_bytes = (int)wh_kv_size(g->self.dt);
    return 0;
}

#else /* no CUDA in this build */

#include <string.h>

#include "models/whisper/whisper_internal.h"

void choir_whisper_default_gpu_opts(choir_whisper_gpu_opts *o) {
    memset(o, 0, sizeof(*o));
    o->max_windows = 8;
    o->graphs = true;
    o->greedy_steps = 8;
}

int choir_whisper_gpu_attach(choir_whisper *m, const choir_whisper_gpu_opts *o, choir_err *err) {
    (void)m;
    (void)o;
    return choir_err_set(
        err, CHOIR_EUNSUPPORTED,
        "whisper: this build has no CUDA backend (configure with -DCHOIR_CUDA=ON)");
}

void choir_whisper_gpu_detach(choir_whisper *m) { (void)m; }

bool choir_whisper_on_gpu(const choir_whisper *m) {
    (void)m;
    return false;
}

struct choir_cuda *choir_whisper_gpu_context(const choir_whisper *m) {
    (void)m;
    return NULL;
}

int choir_whisper_gpu_get_stats(const choir_whisper *m, choir_whisper_gpu_stats *s,
                                choir_err *err) {
    (void)m;
    memset(s, 0, sizeof(*s));
    return choir_err_set(err, CHOIR_EUNSUPPORTED, "whisper: this build has no CUDA backend");
}

#endif

/* Arithmetic only: available in every build (the engine budgets with it). */
int64_t choir_whisper_gpu_window_bytes(const choir_whisper_dims *D, int hyps) {
    if (!D) return 0;
    int64_t f = 4, d = D->d_model;
    int64_t cross = 2LL * D->n_text_layer * D->n_audio_ctx * d * f;
    int64_t self = 2LL * D->n_text_layer * D->n_text_ctx * d * f;
    /* Step rows: a window's prompt (at most n_text_ctx / 2 + 4 tokens). */
    int64_t rows = (int64_t)(D->n_text_ctx / 2 + 4) * ((6 * d + D->ffn_dim) * f);
    return cross + (int64_t)hyps * (self + (int64_t)D->n_vocab * f) + rows;
}
