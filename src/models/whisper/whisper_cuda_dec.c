/* Whisper's decoder on the CUDA backend: the computation of
 * choir_whisper_decode (whisper_net.c) with the weights, the caches and the
 * activations on the device.
 *
 * Two paths. A step (every sequence gets one new token and only its logits
 * are wanted: the per-token loop of decoding) runs a fixed kernel sequence
 * for B rows whose varying parts (cache slots, cross slots, positions, key
 * counts, the embedded input rows) are read from device memory; it is
 * captured once per B into a CUDA graph and replayed. Anything else (start
 * sequences and prompts, teacher forcing with all positions) runs kernel by
 * kernel with per-sequence attention calls. Token and position embeddings
 * are added on the host (B rows of d floats, the same arithmetic as the CPU)
 * and uploaded with the step's metadata in one copy; the logits come back to
 * the host after every call, where the decoding rules run unchanged. */
#include "choir/whisper.h"

#ifdef CHOIR_HAVE_CUDA

#include <math.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/cuda.h"
#include "choir/log.h"
#include "models/whisper/whisper_cuda.h"

/* --- weights ---------------------------------------------------------------- */

static int vec_w(choir_whisper_gpu *g, const float *host, int64_t n, choir_cuda_buf *out,
                 choir_err *err) {
    int rc = wg_vec_up(g->cu, host, n, out, err);
    if (!rc) g->weight_bytes += (int64_t)out->bytes;
    return rc;
}

static int dec_block_up(choir_whisper_gpu *g, const wh_block *h, int64_t d, int64_t ffn,
                        wg_block *b, choir_err *err) {
    int rc;
    if ((rc = vec_w(g, h->attn_ln_g, d, &b->attn_ln_g, err)) ||
        (rc = vec_w(g, h->attn_ln_b, d, &b->attn_ln_b, err)) ||
        (rc = vec_w(g, h->cross_ln_g, d, &b->cross_ln_g, err)) ||
        (rc = vec_w(g, h->cross_ln_b, d, &b->cross_ln_b, err)) ||
        (rc = vec_w(g, h->mlp_ln_g, d, &b->mlp_ln_g, err)) ||
        (rc = vec_w(g, h->mlp_ln_b, d, &b->mlp_ln_b, err)) ||
        (rc = vec_w(g, h->attn.bq, d, &b->bq, err)) ||
        (rc = vec_w(g, h->attn.bv, d, &b->bv, err)) ||
        (rc = vec_w(g, h->attn.bo, d, &b->bo, err)) ||
        (rc = vec_w(g, h->cross.bq, d, &b->xbq, err)) ||
        (rc = vec_w(g, h->cross.bv, d, &b->xbv, err)) ||
        (rc = vec_w(g, h->cross.bo, d, &b->xbo, err)) ||
        (rc = vec_w(g, h->fc1_b, ffn, &b->fc1_b, err)) ||
        (rc = vec_w(g, h->fc2_b, d, &b->fc2_b, err)) ||
        (rc = wg_weight_up(g, &h->attn.q, &b->q, err)) ||
        (rc = wg_weight_up(g, &h->attn.k, &b->k, err)) ||
        (rc = wg_weight_up(g, &h->attn.v, &b->v, err)) ||
        (rc = wg_weight_up(g, &h->attn.o, &b->o, err)) ||
        (rc = wg_weight_up(g, &h->cross.q, &b->xq, err)) ||
        (rc = wg_weight_up(g, &h->cross.k, &b->xk, err)) ||
        (rc = wg_weight_up(g, &h->cross.v, &b->xv, err)) ||
        (rc = wg_weight_up(g, &h->cross.o, &b->xo, err)) ||
        (rc = wg_weight_up(g, &h->fc1, &b->fc1, err)) ||
        (rc = wg_weight_up(g, &h->fc2, &b->fc2, err)))
        return rc;
    return 0;
}

int wg_dec_upload(choir_whisper_gpu *g, choir_err *err) {
    const choir_whisper *m = g->m;
    const choir_whisper_dims *D = &m->dims;
    int rc;
    g->dec = choir_calloc(CHOIR_MEM_OTHER, (size_t)(D->n_text_layer > 0 ? D->n_text_layer : 1),
                          sizeof(wg_block));
    if (!g->dec) return choir_err_set(err, CHOIR_ENOMEM, "out of host memory");
    for (int l = 0; l < D->n_text_layer; l++)
        if ((rc = dec_block_up(g, &m->dec[l], D->d_model, D->ffn_dim, &g->dec[l], err))) return rc;
    if ((rc = vec_w(g, m->dec_ln_g, D->d_model, &g->dec_ln_g, err)) ||
        (rc = vec_w(g, m->dec_ln_b, D->d_model, &g->dec_ln_b, err)) ||
        (rc = wg_weight_up(g, &m->tok_emb, &g->tok_emb, err)))
        return rc;
    return 0;
}

void wg_graphs_drop(choir_whisper_gpu *g) {
    for (int b = 0; g->graphs && b <= g->rows_cap; b++) {
        choir_cuda_graph_free(g->graphs[b]);
        g->graphs[b] = NULL;
    }
}

void wg_dec_free(choir_whisper_gpu *g) {
    choir_cuda *cu = g->cu;
    wg_graphs_drop(g);
    choir_free(g->graphs);
    g->graphs = NULL;
    if (g->dec)
        for (int l = 0; l < g->m->dims.n_text_layer; l++) wg_block_free(cu, &g->dec[l]);
    choir_free(g->dec);
    g->dec = NULL;
    choir_cuda_buf_free(cu, &g->dec_ln_g);
    choir_cuda_buf_free(cu, &g->dec_ln_b);
    choir_cuda_weight_free(cu, &g->tok_emb);
    choir_cuda_buf_free(cu, &g->step);
    choir_cuda_buf_free(cu, &g->logits);
    choir_cuda_host_free(cu, g->staging);
    g->staging = NULL;
    for (int i = 0; i < WG_MAX_LENT; i++) {
        choir_cuda_host_free(cu, g->lent[i].p);
        g->lent[i].p = NULL;
    }
    g->rows_cap = g->logits_cap = 0;
}

/* --- step buffers ------------------------------------------------------------- */

static size_t meta_bytes(int cap) {
    return ((size_t)cap * 4 * sizeof(int32_t) + 255) & ~(size_t)255;
}

typedef struct wg_rows {
    int32_t *slot, *xslot, *pos, *keys; /* [rows_cap] each */
    float *x, *h, *q, *k, *v, *att;     /* [rows_cap, d] */
    float *hid;                         /* [rows_cap, ffn] */
} wg_rows;

static wg_rows rows_of(const choir_whisper_gpu *g) {
    const choir_whisper_dims *D = &g->m->dims;
    size_t cap = (size_t)g->rows_cap, d = (size_t)D->d_model;
    wg_rows r;
    r.slot = (int32_t *)g->step.ptr;
    r.xslot = r.slot + cap, r.pos = r.xslot + cap, r.keys = r.pos + cap;
    r.x = (float *)((char *)g->step.ptr + meta_bytes(g->rows_cap));
    r.h = r.x + cap * d, r.q = r.h + cap * d, r.k = r.q + cap * d, r.v = r.k + cap * d;
    r.att = r.v + cap * d, r.hid = r.att + cap * d;
    return r;
}

/* Makes room for `rows` token rows and `out` logits rows. Growing moves the
 * buffers, so the graphs (which hold their addresses) are dropped first, and
 * the scratch is grown for the larger products while no graph lives. */
static int ensure_rows(choir_whisper_gpu *g, int rows, int out, choir_err *err) {
    const choir_whisper_dims *D = &g->m->dims;
    if (rows <= g->rows_cap && out <= g->logits_cap) return 0;
    wg_graphs_drop(g);
    int cap = g->rows_cap, lcap = g->logits_cap;
    while (cap < rows) cap = cap ? 2 * cap : 8;
    while (lcap < out) lcap = lcap ? 2 * lcap : 8;
    size_t d = (size_t)D->d_model, ffn = (size_t)D->ffn_dim;
    size_t step_bytes = meta_bytes(cap) + (size_t)cap * (6 * d + ffn) * sizeof(float);
    size_t stage_bytes = meta_bytes(cap) + (size_t)cap * d * sizeof(float);
    choir_cuda_buf step = {0}, logits = {0};
    void *staging = choir_cuda_host_alloc(g->cu, stage_bytes, err);
    choir_cuda_graph **graphs = choir_calloc(CHOIR_MEM_OTHER, (size_t)cap + 1, sizeof(*graphs));
    int rc = !staging ? (err ? err->code : CHOIR_ENOMEM)
             : !graphs ? choir_err_set(err, CHOIR_ENOMEM, "out of host memory")
                       : 0;
    if (!rc && cap != g->rows_cap) rc = choir_cuda_buf_alloc(g->cu, step_bytes, &step, err);
    if (!rc && lcap != g->logits_cap)
        rc = choir_cuda_buf_alloc(g->cu, (size_t)lcap * (size_t)D->n_vocab * sizeof(float), &logits,
                                  err);
    if (rc) {
        choir_cuda_buf_free(g->cu, &step);
        choir_cuda_buf_free(g->cu, &logits);
        choir_cuda_host_free(g->cu, staging);
        choir_free(graphs);
        return rc;
    }
    if (step.ptr) {
        choir_cuda_buf_free(g->cu, &g->step);
        g->step = step;
    }
    if (logits.ptr) {
        choir_cuda_buf_free(g->cu, &g->logits);
        g->logits = logits;
    }
    choir_cuda_host_free(g->cu, g->staging);
    choir_free(g->graphs);
    g->staging = staging;
    g->graphs = graphs;
    g->rows_cap = cap;
    g->logits_cap = lcap;
    return choir_cuda_scratch_reserve(g->cu, wg_scratch_need(g, cap), err);
}

/* --- the two paths -------------------------------------------------------------- */

/* The MLP half of a block and the residual adds, on `n` rows. */
static int mlp(choir_whisper_gpu *g, const wg_block *b, const wg_rows *r, int64_t n,
               choir_err *err) {
    const choir_whisper_dims *D = &g->m->dims;
    choir_cuda *cu = g->cu;
    int64_t d = D->d_model;
    int rc;
    if ((rc = choir_cuda_layer_norm(cu, r->x, r->h, n, d, wg_ptr(&b->mlp_ln_g),
                                    wg_ptr(&b->mlp_ln_b), WG_LN_EPS, err)) ||
        (rc = choir_cuda_linear(cu, r->h, n, &b->fc1, wg_ptr(&b->fc1_b), r->hid, err)) ||
        (rc = choir_cuda_gelu_erf(cu, r->hid, n * D->ffn_dim, err)) ||
        (rc = choir_cuda_linear(cu, r->hid, n, &b->fc2, wg_ptr(&b->fc2_b), r->h, err)) ||
        (rc = choir_cuda_add(cu, r->x, r->h, r->x, n * d, err)))
        return rc;
    return 0;
}

/* One token for each of B sequences; everything that changes between steps
 * is read from device memory (the rows' meta and x), so this is what a graph
 * captures. Logits [B, V] land in g->logits. */
static int step_body(choir_whisper_gpu *g, int B, choir_err *err) {
    const choir_whisper_dims *D = &g->m->dims;
    choir_cuda *cu = g->cu;
    wg_rows r = rows_of(g);
    int64_t d = D->d_model, C = D->n_text_ctx, A = D->n_audio_ctx, Dh = d / D->n_head;
    int64_t self_stride = g->self.slot_floats, cross_stride = g->cross.slot_floats;
    float scale = 1.0f / sqrtf((float)Dh);
    int rc;
    for (int l = 0; l < D->n_text_layer; l++) {
        const wg_block *b = &g->dec[l];
        float *K = (float *)g->self.k.ptr + (size_t)l * (size_t)(C * d);
        float *V = (float *)g->self.v.ptr + (size_t)l * (size_t)(C * d);
        const float *XK = (const float *)g->cross.k.ptr + (size_t)l * (size_t)(A * d);
        const float *XV = (const float *)g->cross.v.ptr + (size_t)l * (size_t)(A * d);
        /* Self-attention: the new key and value rows go to each sequence's
         * cache at its position, then each attends to its filled prefix. */
        if ((rc = choir_cuda_layer_norm(cu, r.x, r.h, B, d, wg_ptr(&b->attn_ln_g),
                                        wg_ptr(&b->attn_ln_b), WG_LN_EPS, err)) ||
            (rc = choir_cuda_linear(cu, r.h, B, &b->q, wg_ptr(&b->bq), r.q, err)) ||
            (rc = choir_cuda_linear(cu, r.h, B, &b->k, NULL, r.k, err)) ||
            (rc = choir_cuda_linear(cu, r.h, B, &b->v, wg_ptr(&b->bv), r.v, err)) ||
            (rc = choir_cuda_rows_scatter(cu, r.k, B, d, K, self_stride, d, r.slot, r.pos, err)) ||
            (rc = choir_cuda_rows_scatter(cu, r.v, B, d, V, self_stride, d, r.slot, r.pos, err)) ||
            (rc = choir_cuda_attention_slots(cu, B, r.q, d, d, K, d, V, d, self_stride, r.slot,
                                             r.keys, r.att, d, d, 1, C, D->n_head, Dh, scale, false,
                                             err)) ||
            (rc = choir_cuda_linear(cu, r.att, B, &b->o, wg_ptr(&b->bo), r.h, err)) ||
            (rc = choir_cuda_add(cu, r.x, r.h, r.x, B * d, err)))
            return rc;
        /* Cross-attention to each sequence's window. */
        if ((rc = choir_cuda_layer_norm(cu, r.x, r.h, B, d, wg_ptr(&b->cross_ln_g),
                                        wg_ptr(&b->cross_ln_b), WG_LN_EPS, err)) ||
            (rc = choir_cuda_linear(cu, r.h, B, &b->xq, wg_ptr(&b->xbq), r.q, err)) ||
            (rc = choir_cuda_attention_slots(cu, B, r.q, d, d, XK, d, XV, d, cross_stride, r.xslot,
                                             NULL, r.att, d, d, 1, A, D->n_head, Dh, scale, false,
                                             err)) ||
            (rc = choir_cuda_linear(cu, r.att, B, &b->xo, wg_ptr(&b->xbo), r.h, err)) ||
            (rc = choir_cuda_add(cu, r.x, r.h, r.x, B * d, err)) || (rc = mlp(g, b, &r, B, err)))
            return rc;
    }
    if ((rc = choir_cuda_layer_norm(cu, r.x, r.x, B, d, wg_ptr(&g->dec_ln_g), wg_ptr(&g->dec_ln_b),
                                    WG_LN_EPS, err)))
        return rc;
    return choir_cuda_linear(cu, r.x, B, &g->tok_emb, NULL, (float *)g->logits.ptr, err);
}

/* Any mix of token counts: N rows, sequence i's n_tokens[i] rows in order.
 * Caches are written and attention run per sequence, with the addresses
 * known on the host. Logits of all rows or of each sequence's last row. */
static int forward_general(choir_whisper_gpu *g, choir_whisper_seq *const *seqs, int n_seq,
                           const int *n_tokens, int64_t N, bool all_positions, choir_err *err) {
    const choir_whisper_dims *D = &g->m->dims;
    choir_cuda *cu = g->cu;
    wg_rows r = rows_of(g);
    int64_t d = D->d_model, C = D->n_text_ctx, A = D->n_audio_ctx, Dh = d / D->n_head;
    float scale = 1.0f / sqrtf((float)Dh);
    size_t row_bytes = (size_t)d * sizeof(float);
    int rc;
    for (int l = 0; l < D->n_text_layer; l++) {
        const wg_block *b = &g->dec[l];
        if ((rc = choir_cuda_layer_norm(cu, r.x, r.h, N, d, wg_ptr(&b->attn_ln_g),
                                        wg_ptr(&b->attn_ln_b), WG_LN_EPS, err)) ||
            (rc = choir_cuda_linear(cu, r.h, N, &b->q, wg_ptr(&b->bq), r.q, err)) ||
            (rc = choir_cuda_linear(cu, r.h, N, &b->k, NULL, r.k, err)) ||
            (rc = choir_cuda_linear(cu, r.h, N, &b->v, wg_ptr(&b->bv), r.v, err)))
            return rc;
        for (int i = 0, row = 0; i < n_seq; i++) {
            const choir_whisper_seq *s = seqs[i];
            int n = n_tokens[i];
            size_t at = (size_t)s->slot * (size_t)g->self.slot_floats + (size_t)l * (size_t)(C * d);
            float *K = (float *)g->self.k.ptr + at, *V = (float *)g->self.v.ptr + at;
            if ((rc = choir_cuda_copy(cu, K + (size_t)s->n_past * d, r.k + (size_t)row * d,
                                      (size_t)n * row_bytes, err)) ||
                (rc = choir_cuda_copy(cu, V + (size_t)s->n_past * d, r.v + (size_t)row * d,
                                      (size_t)n * row_bytes, err)) ||
                (rc = choir_cuda_attention(cu, r.q + (size_t)row * d, d, K, d, V, d,
                                           r.att + (size_t)row * d, d, n, s->n_past + n, D->n_head,
                                           Dh, scale, NULL, true, err)))
                return rc;
            row += n;
        }
        if ((rc = choir_cuda_linear(cu, r.att, N, &b->o, wg_ptr(&b->bo), r.h, err)) ||
            (rc = choir_cuda_add(cu, r.x, r.h, r.x, N * d, err)) ||
            (rc = choir_cuda_layer_norm(cu, r.x, r.h, N, d, wg_ptr(&b->cross_ln_g),
                                        wg_ptr(&b->cross_ln_b), WG_LN_EPS, err)) ||
            (rc = choir_cuda_linear(cu, r.h, N, &b->xq, wg_ptr(&b->xbq), r.q, err)))
            return rc;
        for (int i = 0, row = 0; i < n_seq; i++) {
            const choir_whisper_cross *c = seqs[i]->cross;
            size_t at =
                (size_t)c->slot * (size_t)g->cross.slot_floats + (size_t)l * (size_t)(A * d);
            if ((rc = choir_cuda_attention(
                     cu, r.q + (size_t)row * d, d, (const float *)g->cross.k.ptr + at, d,
                     (const float *)g->cross.v.ptr + at, d, r.att + (size_t)row * d, d, n_tokens[i],
                     A, D->n_head, Dh, scale, NULL, false, err)))
                return rc;
            row += n_tokens[i];
        }
        if ((rc = choir_cuda_linear(cu, r.att, N, &b->xo, wg_ptr(&b->xbo), r.h, err)) ||
            (rc = choir_cuda_add(cu, r.x, r.h, r.x, N * d, err)) || (rc = mlp(g, b, &r, N, err)))
            return rc;
    }
    /* Only the rows whose logits are wanted go through the final LN and the
     * output projection: every row, or each sequence's last, gathered in h. */
    float *out_rows = r.x;
    int64_t n_out = N;
    if (!all_positions) {
        out_rows = r.h;
        n_out = n_seq;
        for (int i = 0, row = 0; i < n_seq; i++) {
            row += n_tokens[i];
            if ((rc = choir_cuda_copy(cu, r.h + (size_t)i * d, r.x + (size_t)(row - 1) * d,
                                      row_bytes, err)))
                return rc;
        }
    }
    if ((rc = choir_cuda_layer_norm(cu, out_rows, out_rows, n_out, d, wg_ptr(&g->dec_ln_g),
                                    wg_ptr(&g->dec_ln_b), WG_LN_EPS, err)))
        return rc;
    return choir_cuda_linear(cu, out_rows, n_out, &g->tok_emb, NULL, (float *)g->logits.ptr, err);
}

/* The step for B rows from its graph: captured on first use of B. A capture
 * that fails is counted, and this and later steps run kernel by kernel. */
static int step_graph(choir_whisper_gpu *g, int B, choir_err *err) {
    if (!g->graphs[B]) {
        choir_err cap_err = {0};
        /* The step's inputs are still on their way (asynchronous upload):
         * let them land before the stream starts recording. */
        int rc = choir_cuda_sync(g->cu, &cap_err);
        if (!rc) rc = choir_cuda_graph_begin(g->cu, &cap_err);
        if (!rc) {
            rc = step_body(g, B, &cap_err);
            /* Capture must end either way; a graph of a step that failed
             * half-way is dropped. */
            choir_cuda_graph *gr = choir_cuda_graph_end(g->cu, rc ? NULL : &cap_err);
            if (rc) choir_cuda_graph_free(gr);
            else g->graphs[B] = gr;
        }
        if (!g->graphs[B]) {
            /* Not retried: the model runs its steps directly from now on
             * (the failure shows in the statistics). */
            g->graph_failures++;
            g->opts.graphs = false;
            CHOIR_LOGW("whisper gpu: capturing the decoder step for %d rows failed (%s); steps "
                       "run kernel by kernel",
                       B, cap_err.msg[0] ? cap_err.msg : "no message");
            g->steps_direct++;
            return step_body(g, B, err);
        }
    }
    g->steps_graph++;
    return choir_cuda_graph_launch(g->cu, g->graphs[B], err);
}

/* --- pinned logits --------------------------------------------------------------- */

float *wg_logits_alloc(choir_whisper_gpu *g, size_t bytes) {
    for (int i = 0; i < WG_MAX_LENT; i++)
        if (!g->lent[i].p) {
            void *p = choir_cuda_host_alloc(g->cu, bytes, NULL);
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
            choir_cuda_host_free(g->cu, p);
            g->lent[i].p = NULL;
            return true;
        }
    return false;
}

/* Whether [p, p + bytes) lies in one lent block. */
static bool lent_holds(const choir_whisper_gpu *g, const float *p, size_t bytes) {
    for (int i = 0; i < WG_MAX_LENT; i++) {
        const char *b = g->lent[i].p, *q = (const char *)p;
        if (b && q >= b && q <= b + g->lent[i].bytes && bytes <= (size_t)(b + g->lent[i].bytes - q))
            return true;
    }
    return false;
}

int wg_decode(choir_whisper_gpu *g, choir_whisper_seq *const *seqs, int n_seq,
              const int32_t *tokens, const int *n_tokens, bool all_positions, float *logits,
              choir_err *err) {
    const choir_whisper *m = g->m;
    const choir_whisper_dims *D = &m->dims;
    int64_t d = D->d_model, N = 0;
    bool step = !all_positions;
    if (g->sticky.code) {
        int code = g->sticky.code;
        if (err) *err = g->sticky;
        choir_err_clear(&g->sticky);
        return code;
    }
    for (int i = 0; i < n_seq; i++) {
        if (seqs[i]->gpu != g || seqs[i]->cross->gpu != g)
            return choir_err_set(err, CHOIR_EINVAL,
                                 "whisper gpu: sequence %d or its window was made for the CPU", i);
        step = step && n_tokens[i] == 1;
        N += n_tokens[i];
    }
    int64_t n_out = all_positions ? N : n_seq;
    int rc = choir_cuda_make_current(g->cu, err);
    if (!rc) rc = ensure_rows(g, (int)N, (int)n_out, err);
    if (rc) {
        choir_err_prefix(err, "whisper gpu");
        return rc;
    }

    /* Input rows: token embedding plus position, as the CPU computes them,
     * after the meta block in the staging area. */
    int32_t *meta = g->staging;
    float *x = (float *)((char *)g->staging + meta_bytes(g->rows_cap));
    for (int i = 0, row = 0; i < n_seq; i++)
        for (int j = 0; j < n_tokens[i]; j++, row++) {
            choir_weight_row_f32(&m->tok_emb, tokens[row], x + (int64_t)row * d);
            const float *p = m->dec_pos + (int64_t)(seqs[i]->n_past + j) * d;
            for (int64_t c = 0; c < d; c++) x[(int64_t)row * d + c] += p[c];
        }
    size_t x_bytes = (size_t)N * (size_t)d * sizeof(float);
    if (step) {
        int cap = g->rows_cap;
        for (int i = 0; i < n_seq; i++) {
            meta[i] = seqs[i]->slot;
            meta[cap + i] = seqs[i]->cross->slot;
            meta[2 * cap + i] = seqs[i]->n_past;
            meta[3 * cap + i] = seqs[i]->n_past + 1;
        }
        /* Staging is pinned and not written again before this call's
         * download has synchronised, so the upload need not wait. */
        rc = choir_cuda_upload_async(g->cu, &g->step, 0, g->staging, meta_bytes(cap) + x_bytes,
                                     err);
        if (!rc) {
            if (g->opts.graphs) {
                rc = step_graph(g, n_seq, err);
            } else {
                g->steps_direct++;
                rc = step_body(g, n_seq, err);
            }
        }
    } else {
        g->steps_direct++;
        rc = choir_cuda_upload_async(g->cu, &g->step, meta_bytes(g->rows_cap), x, x_bytes, err);
        if (!rc) rc = forward_general(g, seqs, n_seq, n_tokens, N, all_positions, err);
    }
    /* The logits: into a lent pinned block the copy is queued right behind
     * the step and the host waits once for both; other memory takes the
     * runtime's staged, synchronous path. */
    size_t out_bytes = (size_t)n_out * (size_t)D->n_vocab * sizeof(float);
    if (!rc && lent_holds(g, logits, out_bytes)) {
        rc = choir_cuda_download_async(g->cu, logits, &g->logits, 0, out_bytes, err);
        if (!rc) rc = choir_cuda_sync(g->cu, err);
    } else if (!rc) {
        rc = choir_cuda_download(g->cu, logits, &g->logits, 0, out_bytes, err);
    }
    if (rc) {
        /* An upload may still be reading the staging area that the next
         * call writes. */
        choir_cuda_sync(g->cu, NULL);
        choir_err_prefix(err, "whisper gpu: decoder");
        return rc;
    }
    for (int i = 0; i < n_seq; i++) seqs[i]->n_past += n_tokens[i];
    return 0;
}

#else
/* Keeps the translation unit non-empty in CPU-only builds. */
typedef int choir_whisper_cuda_dec_unused;
#endif
