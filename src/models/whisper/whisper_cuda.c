/* Whisper on the CUDA backend: attaching a model to a GPU, its weights on
 * the device, the batched encoder, the cross-attention K/V and the pools of
 * caches (the decoder step is whisper_cuda_dec.c). Built with CHOIR_HAVE_CUDA;
 * without it the public functions say so.
 *
 * The encoder is the forward written over backend operations
 * (whisper_enc.c), the CPU's own code, run on the CUDA backend over
 * max_windows windows per pass (every linear layer multiplies all windows'
 * rows at once). A window's cross K/V are computed from its encoder rows
 * where they lie on the device and kept in a slot of the cross pool until
 * its cache is freed. */
#include "choir/whisper.h"

#ifdef CHOIR_HAVE_CUDA

#include <math.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/cuda.h"
#include "models/whisper/whisper_cuda.h"

int wg_vec_up(choir_cuda *cu, const float *host, int64_t n, choir_cuda_buf *out, choir_err *err) {
    memset(out, 0, sizeof(*out));
    if (!host) return 0;
    int rc = choir_cuda_buf_alloc(cu, (size_t)n * sizeof(float), out, err);
    if (rc) return rc;
    return choir_cuda_upload(cu, out, 0, host, (size_t)n * sizeof(float), err);
}

int wg_weight_up(choir_whisper_gpu *g, const choir_weight *w, choir_cuda_weight *out,
                 choir_err *err) {
    int rc = g->opts.bf16 && w->kind == CHOIR_WEIGHT_F32
                 ? choir_cuda_weight_upload_as(g->cu, w, CHOIR_WEIGHT_BF16, out, err)
                 : choir_cuda_weight_upload(g->cu, w, out, err);
    if (!rc) g->weight_bytes += (int64_t)choir_cuda_weight_bytes(out);
    return rc;
}

/* A vector counted as weights. */
static int vec_w(choir_whisper_gpu *g, const float *host, int64_t n, choir_cuda_buf *out,
                 choir_err *err) {
    int rc = wg_vec_up(g->cu, host, n, out, err);
    if (!rc) g->weight_bytes += (int64_t)out->bytes;
    return rc;
}

void wg_block_free(choir_cuda *cu, wg_block *b) {
    choir_cuda_buf *vecs[] = {&b->attn_ln_g, &b->attn_ln_b, &b->cross_ln_g, &b->cross_ln_b,
                              &b->mlp_ln_g,  &b->mlp_ln_b,  &b->bq,         &b->bv,
                              &b->bo,        &b->xbq,       &b->xbv,        &b->xbo,
                              &b->fc1_b,     &b->fc2_b};
    for (size_t i = 0; i < sizeof(vecs) / sizeof(vecs[0]); i++) choir_cuda_buf_free(cu, vecs[i]);
    choir_cuda_weight *ws[] = {&b->q,  &b->k,  &b->v,  &b->o,   &b->xq,
                               &b->xk, &b->xv, &b->xo, &b->fc1, &b->fc2};
    for (size_t i = 0; i < sizeof(ws) / sizeof(ws[0]); i++) choir_cuda_weight_free(cu, ws[i]);
}

static int enc_block_up(choir_whisper_gpu *g, const wh_block *h, int64_t d, int64_t ffn,
                        wg_block *b, choir_err *err) {
    int rc;
    if ((rc = vec_w(g, h->attn_ln_g, d, &b->attn_ln_g, err)) ||
        (rc = vec_w(g, h->attn_ln_b, d, &b->attn_ln_b, err)) ||
        (rc = vec_w(g, h->mlp_ln_g, d, &b->mlp_ln_g, err)) ||
        (rc = vec_w(g, h->mlp_ln_b, d, &b->mlp_ln_b, err)) ||
        (rc = vec_w(g, h->attn.bq, d, &b->bq, err)) ||
        (rc = vec_w(g, h->attn.bv, d, &b->bv, err)) ||
        (rc = vec_w(g, h->attn.bo, d, &b->bo, err)) ||
        (rc = vec_w(g, h->fc1_b, ffn, &b->fc1_b, err)) ||
        (rc = vec_w(g, h->fc2_b, d, &b->fc2_b, err)) ||
        (rc = wg_weight_up(g, &h->attn.q, &b->q, err)) ||
        (rc = wg_weight_up(g, &h->attn.k, &b->k, err)) ||
        (rc = wg_weight_up(g, &h->attn.v, &b->v, err)) ||
        (rc = wg_weight_up(g, &h->attn.o, &b->o, err)) ||
        (rc = wg_weight_up(g, &h->fc1, &b->fc1, err)) ||
        (rc = wg_weight_up(g, &h->fc2, &b->fc2, err)))
        return rc;
    return 0;
}

/* A device weight as the backend operations take it (a view). */
static choir_weight view_w(const choir_cuda_weight *c) {
    return (choir_weight){.kind = c->kind,
                          .rows = c->rows,
                          .cols = c->cols,
                          .data = c->data.ptr,
                          .scales = c->scales.ptr,
                          .biases = c->biases.ptr,
                          .sb_dtype = c->sb_dtype,
                          .bits = c->bits,
                          .group_size = c->group_size};
}

static wh_block view_enc_block(const wg_block *b) {
    wh_block v;
    memset(&v, 0, sizeof v);
    v.attn_ln_g = wg_ptr(&b->attn_ln_g), v.attn_ln_b = wg_ptr(&b->attn_ln_b);
    v.attn.q = view_w(&b->q), v.attn.k = view_w(&b->k), v.attn.v = view_w(&b->v);
    v.attn.o = view_w(&b->o);
    v.attn.bq = wg_ptr(&b->bq), v.attn.bv = wg_ptr(&b->bv), v.attn.bo = wg_ptr(&b->bo);
    v.mlp_ln_g = wg_ptr(&b->mlp_ln_g), v.mlp_ln_b = wg_ptr(&b->mlp_ln_b);
    v.fc1 = view_w(&b->fc1), v.fc1_b = wg_ptr(&b->fc1_b);
    v.fc2 = view_w(&b->fc2), v.fc2_b = wg_ptr(&b->fc2_b);
    return v;
}

/* The encoder's weights as the forward over backend operations
 * (whisper_enc.c) reads them, and a stream with one pass's memory. */
static int ops_encoder_init(choir_whisper_gpu *g, choir_err *err) {
    const choir_whisper_dims *D = &g->m->dims;
    int64_t W = g->opts.max_windows, A = D->n_audio_ctx, d = D->d_model;
    int64_t mel = W * D->n_mels * CHOIR_WHISPER_N_FRAMES, rows = W * A * d;
    g->net_enc = choir_calloc(CHOIR_MEM_OTHER, (size_t)(D->n_audio_layer > 0 ? D->n_audio_layer : 1),
                              sizeof(wh_block));
    if (!g->net_enc) return choir_err_set(err, CHOIR_ENOMEM, "out of host memory");
    for (int l = 0; l < D->n_audio_layer; l++) g->net_enc[l] = view_enc_block(&g->enc[l]);
    g->net = (wh_net){.be = g->be,
                      .enc_windows = (int)W,
                      .conv1_w = wg_ptr(&g->conv1_w),
                      .conv1_b = wg_ptr(&g->conv1_b),
                      .conv2_w = wg_ptr(&g->conv2_w),
                      .conv2_b = wg_ptr(&g->conv2_b),
                      .enc_pos = wg_ptr(&g->enc_pos),
                      .enc = g->net_enc,
                      .enc_ln_g = wg_ptr(&g->enc_ln_g),
                      .enc_ln_b = wg_ptr(&g->enc_ln_b)};
    if (!(g->enc_stream = choir_stream_create(g->be, err))) return CHOIR_ENOMEM;
    size_t work = (size_t)(mel + rows) * sizeof(float) + 1024 + wh_enc_work_bytes(D, W);
    int rc = choir_stream_reserve(g->enc_stream, work, 0, err);
    if (rc) return rc;
    g->enc_mel = choir_stream_floats(g->enc_stream, mel, "whisper gpu: encoder mel");
    g->enc_x = choir_stream_floats(g->enc_stream, rows, "whisper gpu: encoder rows");
    return choir_stream_status(g->enc_stream, err);
}

/* The stream's first error into err (prefixed), cleared from the stream. */
static int ops_status(choir_whisper_gpu *g, choir_err *err) {
    int rc = choir_stream_status(g->enc_stream, err);
    if (rc) choir_stream_clear(g->enc_stream);
    return rc;
}

/* --- pools of caches ------------------------------------------------------- */

static void pool_free(choir_cuda *cu, wg_pool *p) {
    choir_cuda_buf_free(cu, &p->k);
    choir_cuda_buf_free(cu, &p->v);
    choir_free(p->used);
    p->used = NULL;
    p->cap = 0;
}

/* A free slot of the pool, growing it (twice the slots, contents kept) when
 * all are taken; -1 and err when the device is full. */
static int pool_take(choir_whisper_gpu *g, wg_pool *p, choir_err *err) {
    for (int i = 0; i < p->cap; i++)
        if (!p->used[i]) {
            p->used[i] = 1;
            return i;
        }
    int cap = p->cap ? 2 * p->cap : 4;
    size_t bytes = (size_t)cap * (size_t)p->slot_floats * sizeof(float);
    size_t old = (size_t)p->cap * (size_t)p->slot_floats * sizeof(float);
    choir_cuda_buf k = {0}, v = {0};
    unsigned char *used = choir_calloc(CHOIR_MEM_OTHER, (size_t)cap, 1);
    if (!used) {
        choir_err_set(err, CHOIR_ENOMEM, "whisper gpu: out of host memory");
        return -1;
    }
    if (choir_cuda_buf_alloc(g->cu, bytes, &k, err) ||
        choir_cuda_buf_alloc(g->cu, bytes, &v, err) ||
        choir_cuda_copy(g->cu, k.ptr, p->k.ptr, old, err) ||
        choir_cuda_copy(g->cu, v.ptr, p->v.ptr, old, err) || choir_cuda_sync(g->cu, err)) {
        choir_cuda_buf_free(g->cu, &k);
        choir_cuda_buf_free(g->cu, &v);
        choir_free(used);
        choir_err_prefix(err, "whisper gpu: growing a cache pool to %d slots", cap);
        return -1;
    }
    /* Captured steps point into the old buffers. */
    wg_graphs_drop(g);
    if (p->cap) memcpy(used, p->used, (size_t)p->cap);
    int slot = p->cap;
    pool_free(g->cu, p);
    p->k = k, p->v = v, p->used = used, p->cap = cap;
    p->used[slot] = 1;
    return slot;
}

static void pool_give(wg_pool *p, int slot) {
    if (slot >= 0 && slot < p->cap) p->used[slot] = 0;
}

int wg_seq_init(choir_whisper_gpu *g, choir_whisper_seq *s, choir_err *err) {
    if (choir_cuda_make_current(g->cu, err)) return CHOIR_EINTERNAL;
    int slot = pool_take(g, &g->self, err);
    if (slot < 0) return err && err->code ? err->code : CHOIR_ENOMEM;
    s->gpu = g;
    s->slot = slot;
    return 0;
}

void wg_seq_release(choir_whisper_seq *s) { pool_give(&s->gpu->self, s->slot); }

void wg_seq_copy(choir_whisper_seq *dst, const choir_whisper_seq *src, int n_keep) {
    choir_whisper_gpu *g = dst->gpu;
    if (src->gpu != g) {
        if (!g->sticky.code)
            choir_err_set(&g->sticky, CHOIR_EINVAL,
                          "whisper gpu: sequence copied between the CPU and the GPU");
        return;
    }
    const choir_whisper_dims *D = &g->m->dims;
    choir_cuda_make_current(g->cu, NULL);
    size_t layer = (size_t)D->n_text_ctx * (size_t)D->d_model,
           row = (size_t)n_keep * (size_t)D->d_model;
    for (int l = 0; l < D->n_text_layer; l++) {
        size_t od = (size_t)dst->slot * (size_t)g->self.slot_floats + (size_t)l * layer;
        size_t os = (size_t)src->slot * (size_t)g->self.slot_floats + (size_t)l * layer;
        choir_err e = {0};
        if (choir_cuda_copy(g->cu, (float *)g->self.k.ptr + od, (float *)g->self.k.ptr + os,
                            row * sizeof(float), &e) ||
            choir_cuda_copy(g->cu, (float *)g->self.v.ptr + od, (float *)g->self.v.ptr + os,
                            row * sizeof(float), &e)) {
            if (!g->sticky.code) g->sticky = e;
            return;
        }
    }
}

/* --- attaching --------------------------------------------------------------- */

size_t wg_scratch_need(const choir_whisper_gpu *g, int64_t rows) {
    const choir_whisper_dims *D = &g->m->dims;
    int64_t H = D->n_head, A = D->n_audio_ctx, C = D->n_text_ctx, d = D->d_model;
    int64_t ffn = D->ffn_dim, F = CHOIR_WHISPER_N_FRAMES;
    int64_t enc_rows = (int64_t)g->opts.max_windows * A;
    /* Attention scores of an encoder window and of a decoder prompt's cross
     * attention; conv1d im2col; then half-precision operands of the tensor
     * core products (x converted; a quantized matrix expanded). */
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

void choir_whisper_default_gpu_opts(choir_whisper_gpu_opts *o) {
    memset(o, 0, sizeof(*o));
    o->device = 0;
    o->bf16 = false;
    o->max_windows = 8;
    o->graphs = true;
}

static void gpu_free(choir_whisper_gpu *g) {
    if (!g) return;
    choir_cuda *cu = g->cu;
    choir_stream_free(g->enc_stream);
    choir_free(g->net_enc);
    if (cu) {
        choir_cuda_make_current(cu, NULL);
        wg_dec_free(g);
        if (g->enc)
            for (int l = 0; l < g->m->dims.n_audio_layer; l++) wg_block_free(cu, &g->enc[l]);
        choir_cuda_buf *bufs[] = {&g->conv1_w, &g->conv1_b,  &g->conv2_w,  &g->conv2_b,
                                  &g->enc_pos, &g->enc_ln_g, &g->enc_ln_b};
        for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
            choir_cuda_buf_free(cu, bufs[i]);
        pool_free(cu, &g->self);
        pool_free(cu, &g->cross);
        /* The context is the backend's. */
        choir_backend_free(g->be);
    }
    choir_free(g->enc);
    choir_free(g);
}

int choir_whisper_gpu_attach(choir_whisper *m, const choir_whisper_gpu_opts *o, choir_err *err) {
    const choir_whisper_dims *D = &m->dims;
    int64_t d = D->d_model, ffn = D->ffn_dim;
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
    int rc = 0;
    /* The weights are uploaded below (bf16 by opts.bf16); the backend gives
     * the context everything runs on. */
    choir_backend_cuda_opts bo = {.device = g->opts.device, .tf32 = g->opts.tf32};
    if (!(g->be = choir_backend_cuda(&bo, err))) {
        rc = err && err->code ? err->code : CHOIR_ENOTFOUND;
        goto fail;
    }
    g->cu = choir_backend_cuda_context(g->be);
    g->enc = choir_calloc(CHOIR_MEM_OTHER, (size_t)(D->n_audio_layer > 0 ? D->n_audio_layer : 1),
                          sizeof(wg_block));
    if (!g->enc) {
        rc = choir_err_set(err, CHOIR_ENOMEM, "out of host memory");
        goto fail;
    }
    if ((rc = vec_w(g, m->conv1_w, d * D->n_mels * 3, &g->conv1_w, err)) ||
        (rc = vec_w(g, m->conv1_b, d, &g->conv1_b, err)) ||
        (rc = vec_w(g, m->conv2_w, d * d * 3, &g->conv2_w, err)) ||
        (rc = vec_w(g, m->conv2_b, d, &g->conv2_b, err)) ||
        (rc = vec_w(g, m->enc_pos, (int64_t)D->n_audio_ctx * d, &g->enc_pos, err)) ||
        (rc = vec_w(g, m->enc_ln_g, d, &g->enc_ln_g, err)) ||
        (rc = vec_w(g, m->enc_ln_b, d, &g->enc_ln_b, err)))
        goto fail;
    for (int l = 0; l < D->n_audio_layer; l++)
        if ((rc = enc_block_up(g, &m->enc[l], d, ffn, &g->enc[l], err))) goto fail;
    if ((rc = wg_dec_upload(g, err))) goto fail;
    if ((rc = ops_encoder_init(g, err))) goto fail;
    g->self.slot_floats = (int64_t)D->n_text_layer * D->n_text_ctx * d;
    g->cross.slot_floats = (int64_t)D->n_text_layer * D->n_audio_ctx * d;
    if ((rc = choir_cuda_scratch_reserve(g->cu, wg_scratch_need(g, g->rows_cap), err))) goto fail;
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
    s->weight_bytes = g->weight_bytes;
    int64_t step = (int64_t)choir_cuda_weight_bytes(&g->tok_emb);
    for (int l = 0; l < m->dims.n_text_layer; l++) {
        const wg_block *b = &g->dec[l];
        const choir_cuda_weight *ws[] = {&b->q,  &b->k,  &b->v,   &b->o,
                                         &b->xq, &b->xo, &b->fc1, &b->fc2};
        for (size_t i = 0; i < sizeof(ws) / sizeof(ws[0]); i++)
            step += (int64_t)choir_cuda_weight_bytes(ws[i]);
    }
    s->step_weight_bytes = step;
    s->steps_graph = g->steps_graph;
    s->steps_direct = g->steps_direct;
    for (int b = 0; g->graphs && b <= g->rows_cap; b++) s->graphs += g->graphs[b] != NULL;
    s->graph_failures = g->graph_failures;
    s->pinned_bytes = choir_cuda_host_mem_current(g->cu);
    return 0;
}

/* --- the encoder ------------------------------------------------------------- */

/* Uploads W windows' mel and runs a pass over them (the rows stay on the
 * device: enc_rows). */
static int encode_in(choir_whisper_gpu *g, const float *mel, int W, choir_err *err) {
    const choir_whisper_dims *D = &g->m->dims;
    size_t bytes = (size_t)W * (size_t)D->n_mels * CHOIR_WHISPER_N_FRAMES * sizeof(float);
    choir_op_upload(g->enc_stream, g->enc_mel, mel, bytes);
    wh_encode_windows(g->enc_stream, &g->net, D, g->enc_mel, W, g->enc_x);
    return ops_status(g, err);
}

int wg_encode(choir_whisper_gpu *g, const float *mel, int n, float *out, choir_err *err) {
    const choir_whisper_dims *D = &g->m->dims;
    int64_t d = D->d_model, A = D->n_audio_ctx, F = CHOIR_WHISPER_N_FRAMES;
    size_t mel_win = (size_t)D->n_mels * (size_t)F, out_win = (size_t)(A * d);
    if (choir_cuda_make_current(g->cu, err)) return CHOIR_EINTERNAL;
    for (int b0 = 0; b0 < n; b0 += g->opts.max_windows) {
        int W = n - b0 < g->opts.max_windows ? n - b0 : g->opts.max_windows;
        int rc = encode_in(g, mel + (size_t)b0 * mel_win, W, err);
        if (!rc) {
            choir_op_download(g->enc_stream, out + (size_t)b0 * out_win, g->enc_x,
                              (size_t)W * out_win * sizeof(float));
            rc = ops_status(g, err);
        }
        if (rc) {
            choir_err_prefix(err, "whisper gpu");
            return rc;
        }
    }
    return 0;
}

/* A new cross cache from encoder rows enc [A, d] already on the device. */
static choir_whisper_cross *cross_from_device(choir_whisper_gpu *g, const float *enc,
                                              choir_err *err) {
    const choir_whisper_dims *D = &g->m->dims;
    int64_t A = D->n_audio_ctx, d = D->d_model;
    choir_whisper_cross *c = choir_calloc(CHOIR_MEM_CACHE, 1, sizeof(*c));
    if (!c) {
        choir_err_set(err, CHOIR_ENOMEM, "whisper gpu: out of host memory");
        return NULL;
    }
    c->n_layer = D->n_text_layer;
    c->n_ctx = (int)A;
    c->d = (int)d;
    c->gpu = g;
    c->slot = pool_take(g, &g->cross, err);
    if (c->slot < 0) {
        choir_free(c);
        return NULL;
    }
    float *K = (float *)g->cross.k.ptr + (size_t)c->slot * (size_t)g->cross.slot_floats;
    float *V = (float *)g->cross.v.ptr + (size_t)c->slot * (size_t)g->cross.slot_floats;
    for (int l = 0; l < D->n_text_layer; l++) {
        const wg_block *b = &g->dec[l];
        if (choir_cuda_linear(g->cu, enc, A, &b->xk, NULL, K + (size_t)l * (size_t)(A * d), err) ||
            choir_cuda_linear(g->cu, enc, A, &b->xv, wg_ptr(&b->xbv),
                              V + (size_t)l * (size_t)(A * d), err)) {
            wg_cross_free(c);
            choir_err_prefix(err, "whisper gpu: cross K/V");
            return NULL;
        }
    }
    return c;
}

int wg_encode_cross(choir_whisper_gpu *g, const float *mel, int n, choir_whisper_cross **cross,
                    choir_err *err) {
    const choir_whisper_dims *D = &g->m->dims;
    int64_t d = D->d_model, A = D->n_audio_ctx;
    size_t mel_win = (size_t)D->n_mels * CHOIR_WHISPER_N_FRAMES;
    if (choir_cuda_make_current(g->cu, err)) return CHOIR_EINTERNAL;
    for (int b0 = 0; b0 < n; b0 += g->opts.max_windows) {
        int W = n - b0 < g->opts.max_windows ? n - b0 : g->opts.max_windows;
        int rc = encode_in(g, mel + (size_t)b0 * mel_win, W, err);
        if (rc) {
            choir_err_prefix(err, "whisper gpu");
            return rc;
        }
        const float *x = g->enc_x;
        for (int b = 0; b < W; b++)
            if (!(cross[b0 + b] = cross_from_device(g, x + (size_t)b * (size_t)(A * d), err)))
                return err && err->code ? err->code : CHOIR_ENOMEM;
    }
    return 0;
}

choir_whisper_cross *wg_cross_create(choir_whisper_gpu *g, const float *enc_out, choir_err *err) {
    const choir_whisper_dims *D = &g->m->dims;
    size_t bytes = (size_t)D->n_audio_ctx * (size_t)D->d_model * sizeof(float);
    if (choir_cuda_make_current(g->cu, err)) {
        choir_err_prefix(err, "whisper gpu");
        return NULL;
    }
    choir_op_upload(g->enc_stream, g->enc_x, enc_out, bytes);
    if (ops_status(g, err)) return NULL;
    return cross_from_device(g, g->enc_x, err);
}

void wg_cross_free(choir_whisper_cross *c) {
    pool_give(&c->gpu->cross, c->slot);
    choir_free(c);
}

#else /* no CUDA in this build */

#include <string.h>

#include "models/whisper/whisper_internal.h"

void choir_whisper_default_gpu_opts(choir_whisper_gpu_opts *o) {
    memset(o, 0, sizeof(*o));
    o->max_windows = 8;
    o->graphs = true;
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
