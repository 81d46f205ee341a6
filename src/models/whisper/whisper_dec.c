/* The Whisper decoder written once over the backend operations
 * (choir/backend.h): a batch of sequences, each with its new tokens after its
 * cached positions, through causal self-attention over its KV cache,
 * cross-attention to its window's K/V and the MLP, then the final LN and the
 * tied output projection for the rows whose logits are wanted. The CPU runs
 * it through the CPU backend on the model's own weights, an attached GPU
 * through the CUDA backend on their device copies (whisper_cuda.c places the
 * memory). Also the cross-attention logits of chosen heads a pass can give
 * (word timestamps: choir_whisper_cross_qk, whisper_qk.c), on either
 * backend: a device computes them in its memory and sends them back.
 *
 * Two forms of the same layers. A step (every sequence gets one new token,
 * only its logits are wanted, and the caches are slots of one pool, as on a
 * device) runs one fixed sequence of operations for B rows whose varying
 * parts (cache slots, cross slots, positions, key counts, token ids) are
 * read from backend memory: a device captures it once per B as a graph and
 * replays it. Anything else (start sequences and prompts, teacher forcing,
 * every call on the CPU) appends and attends per sequence, with the
 * addresses known on the host.
 *
 * Shapes: d = d_model, N = the batch's new tokens, A = n_audio_ctx, C =
 * n_text_ctx, V = n_vocab. */
#include <math.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/backend_whisper.h"
#include "choir/kernels.h"
#include "choir/log.h"
#include "models/whisper/whisper_internal.h"

#define WH_LN_EPS 1e-5f
#define WH_ALIGN_SLACK (16 * 256)

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

size_t wh_dec_work_bytes(const choir_whisper_dims *D, int64_t N, int64_t n_out) {
    /* The int32 inputs [WH_META][N]; x, h, q, k, v, att [N, d]; hid [N,
     * ffn]; logits [n_out, V]. */
    return (size_t)(WH_META * N) * sizeof(int32_t) +
           (size_t)(N * (6 * (int64_t)D->d_model + D->ffn_dim) + n_out * D->n_vocab) *
               sizeof(float) +
           WH_ALIGN_SLACK;
}

size_t wh_dec_qk_bytes(const choir_whisper_dims *D, int n_heads, int64_t n) {
    /* qk [n_heads][n][A]; one layer's keys widened to f32 [A, d] and their
     * row ids [A] (half-precision caches). */
    int64_t A = D->n_audio_ctx;
    return (size_t)((int64_t)n_heads * n * A + A * D->d_model) * sizeof(float) +
           (size_t)A * sizeof(int32_t) + 3 * 256;
}

size_t wh_dec_scratch_bytes(const wh_net *w, const choir_whisper_dims *D, int64_t N,
                            choir_dtype kv) {
    int64_t keys = D->n_audio_ctx > D->n_text_ctx ? D->n_audio_ctx : D->n_text_ctx;
    size_t s = kv == CHOIR_DTYPE_F32 ? choir_attention_scratch_bytes(N, keys)
                                     : choir_attention_half_scratch_bytes(N, keys, D->d_model);
    s = max_sz(s, choir_linear_scratch_bytes(N, &w->tok_emb));
    for (int l = 0; l < D->n_text_layer; l++) {
        const wh_block *b = &w->dec[l];
        const choir_weight *ws[] = {&b->attn.q,  &b->attn.k, &b->attn.v, &b->attn.o, &b->cross.q,
                                    &b->cross.o, &b->fc1,    &b->fc2};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
            s = max_sz(s, choir_linear_scratch_bytes(N, ws[i]));
    }
    return s;
}

/* One call's backend memory, carved in a fixed order from the stream (the
 * same addresses for the same N on an empty stream: what a graph needs). */
typedef struct wh_dec_io {
    int32_t *meta;                      /* [WH_META][N]: the rows below */
    int32_t *ids, *pos, *slot, *xslot, *keys;
    float *x, *h, *q, *k, *v, *att;     /* [N, d] */
    float *hid;                         /* [N, ffn] */
    float *logits;                      /* [n_out, V] */
    /* A pass that gives cross-attention logits: where they are written
     * ([n_heads][n][A]: the caller's memory on the CPU, the stream's on a
     * device), and for half-precision caches one layer's keys widened to
     * f32 [A, d] with the ids 0 .. A-1 that gather them. */
    float *qk, *qk_keys;
    int32_t *qk_ids;
} wh_dec_io;

static void carve(choir_stream *s, const choir_whisper_dims *D, int64_t N, int64_t n_out,
                  bool carve_logits, wh_dec_io *io) {
    int64_t d = D->d_model;
    io->meta = choir_stream_alloc(s, (size_t)(WH_META * N) * sizeof(int32_t), "whisper inputs");
    if (io->meta) {
        io->ids = io->meta, io->pos = io->ids + N, io->slot = io->pos + N;
        io->xslot = io->slot + N, io->keys = io->xslot + N;
    }
    io->x = choir_stream_floats(s, N * d, "whisper decoder rows");
    io->h = choir_stream_floats(s, N * d, "whisper decoder normalised rows");
    io->q = choir_stream_floats(s, N * d, "whisper decoder queries");
    io->k = choir_stream_floats(s, N * d, "whisper decoder keys");
    io->v = choir_stream_floats(s, N * d, "whisper decoder values");
    io->att = choir_stream_floats(s, N * d, "whisper decoder attention");
    io->hid = choir_stream_floats(s, N * D->ffn_dim, "whisper decoder MLP hidden");
    io->logits = carve_logits && n_out > 0
                     ? choir_stream_floats(s, n_out * D->n_vocab, "whisper decoder logits")
                     : NULL;
}

/* Pre-softmax cross-attention logits of the heads of layer l (those of `qk`
 * whose layer is l) for sequence 0's n rows io->q [n, d] against its window
 * `cr`'s keys of the layer (element `off` of its cache): out row block j of
 * head i at io->qk + (i n + j) A. Keys cached in bf16 (a device's) or f16 are
 * widened to f32 first, so the product is f32 over the rounded keys, as the
 * attention reads them. */
static void cross_qk_rows(choir_stream *s, const wh_qk_req *qk, int l, const choir_whisper_dims *D,
                          const wh_dec_io *io, int64_t n, const choir_whisper_cross *cr,
                          int64_t off) {
    int64_t d = D->d_model, Dh = d / D->n_head, A = D->n_audio_ctx;
    float scale = 1.0f / sqrtf((float)Dh);
    const float *k = NULL;
    for (int i = 0; i < qk->n_heads; i++) {
        if (qk->layer[i] != l) continue;
        if (!k) {
            if (cr->kv == CHOIR_DTYPE_F32) {
                k = (const float *)cr->k + off;
            } else {
                choir_weight kw = {.kind = cr->kv == CHOIR_DTYPE_F16 ? CHOIR_WEIGHT_F16
                                                                   : CHOIR_WEIGHT_BF16,
                                   .rows = A, .cols = d,
                                   .data = wh_kv_at(cr->k, cr->kv, off)};
                choir_op_rows_gather(s, &kw, io->qk_ids, A, io->qk_keys);
                k = io->qk_keys;
            }
        }
        int64_t h = qk->head[i];
        choir_op_gemm(s, false, true, n, A, Dh, scale, io->q + h * Dh, d, k + h * Dh, d, 0.0f,
                      io->qk + (int64_t)i * n * A, A);
    }
}

/* The batch being decoded: its sequences and, for a step, the pools their
 * caches and windows are slots of (NULL: per-sequence form). */
typedef struct wh_dec_batch {
    choir_whisper_seq *const *seqs;
    int n_seq;
    const int *n_tokens;
    int64_t N;
    const wh_pool *self, *cross;
} wh_dec_batch;

/* Self-attention of layer l on the new rows: each row's key and value into
 * its sequence's cache (with pooled caches the q/k/v operation put them
 * there), then each sequence's queries over its filled prefix. */
static void self_attention(choir_stream *s, const wh_dec_batch *b, int l,
                           const choir_whisper_dims *D, const wh_dec_io *io) {
    int64_t d = D->d_model;
    choir_attn a = {.n_head = D->n_head,
                    .Dh = d / D->n_head,
                    .scale = 1.0f / sqrtf((float)(d / D->n_head)),
                    .causal = true};
    if (b->self) {
        const wh_pool *p = b->self;
        int64_t lo = (int64_t)l * p->positions * d;
        void *K = wh_kv_at(p->k, p->dt, lo), *V = wh_kv_at(p->v, p->dt, lo);
        /* One row per sequence: it sees every key of its prefix. */
        a.causal = false;
        a.kv = p->dt;
        /* The new rows' keys and values are in the cache already: the q/k/v
         * operation wrote them there (self_rows). */
        choir_op_attention_slots(s, b->N, io->q, d, d, K, d, V, d, p->slot_elems, io->slot,
                                 io->keys, io->att, d, d, 1, p->positions, &a);
        return;
    }
    for (int i = 0, r = 0; i < b->n_seq; r += b->n_tokens[i], i++) {
        choir_whisper_seq *sq = b->seqs[i];
        int64_t n = b->n_tokens[i], lo = (int64_t)l * sq->positions * d;
        int64_t at = lo + (int64_t)sq->n_past * d;
        a.kv = sq->kv;
        choir_op_convert(s, io->k + r * d, wh_kv_at(sq->k, sq->kv, at), sq->kv, n * d);
        choir_op_convert(s, io->v + r * d, wh_kv_at(sq->v, sq->kv, at), sq->kv, n * d);
        choir_op_attention(s, io->q + r * d, d, wh_kv_at(sq->k, sq->kv, lo), d,
                           wh_kv_at(sq->v, sq->kv, lo), d, io->att + r * d, d, n, sq->n_past + n,
                           &a, NULL);
    }
}

/* Cross-attention of layer l to each sequence's window. */
static void cross_attention(choir_stream *s, const wh_dec_batch *b, int l,
                            const choir_whisper_dims *D, const wh_dec_io *io,
                            const wh_qk_req *qk) {
    int64_t d = D->d_model, A = D->n_audio_ctx, off = (int64_t)l * A * d;
    choir_attn a = {.n_head = D->n_head,
                    .Dh = d / D->n_head,
                    .scale = 1.0f / sqrtf((float)(d / D->n_head))};
    if (b->cross) {
        const wh_pool *p = b->cross;
        a.kv = p->dt;
        choir_op_attention_slots(s, b->N, io->q, d, d, wh_kv_at(p->k, p->dt, off), d,
                                 wh_kv_at(p->v, p->dt, off), d, p->slot_elems, io->xslot, NULL,
                                 io->att, d, d, 1, A, &a);
        return;
    }
    for (int i = 0, r = 0; i < b->n_seq; r += b->n_tokens[i], i++) {
        const choir_whisper_cross *cr = b->seqs[i]->cross;
        a.kv = cr->kv;
        choir_op_attention(s, io->q + r * d, d, wh_kv_at(cr->k, cr->kv, off), d,
                           wh_kv_at(cr->v, cr->kv, off), d, io->att + r * d, d, b->n_tokens[i],
                           A, &a, NULL);
        if (qk && i == 0) cross_qk_rows(s, qk, l, D, io, b->n_tokens[0], cr, off);
    }
}

/* Where the q/k/v operation also writes the new rows' keys (k) or values of
 * layer l when the caches are slots of one pool: each row at its sequence's
 * slot and position. */
static choir_rows_out self_rows(const wh_dec_batch *b, int l, const choir_whisper_dims *D,
                                const wh_dec_io *io, bool values) {
    choir_rows_out o = {0};
    const wh_pool *p = b->self;
    if (!p) return o;
    int64_t d = D->d_model, lo = (int64_t)l * p->positions * d;
    o.dst = wh_kv_at(values ? p->v : p->k, p->dt, lo);
    o.dtype = p->dt;
    o.slot_stride = p->slot_elems;
    o.ld = d;
    o.slot = io->slot;
    o.pos = io->pos;
    return o;
}

/* One decoder block on the residual stream x [N, d]. Each layer norm rides
 * on the products that read it (one kernel on a device's few-row GEMV path;
 * elsewhere the norm lands in h first). */
static void dec_block(choir_stream *s, const wh_block *blk, int l, const choir_whisper_dims *D,
                      const wh_dec_batch *b, const wh_dec_io *io, const wh_qk_req *qk) {
    int64_t N = b->N;
    /* q, k and v from the same rows: one operation (on the CPU one pool job
     * for a step's few rows), the keys and values also into pooled caches. */
    choir_norm_linear qkv = {.ln_g = blk->attn_ln_g, .ln_b = blk->attn_ln_b, .eps = WH_LN_EPS,
                             .n = 3,
                             .W = {&blk->attn.q, &blk->attn.k, &blk->attn.v},
                             .bias = {blk->attn.bq, NULL, blk->attn.bv},
                             .y = {io->q, io->k, io->v},
                             .store = {{0}, self_rows(b, l, D, io, false),
                                       self_rows(b, l, D, io, true)}};
    choir_op_norm_linear(s, io->x, N, &qkv, io->h);
    self_attention(s, b, l, D, io);
    /* The residual adds and the MLP's GELU ride on the products (fused on a
     * device's few-row GEMV path; elsewhere the product lands in h first). */
    choir_op_linear_ex(s, io->att, N, &blk->attn.o, blk->attn.bo, io->x, CHOIR_LINEAR_ACCUMULATE,
                       io->h);

    choir_norm_linear cq = {.ln_g = blk->cross_ln_g, .ln_b = blk->cross_ln_b, .eps = WH_LN_EPS,
                            .n = 1, .W = {&blk->cross.q}, .bias = {blk->cross.bq},
                            .y = {io->q}};
    choir_op_norm_linear(s, io->x, N, &cq, io->h);
    cross_attention(s, b, l, D, io, qk);
    choir_op_linear_ex(s, io->att, N, &blk->cross.o, blk->cross.bo, io->x, CHOIR_LINEAR_ACCUMULATE,
                       io->h);

    choir_norm_linear fc1 = {.ln_g = blk->mlp_ln_g, .ln_b = blk->mlp_ln_b, .eps = WH_LN_EPS,
                             .n = 1, .W = {&blk->fc1}, .bias = {blk->fc1_b}, .y = {io->hid},
                             .flags = CHOIR_LINEAR_GELU};
    choir_op_norm_linear(s, io->x, N, &fc1, io->h);
    choir_op_linear_ex(s, io->hid, N, &blk->fc2, blk->fc2_b, io->x, CHOIR_LINEAR_ACCUMULATE, io->h);
}

/* The whole pass on inputs already in io: embeddings, the blocks, and the
 * logits of every row (all_positions) or of each sequence's last row into
 * `logits` (backend memory; NULL: none). Operations only, so a step can be
 * recorded. */
static void dec_body(choir_stream *s, const wh_net *w, const choir_whisper_dims *D,
                     const wh_dec_batch *b, const wh_dec_io *io, bool all_positions, float *logits,
                     const wh_qk_req *qk) {
    int64_t d = D->d_model, N = b->N;
    choir_weight pos_table = choir_weight_f32(w->dec_pos, D->n_text_ctx, d);
    choir_op_rows_gather(s, &w->tok_emb, io->ids, N, io->x);
    choir_op_rows_gather(s, &pos_table, io->pos, N, io->h);
    choir_op_add(s, io->x, io->h, io->x, N * d);
    for (int l = 0; l < D->n_text_layer; l++) dec_block(s, &w->dec[l], l, D, b, io, qk);
    if (!logits) return;
    /* Only the rows whose logits are wanted go through the final LN and the
     * tied output projection (the [V, d] product dominates a decoder step). */
    int64_t n_out = all_positions ? N : b->n_seq;
    if (!all_positions)
        for (int i = 0, r = 0; i < b->n_seq; i++) {
            r += b->n_tokens[i];
            if (r - 1 != i)
                choir_op_copy(s, io->x + (int64_t)i * d, io->x + (int64_t)(r - 1) * d,
                              (size_t)d * sizeof(float));
        }
    choir_norm_linear out = {.ln_g = w->dec_ln_g, .ln_b = w->dec_ln_b, .eps = WH_LN_EPS, .n = 1,
                             .W = {&w->tok_emb}, .y = {logits}};
    choir_op_norm_linear(s, io->x, n_out, &out, io->h);
}

void wh_dec_graphs_drop(wh_dec_rt *rt) {
    for (int b = 0; rt->graphs && b <= rt->rows_cap; b++) {
        choir_graph_free(rt->graphs[b]);
        rt->graphs[b] = NULL;
    }
    for (int i = 0; rt->ggraphs && i < (rt->rows_cap + 1) * WH_GREEDY_KS; i++) {
        choir_graph_free(rt->ggraphs[i]);
        rt->ggraphs[i] = NULL;
    }
}

/* A step of B rows from its graph, recorded on first use of B. A recording
 * that fails is counted, and this and later steps run operation by
 * operation. */
static void step_graph(wh_dec_rt *rt, const wh_net *w, const choir_whisper_dims *D,
                       const wh_dec_batch *b, const wh_dec_io *io) {
    choir_stream *s = rt->s;
    int B = (int)b->N;
    if (!rt->graphs[B]) {
        choir_err e = {0};
        /* The step's inputs are on their way (asynchronous upload): let them
         * land before the stream records. */
        int rc = choir_stream_sync(s, &e);
        if (!rc) rc = choir_stream_graph_begin(s, &e);
        if (!rc) {
            dec_body(s, w, D, b, io, false, io->logits, NULL);
            rt->graphs[B] = choir_stream_graph_end(s, &e);
        }
        if (!rt->graphs[B]) {
            rt->graph_failures++;
            rt->use_graphs = false;
            CHOIR_LOGW("whisper: recording the decoder step for %d rows failed (%s); steps run "
                       "operation by operation",
                       B, e.msg[0] ? e.msg : "no message");
            rt->steps_direct++;
            dec_body(s, w, D, b, io, false, io->logits, NULL);
            return;
        }
    }
    rt->steps_graph++;
    choir_stream_graph_launch(s, rt->graphs[B]);
}

/* The pool every sequence's cache (cross: window) is a slot of, or NULL. */
static const wh_pool *shared_pool(choir_whisper_seq *const *seqs, int n_seq, bool cross) {
    const wh_pool *p = NULL;
    for (int i = 0; i < n_seq; i++) {
        const wh_pool *q = cross ? seqs[i]->cross->pool : seqs[i]->pool;
        if (!q || (p && q != p)) return NULL;
        p = q;
    }
    return p;
}

int wh_decode_run(wh_dec_rt *rt, const wh_net *w, const choir_whisper_dims *D,
                  choir_whisper_seq *const *seqs, int n_seq, const int32_t *tokens,
                  const int *n_tokens, bool all_positions, float *logits, const wh_qk_req *qk,
                  choir_err *err) {
    choir_stream *s = rt->s;
    bool host = choir_backend_is_host(w->be);
    /* An error left by an earlier call that could not return one (a cache
     * copy) is this call's. */
    int rc = choir_stream_status(s, err);
    if (rc) {
        choir_stream_clear(s);
        return rc;
    }
    if (qk && (n_seq < 1 || qk->n_heads < 1 || !qk->qk))
        return choir_err_set(err, CHOIR_EINVAL, "whisper: cross-attention logits of no heads");
    wh_dec_batch b = {.seqs = seqs, .n_seq = n_seq, .n_tokens = n_tokens};
    bool step = !all_positions && !qk && logits;
    for (int i = 0; i < n_seq; i++) {
        b.N += n_tokens[i];
        step = step && n_tokens[i] == 1;
    }
    /* Caches that are slots of one pool each (on a device) are read through
     * the slot operations whatever the tokens per sequence: a prompt's rows
     * each see their own prefix (keys = position + 1), so a batch's prefill
     * is a few kernels, not a few per sequence and layer. The alignment
     * pass (qk) reads its first sequence's cross-attention sequence by
     * sequence. */
    if (!qk) {
        b.self = shared_pool(seqs, n_seq, false);
        b.cross = shared_pool(seqs, n_seq, true);
        if (!b.self || !b.cross) b.self = b.cross = NULL;
    }
    step = step && b.self;
    int64_t N = b.N, n_out = logits ? (all_positions ? N : n_seq) : 0;
    size_t mark = choir_stream_mark(s);
    wh_dec_io io;
    carve(s, D, N, n_out, !host, &io);
    io.qk = io.qk_keys = NULL;
    io.qk_ids = NULL;
    int32_t *ids_host = NULL;
    int64_t A = D->n_audio_ctx, qk_n = qk ? (int64_t)qk->n_heads * n_tokens[0] * A : 0;
    if (qk) {
        io.qk = host ? qk->qk : choir_stream_floats(s, qk_n, "whisper cross-attention logits");
        if (seqs[0]->cross->kv != CHOIR_DTYPE_F32) {
            io.qk_keys = choir_stream_floats(s, A * D->d_model, "whisper keys widened");
            io.qk_ids = choir_stream_alloc(s, (size_t)A * sizeof(int32_t), "whisper key rows");
            ids_host = host ? io.qk_ids : choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)A * sizeof(int32_t));
            if (!ids_host) {
                choir_stream_fail(s, CHOIR_ENOMEM, "whisper: out of memory for the key rows");
                goto out;
            }
            if (io.qk_ids) {
                for (int64_t r = 0; r < A; r++) ids_host[r] = (int32_t)r;
                if (!host) choir_op_upload(s, io.qk_ids, ids_host, (size_t)A * sizeof(int32_t));
            }
        }
    }
    if (choir_stream_status(s, NULL)) goto out;
    if (host) io.logits = logits;

    /* The int32 inputs: written where they are read on the CPU, staged and
     * sent in one copy to a device. */
    int32_t *hm = host ? io.meta : rt->staging;
    if (!hm) {
        choir_stream_fail(s, CHOIR_EINTERNAL, "whisper: no staging for the decoder's inputs");
        goto out;
    }
    memcpy(hm, tokens, (size_t)N * sizeof(int32_t));
    for (int i = 0, r = 0; i < n_seq; i++)
        for (int j = 0; j < n_tokens[i]; j++, r++) {
            hm[N + r] = seqs[i]->n_past + j;
            hm[2 * N + r] = seqs[i]->pool ? seqs[i]->slot : 0;
            hm[3 * N + r] = seqs[i]->cross->pool ? seqs[i]->cross->slot : 0;
            hm[4 * N + r] = seqs[i]->n_past + j + 1;
        }
    if (!host) choir_op_upload_async(s, io.meta, hm, (size_t)(WH_META * N) * sizeof(int32_t));

    if (step && rt->use_graphs && rt->graphs && N <= rt->rows_cap) {
        step_graph(rt, w, D, &b, &io);
    } else {
        rt->steps_direct++;
        dec_body(s, w, D, &b, &io, all_positions, io.logits, qk);
    }
    if (!host && n_out > 0)
        choir_op_download_async(s, logits, io.logits,
                                (size_t)(n_out * D->n_vocab) * sizeof(float));
    if (!host && qk) choir_op_download_async(s, qk->qk, io.qk, (size_t)qk_n * sizeof(float));
    /* The staging area is written again by the next call: everything here
     * must have landed. */
    if (choir_stream_sync(s, NULL) == 0)
        for (int i = 0; i < n_seq; i++) seqs[i]->n_past += n_tokens[i];
out:
    if (ids_host && !host) choir_free(ids_host);
    choir_stream_release(s, mark);
    rc = choir_stream_status(s, err);
    if (rc) {
        choir_stream_clear(s);
        choir_err_prefix(err, "whisper: decoder");
    }
    return rc;
}

int wh_decode_host(const choir_whisper *m, choir_whisper_seq *const *seqs, int n_seq,
                   const int32_t *tokens, const int *n_tokens, bool all_positions, float *logits,
                   const wh_qk_req *qk, choir_err *err) {
    /* In a batch arena: the pass carves its buffers from the batch stream
     * and gives them back (wh_decode_run's mark), nothing allocated. */
    choir_stream *bs = n_seq > 0 && seqs[0]->cross ? seqs[0]->cross->bs : NULL;
    if (bs) {
        wh_dec_rt brt = {.s = bs};
        return wh_decode_run(&brt, &m->net, &m->dims, seqs, n_seq, tokens, n_tokens,
                             all_positions, logits, qk, err);
    }
    int64_t N = 0;
    for (int i = 0; i < n_seq; i++) N += n_tokens[i];
    wh_dec_rt rt = {.s = choir_stream_create(m->net.be, err)};
    if (!rt.s) return err && err->code ? err->code : CHOIR_ENOMEM;
    /* An alignment pass over a 16-bit cache widens a layer's keys into the
     * stream (its qk rows are the caller's memory). */
    size_t work = wh_dec_work_bytes(&m->dims, N, 0);
    if (qk && seqs[0]->cross->kv != CHOIR_DTYPE_F32)
        work += wh_dec_qk_bytes(&m->dims, qk->n_heads, N);
    int rc = choir_stream_reserve(rt.s, work,
                                  wh_dec_scratch_bytes(&m->net, &m->dims, N, m->cache_kv), err);
    if (!rc)
        rc = wh_decode_run(&rt, &m->net, &m->dims, seqs, n_seq, tokens, n_tokens, all_positions,
                           logits, qk, err);
    choir_stream_free(rt.s);
    return rc;
}

/* --- greedy decoding with the rules on the device --------------------------- */

#define WH_MAX_SUPPRESS 256

/* The hypotheses' state in backend memory (choir_whisper_greedy) and the
 * suppressed ids, carved after the step's buffers; the same int32 layout in
 * the pinned staging, sent and fetched in one copy each. */
typedef struct wh_gstate {
    int32_t *i32; /* tokens [B][ld], n, done, sample_begin, limit [B], suppress [ns] */
    double *sum;  /* [B] */
    int64_t n_i32;
} wh_gstate;

static int64_t gstate_i32(int64_t B, int64_t ld, int64_t ns) { return B * ld + 4 * B + ns; }

size_t wh_greedy_work_bytes(const choir_whisper_dims *D, int64_t B) {
    return (size_t)gstate_i32(B, D->n_text_ctx + 2, WH_MAX_SUPPRESS) * sizeof(int32_t) +
           (size_t)B * sizeof(double) + WH_ALIGN_SLACK;
}

/* K steps of the rules and the decoder: each step's logits feed the next
 * step's rules. */
static void greedy_body(choir_stream *s, const wh_net *w, const choir_whisper_dims *D,
                        const wh_dec_batch *b, const wh_dec_io *io, const choir_whisper_filter *f,
                        const choir_whisper_greedy *g, int K) {
    for (int k = 0; k < K; k++) {
        choir_op_whisper_greedy(s, io->logits, f, g);
        dec_body(s, w, D, b, io, false, io->logits, NULL);
    }
}

/* K steps from their graph (recorded on first use of B and K), or operation
 * by operation when graphs are off or a recording fails. */
static void greedy_steps(wh_dec_rt *rt, const wh_net *w, const choir_whisper_dims *D,
                         const wh_dec_batch *b, const wh_dec_io *io, const choir_whisper_filter *f,
                         const choir_whisper_greedy *g, int ki) {
    choir_stream *s = rt->s;
    int B = (int)b->N, K = 1 << ki;
    choir_graph **slot = rt->ggraphs && rt->use_graphs && B <= rt->rows_cap
                             ? &rt->ggraphs[B * WH_GREEDY_KS + ki]
                             : NULL;
    if (slot && !*slot) {
        choir_err e = {0};
        int rc = choir_stream_sync(s, &e);
        if (!rc) rc = choir_stream_graph_begin(s, &e);
        if (!rc) {
            greedy_body(s, w, D, b, io, f, g, K);
            *slot = choir_stream_graph_end(s, &e);
        }
        if (!*slot) {
            rt->graph_failures++;
            rt->use_graphs = false;
            CHOIR_LOGW("whisper: recording %d greedy steps for %d rows failed (%s); steps run "
                       "operation by operation",
                       K, B, e.msg[0] ? e.msg : "no message");
            slot = NULL;
        }
    }
    if (slot) {
        rt->steps_graph += K;
        choir_stream_graph_launch(s, *slot);
    } else {
        rt->steps_direct += K;
        greedy_body(s, w, D, b, io, f, g, K);
    }
}

int wh_greedy_run(wh_dec_rt *rt, const wh_net *w, const choir_whisper_dims *D,
                  choir_whisper_seq *const *seqs, int n_seq, const wh_greedy_req *q,
                  choir_err *err) {
    choir_stream *s = rt->s;
    int rc = choir_stream_status(s, err);
    if (rc) {
        choir_stream_clear(s);
        return rc;
    }
    const choir_whisper_filter *f = q->f;
    int64_t B = n_seq, V = D->n_vocab, ld = q->ld, ns = f->n_suppress;
    wh_dec_batch b = {.seqs = seqs, .n_seq = n_seq, .N = B};
    b.self = shared_pool(seqs, n_seq, false);
    int *ones = choir_alloc(CHOIR_MEM_OTHER, (size_t)(B > 0 ? B : 1) * sizeof(int));
    if (!ones) return choir_err_set(err, CHOIR_ENOMEM, "whisper: out of memory");
    for (int64_t r = 0; r < B; r++) ones[r] = 1;
    b.n_tokens = ones;
    b.cross = shared_pool(seqs, n_seq, true);
    if (!b.self || !b.cross || ns > WH_MAX_SUPPRESS || ld != D->n_text_ctx + 2 ||
        choir_backend_is_host(w->be)) {
        choir_free(ones);
        return choir_err_set(err, CHOIR_EUNSUPPORTED,
                             "whisper: greedy rules on the device need pooled caches");
    }
    /* Graphs hold the filter's settings: others drop them. */
    int key[5] = {f->timestamps, f->suppress_blank, f->max_initial_timestamp_index, (int)ns,
                  (int)ld};
    if (memcmp(key, rt->gkey, sizeof key) != 0) {
        for (int i = 0; rt->ggraphs && i < (rt->rows_cap + 1) * WH_GREEDY_KS; i++) {
            choir_graph_free(rt->ggraphs[i]);
            rt->ggraphs[i] = NULL;
        }
        memcpy(rt->gkey, key, sizeof key);
    }
    int64_t n_i32 = gstate_i32(B, ld, ns);
    size_t need = (size_t)(n_i32 + WH_META * B) * sizeof(int32_t) + (size_t)B * sizeof(double);
    if (need > rt->gstage_bytes) {
        if (rt->gstage) choir_backend_host_free(rt->be, rt->gstage);
        rt->gstage_bytes = 0;
        rt->gstage = choir_backend_host_alloc(rt->be, need);
        if (!rt->gstage) {
            choir_free(ones);
            return choir_err_set(err, CHOIR_ENOMEM, "whisper: no pinned staging for greedy state");
        }
        rt->gstage_bytes = need;
    }
    double *hsum = rt->gstage;
    int32_t *hi = (int32_t *)(hsum + B), *hmeta = hi + n_i32;
    int32_t *htok = hi, *hn = hi + B * ld, *hdone = hn + B, *hsb = hdone + B, *hlim = hsb + B,
            *hsup = hlim + B;

    size_t mark = choir_stream_mark(s);
    wh_dec_io io;
    carve(s, D, B, B, true, &io);
    wh_gstate st;
    st.n_i32 = n_i32;
    st.i32 = choir_stream_alloc(s, (size_t)n_i32 * sizeof(int32_t), "whisper greedy state");
    st.sum = choir_stream_alloc(s, (size_t)B * sizeof(double), "whisper greedy sums");
    if (choir_stream_status(s, NULL)) goto out;
    choir_whisper_greedy g = {.B = B,
                              .tokens = st.i32,
                              .ld = ld,
                              .n = st.i32 + B * ld,
                              .done = st.i32 + B * ld + B,
                              .sum_logprob = st.sum,
                              .sample_begin = st.i32 + B * ld + 2 * B,
                              .limit = st.i32 + B * ld + 3 * B,
                              .ids = io.ids,
                              .pos = io.pos,
                              .keys = io.keys};
    choir_whisper_filter fd = *f;
    fd.suppress = st.i32 + B * ld + 4 * B;

    /* The state, the step inputs (a row stopped at its first pick keeps
     * these: its last token again, never read back) and the first logits. */
    int remaining = 0;
    for (int64_t r = 0; r < B; r++) {
        int n = q->n[r];
        memcpy(htok + r * ld, q->tokens[r], (size_t)n * sizeof(int32_t));
        memset(htok + r * ld + n, 0, (size_t)(ld - n) * sizeof(int32_t));
        hn[r] = n;
        hdone[r] = n >= q->limit[r];
        hsb[r] = q->sample_begin[r];
        hlim[r] = q->limit[r];
        hsum[r] = q->sum_logprob[r];
        hmeta[r] = q->tokens[r][n - 1];
        hmeta[B + r] = n - 1;
        hmeta[2 * B + r] = seqs[r]->slot;
        hmeta[3 * B + r] = seqs[r]->cross->slot;
        hmeta[4 * B + r] = n;
        if (q->limit[r] - n > remaining) remaining = q->limit[r] - n;
    }
    if (ns) memcpy(hsup, f->suppress, (size_t)ns * sizeof(int32_t));
    choir_op_upload_async(s, st.i32, hi, (size_t)n_i32 * sizeof(int32_t));
    choir_op_upload_async(s, st.sum, hsum, (size_t)B * sizeof(double));
    choir_op_upload_async(s, io.meta, hmeta, (size_t)(WH_META * B) * sizeof(int32_t));
    for (int64_t r = 0; r < B; r++)
        choir_op_upload(s, io.logits + r * V, q->logits[r], (size_t)V * sizeof(float));

    int steps = q->steps < 1 ? 1 : q->steps > 16 ? 16 : q->steps;
    while (remaining > 0 && choir_stream_status(s, NULL) == 0) {
        int cap = remaining < steps ? remaining : steps, ki = 0;
        while ((2 << ki) <= cap) ki++;
        greedy_steps(rt, w, D, &b, &io, &fd, &g, ki);
        /* The host's look: how many tokens each row holds, which stopped. */
        choir_op_download_async(s, hn, g.n, 2 * (size_t)B * sizeof(int32_t));
        if (choir_stream_sync(s, NULL)) break;
        remaining = 0;
        for (int64_t r = 0; r < B; r++)
            if (!hdone[r] && q->limit[r] - hn[r] > remaining) remaining = q->limit[r] - hn[r];
    }
    choir_op_download_async(s, hi, st.i32, (size_t)(B * ld + 2 * B) * sizeof(int32_t));
    choir_op_download_async(s, hsum, st.sum, (size_t)B * sizeof(double));
    if (choir_stream_sync(s, NULL) == 0)
        for (int64_t r = 0; r < B; r++) {
            memcpy(q->tokens[r], htok + r * ld, (size_t)hn[r] * sizeof(int32_t));
            q->n[r] = hn[r];
            q->sum_logprob[r] = hsum[r];
            /* Every token but the last was fed. */
            seqs[r]->n_past = hn[r] - 1;
        }
out:
    choir_stream_release(s, mark);
    choir_free(ones);
    rc = choir_stream_status(s, err);
    if (rc) {
        choir_stream_clear(s);
        choir_err_prefix(err, "whisper: greedy decoding");
    }
    return rc;
}
