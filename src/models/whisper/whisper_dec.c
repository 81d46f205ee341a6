/* The Whisper decoder written once over the backend operations
 * (choir/backend.h): a batch of sequences, each with its new tokens after its
 * cached positions, through causal self-attention over its KV cache,
 * cross-attention to its window's K/V and the MLP, then the final LN and the
 * tied output projection for the rows whose logits are wanted. The CPU runs
 * it through the CPU backend on the model's own weights. Also the
 * cross-attention logits of chosen heads a pass can give (word timestamps:
 * choir_whisper_cross_qk, whisper_qk.c).
 *
 * Shapes: d = d_model, N = the batch's new tokens, A = n_audio_ctx, C =
 * n_text_ctx, V = n_vocab. */
#include <math.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/kernels.h"
#include "models/whisper/whisper_internal.h"

#define WH_LN_EPS 1e-5f
#define WH_ALIGN_SLACK (16 * 256)

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

size_t wh_dec_work_bytes(const choir_whisper_dims *D, int64_t N) {
    /* ids and positions [N] int32; x, h, q, k, v, att [N, d]; hid [N, ffn]. */
    return (size_t)(2 * N) * sizeof(int32_t) +
           (size_t)(N * (6 * (int64_t)D->d_model + D->ffn_dim)) * sizeof(float) + WH_ALIGN_SLACK;
}

size_t wh_dec_scratch_bytes(const wh_net *w, const choir_whisper_dims *D, int64_t N) {
    int64_t keys = D->n_audio_ctx > D->n_text_ctx ? D->n_audio_ctx : D->n_text_ctx;
    size_t s = choir_attention_scratch_bytes(N, keys);
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

/* Pre-softmax cross-attention logits of the heads of layer l (those of `qk`
 * whose layer is l) for sequence 0's n rows q [n, d] against its window's
 * keys k [A, d]: out row block j of head i at qk->qk + (i n + j) A. */
static void cross_qk_rows(choir_stream *s, const wh_qk_req *qk, int l, const choir_whisper_dims *D,
                          const float *q, int64_t n, const float *k) {
    int64_t d = D->d_model, Dh = d / D->n_head, A = D->n_audio_ctx;
    float scale = 1.0f / sqrtf((float)Dh);
    for (int i = 0; i < qk->n_heads; i++) {
        if (qk->layer[i] != l) continue;
        int64_t h = qk->head[i];
        choir_op_gemm(s, false, true, n, A, Dh, scale, q + h * Dh, d, k + h * Dh, d, 0.0f,
                      qk->qk + (int64_t)i * n * A, A);
    }
}

/* One decoder block on the residual stream x [N, d]. */
static void dec_block(choir_stream *s, const wh_block *blk, int l, const choir_whisper_dims *D,
                      choir_whisper_seq *const *seqs, int n_seq, const int *n_tokens, int64_t N,
                      float *x, float *h, float *q, float *k, float *v, float *att, float *hid,
                      const wh_qk_req *qk) {
    int64_t d = D->d_model, A = D->n_audio_ctx;
    choir_attn self = {.n_head = D->n_head,
                       .Dh = d / D->n_head,
                       .scale = 1.0f / sqrtf((float)(d / D->n_head)),
                       .causal = true};
    choir_attn cross = self;
    cross.causal = false;

    /* Causal self-attention over each sequence's cache plus its new rows,
     * which are appended to the cache first. */
    choir_op_layer_norm(s, x, h, N, d, blk->attn_ln_g, blk->attn_ln_b, WH_LN_EPS);
    choir_op_linear(s, h, N, &blk->attn.q, blk->attn.bq, q);
    choir_op_linear(s, h, N, &blk->attn.k, NULL, k);
    choir_op_linear(s, h, N, &blk->attn.v, blk->attn.bv, v);
    for (int i = 0, r = 0; i < n_seq; r += n_tokens[i], i++) {
        choir_whisper_seq *sq = seqs[i];
        int64_t n = n_tokens[i], lo = (int64_t)l * sq->n_ctx * d;
        float *kc = sq->k + lo, *vc = sq->v + lo;
        choir_op_copy(s, kc + (int64_t)sq->n_past * d, k + r * d, (size_t)(n * d) * sizeof(float));
        choir_op_copy(s, vc + (int64_t)sq->n_past * d, v + r * d, (size_t)(n * d) * sizeof(float));
        choir_op_attention(s, q + r * d, d, kc, d, vc, d, att + r * d, d, n, sq->n_past + n, &self,
                           NULL);
    }
    choir_op_linear(s, att, N, &blk->attn.o, blk->attn.bo, h);
    choir_op_add(s, x, h, x, N * d);

    /* Cross-attention to each sequence's window. */
    choir_op_layer_norm(s, x, h, N, d, blk->cross_ln_g, blk->cross_ln_b, WH_LN_EPS);
    choir_op_linear(s, h, N, &blk->cross.q, blk->cross.bq, q);
    for (int i = 0, r = 0; i < n_seq; r += n_tokens[i], i++) {
        const choir_whisper_cross *cr = seqs[i]->cross;
        int64_t off = (int64_t)l * A * d;
        choir_op_attention(s, q + r * d, d, cr->k + off, d, cr->v + off, d, att + r * d, d,
                           n_tokens[i], A, &cross, NULL);
        if (qk && i == 0) cross_qk_rows(s, qk, l, D, q, n_tokens[0], cr->k + off);
    }
    choir_op_linear(s, att, N, &blk->cross.o, blk->cross.bo, h);
    choir_op_add(s, x, h, x, N * d);

    /* MLP. */
    choir_op_layer_norm(s, x, h, N, d, blk->mlp_ln_g, blk->mlp_ln_b, WH_LN_EPS);
    choir_op_linear(s, h, N, &blk->fc1, blk->fc1_b, hid);
    choir_op_act(s, CHOIR_ACT_GELU_ERF, hid, N * D->ffn_dim, 0.0f);
    choir_op_linear(s, hid, N, &blk->fc2, blk->fc2_b, h);
    choir_op_add(s, x, h, x, N * d);
}

int wh_decode_run(choir_stream *s, const wh_net *w, const choir_whisper_dims *D,
                  choir_whisper_seq *const *seqs, int n_seq, const int32_t *tokens,
                  const int *n_tokens, bool all_positions, float *logits, const wh_qk_req *qk) {
    int64_t d = D->d_model, N = 0;
    for (int i = 0; i < n_seq; i++) N += n_tokens[i];
    /* The ids and positions are written into backend memory from here and
     * the caches are host arrays (choir_whisper_seq): the CPU for now. */
    if (!choir_backend_is_host(w->be))
        return choir_stream_fail(s, CHOIR_EUNSUPPORTED,
                                 "whisper: the decoder over backend operations runs on the CPU "
                                 "backend only so far");
    size_t mark = choir_stream_mark(s);
    int32_t *ids = choir_stream_alloc(s, (size_t)N * sizeof(int32_t), "whisper token ids");
    int32_t *pos = choir_stream_alloc(s, (size_t)N * sizeof(int32_t), "whisper positions");
    float *x = choir_stream_floats(s, N * d, "whisper decoder rows");
    float *h = choir_stream_floats(s, N * d, "whisper decoder normalised rows");
    float *q = choir_stream_floats(s, N * d, "whisper decoder queries");
    float *k = choir_stream_floats(s, N * d, "whisper decoder keys");
    float *v = choir_stream_floats(s, N * d, "whisper decoder values");
    float *att = choir_stream_floats(s, N * d, "whisper decoder attention");
    float *hid = choir_stream_floats(s, N * D->ffn_dim, "whisper decoder MLP hidden");
    if (!hid) goto out;

    /* Token embeddings plus each row's position. */
    memcpy(ids, tokens, (size_t)N * sizeof(int32_t));
    for (int i = 0, r = 0; i < n_seq; i++)
        for (int j = 0; j < n_tokens[i]; j++, r++) pos[r] = seqs[i]->n_past + j;
    choir_weight pos_table = choir_weight_f32(w->dec_pos, D->n_text_ctx, d);
    choir_op_rows_gather(s, &w->tok_emb, ids, N, x);
    choir_op_rows_gather(s, &pos_table, pos, N, h);
    choir_op_add(s, x, h, x, N * d);

    for (int l = 0; l < D->n_text_layer; l++)
        dec_block(s, &w->dec[l], l, D, seqs, n_seq, n_tokens, N, x, h, q, k, v, att, hid, qk);
    if (choir_stream_status(s, NULL)) goto out;
    for (int i = 0; i < n_seq; i++) seqs[i]->n_past += n_tokens[i];

    /* Only the rows whose logits are wanted go through the final LN and the
     * tied output projection (the [V, d] product dominates a decoder step). */
    if (logits) {
        int64_t n_out = all_positions ? N : n_seq;
        if (!all_positions)
            for (int i = 0, r = 0; i < n_seq; i++) {
                r += n_tokens[i];
                if (r - 1 != i)
                    choir_op_copy(s, x + (int64_t)i * d, x + (int64_t)(r - 1) * d,
                                  (size_t)d * sizeof(float));
            }
        choir_op_layer_norm(s, x, x, n_out, d, w->dec_ln_g, w->dec_ln_b, WH_LN_EPS);
        choir_op_linear(s, x, n_out, &w->tok_emb, NULL, logits);
    }
out:
    choir_stream_release(s, mark);
    return choir_stream_status(s, NULL);
}

int wh_decode_host(const choir_whisper *m, choir_whisper_seq *const *seqs, int n_seq,
                   const int32_t *tokens, const int *n_tokens, bool all_positions, float *logits,
                   const wh_qk_req *qk, choir_err *err) {
    int64_t N = 0;
    for (int i = 0; i < n_seq; i++) N += n_tokens[i];
    choir_stream *s = choir_stream_create(m->net.be, err);
    if (!s) return err && err->code ? err->code : CHOIR_ENOMEM;
    int rc = choir_stream_reserve(s, wh_dec_work_bytes(&m->dims, N),
                                  wh_dec_scratch_bytes(&m->net, &m->dims, N), err);
    if (!rc && wh_decode_run(s, &m->net, &m->dims, seqs, n_seq, tokens, n_tokens, all_positions,
                             logits, qk))
        rc = choir_stream_status(s, err);
    choir_stream_free(s);
    return rc;
}
