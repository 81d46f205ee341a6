/* The Whisper network: the caches, and the batched decoder (the encoder and
 * the cross-attention K/V are whisper_enc.c).
 *
 * Shapes follow the spec (../shared/specs/whisper.md §3): d = d_model,
 * H = heads, Dh = d / H, A = n_audio_ctx (1500), C = n_text_ctx (448).
 * Every block is pre-LN: x += f(LN(x)). */
#include <math.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/kernels.h"
#include "models/whisper/whisper_internal.h"

#define WH_LN_EPS 1e-5f

static int wh_oom(choir_err *err, const char *what) {
    return choir_err_set(err, CHOIR_ENOMEM, "whisper: out of memory for %s", what);
}

int choir_whisper_encode_cross(const choir_whisper *m, const float *mel, int n, float *enc,
                               choir_whisper_cross **cross, choir_err *err) {
    if (n < 0) return choir_err_set(err, CHOIR_EINVAL, "whisper: negative window count");
    for (int i = 0; i < n; i++) cross[i] = NULL;
#ifdef CHOIR_HAVE_CUDA
    if (m->gpu) return wg_encode_cross(m->gpu, mel, n, cross, err);
#endif
    size_t enc_one = (size_t)m->dims.n_audio_ctx * (size_t)m->dims.d_model;
    float *own = NULL;
    if (!enc && n > 0 &&
        !(enc = own = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)n * enc_one * sizeof(float))))
        return wh_oom(err, "encoder output");
    int rc = choir_whisper_encode(m, mel, n, enc, err);
    for (int i = 0; i < n && !rc; i++)
        if (!(cross[i] = choir_whisper_cross_create(m, enc + (size_t)i * enc_one, err)))
            rc = err && err->code ? err->code : CHOIR_ENOMEM;
    choir_free(own);
    return rc;
}

/* --- cross-attention K/V ------------------------------------------------ */

choir_whisper_cross *choir_whisper_cross_create(const choir_whisper *m, const float *enc_out,
                                                choir_err *err) {
    const choir_whisper_dims *D = &m->dims;
#ifdef CHOIR_HAVE_CUDA
    if (m->gpu) return wg_cross_create(m->gpu, enc_out, err);
#endif
    choir_whisper_cross *c = choir_calloc(CHOIR_MEM_CACHE, 1, sizeof *c);
    if (!c) {
        wh_oom(err, "cross-attention cache");
        return NULL;
    }
    c->n_layer = D->n_text_layer;
    c->n_ctx = D->n_audio_ctx;
    c->d = D->d_model;
    size_t per = (size_t)c->n_ctx * (size_t)c->d;
    c->k = choir_alloc(CHOIR_MEM_CACHE, per * (size_t)c->n_layer * sizeof(float));
    c->v = choir_alloc(CHOIR_MEM_CACHE, per * (size_t)c->n_layer * sizeof(float));
    if (!c->k || !c->v) {
        choir_whisper_cross_free(c);
        wh_oom(err, "cross-attention cache");
        return NULL;
    }
    if (wh_cross_kv_host(m, enc_out, c->k, c->v, err)) {
        choir_whisper_cross_free(c);
        return NULL;
    }
    return c;
}

void choir_whisper_cross_free(choir_whisper_cross *c) {
    if (!c) return;
#ifdef CHOIR_HAVE_CUDA
    if (c->gpu) {
        wg_cross_free(c);
        return;
    }
#endif
    choir_free(c->k);
    choir_free(c->v);
    choir_free(c);
}

/* --- per-sequence state --------------------------------------------------- */

choir_whisper_seq *choir_whisper_seq_create(const choir_whisper *m, int capacity, choir_err *err) {
    const choir_whisper_dims *D = &m->dims;
    choir_whisper_seq *s = choir_calloc(CHOIR_MEM_CACHE, 1, sizeof *s);
    if (!s) {
        wh_oom(err, "decoder state");
        return NULL;
    }
    s->n_layer = D->n_text_layer;
    s->n_ctx = capacity > 0 && capacity < D->n_text_ctx ? capacity : D->n_text_ctx;
    s->d = D->d_model;
#ifdef CHOIR_HAVE_CUDA
    if (m->gpu) {
        if (wg_seq_init(m->gpu, s, err)) {
            choir_free(s);
            return NULL;
        }
        return s;
    }
#endif
    size_t n = (size_t)s->n_layer * (size_t)s->n_ctx * (size_t)s->d;
    s->k = choir_alloc(CHOIR_MEM_CACHE, n * sizeof(float));
    s->v = choir_alloc(CHOIR_MEM_CACHE, n * sizeof(float));
    if (!s->k || !s->v) {
        choir_whisper_seq_free(s);
        wh_oom(err, "decoder KV cache");
        return NULL;
    }
    return s;
}

void choir_whisper_seq_free(choir_whisper_seq *s) {
    if (!s) return;
#ifdef CHOIR_HAVE_CUDA
    if (s->gpu) wg_seq_release(s);
#endif
    choir_free(s->k);
    choir_free(s->v);
    choir_free(s);
}

void choir_whisper_seq_reset(choir_whisper_seq *s, const choir_whisper_cross *cross) {
    s->n_past = 0;
    s->cross = cross;
}

void choir_whisper_seq_copy(choir_whisper_seq *dst, const choir_whisper_seq *src, int n_keep) {
    if (dst == src) {
        dst->n_past = n_keep;
        return;
    }
    if (n_keep > dst->n_ctx) n_keep = dst->n_ctx;
#ifdef CHOIR_HAVE_CUDA
    if (dst->gpu) {
        wg_seq_copy(dst, src, n_keep);
        dst->n_past = n_keep;
        dst->cross = src->cross;
        return;
    }
#endif
    size_t sp = (size_t)src->n_ctx * (size_t)src->d, dp = (size_t)dst->n_ctx * (size_t)dst->d;
    size_t row = (size_t)n_keep * (size_t)src->d;
    for (int l = 0; l < src->n_layer; l++) {
        memcpy(dst->k + l * dp, src->k + l * sp, row * sizeof(float));
        memcpy(dst->v + l * dp, src->v + l * sp, row * sizeof(float));
    }
    dst->n_past = n_keep;
    dst->cross = src->cross;
}

int choir_whisper_seq_len(const choir_whisper_seq *s) { return s->n_past; }

void choir_whisper_seq_truncate(choir_whisper_seq *s, int n) {
    if (n >= 0 && n < s->n_past) s->n_past = n;
}

/* --- decoder --------------------------------------------------------------- */

int choir_whisper_decode(const choir_whisper *m, choir_whisper_seq *const *seqs, int n_seq,
                         const int32_t *tokens, const int *n_tokens, bool all_positions,
                         float *logits, choir_err *err) {
    const choir_whisper_dims *D = &m->dims;
    int64_t d = D->d_model, ffn = D->ffn_dim, A = D->n_audio_ctx;
    int64_t Dh = d / D->n_head;
    float scale = 1.0f / sqrtf((float)Dh);
    int64_t N = 0;
    for (int i = 0; i < n_seq; i++) {
        if (n_tokens[i] <= 0)
            return choir_err_set(err, CHOIR_EINVAL, "whisper: sequence %d has no new tokens", i);
        if (!seqs[i]->cross)
            return choir_err_set(err, CHOIR_EINVAL, "whisper: sequence %d has no window", i);
        if (seqs[i]->n_past + n_tokens[i] > seqs[i]->n_ctx)
            return choir_err_set(err, CHOIR_ETOOBIG,
                                 "whisper: sequence %d would hold %d tokens (capacity %d)", i,
                                 seqs[i]->n_past + n_tokens[i], seqs[i]->n_ctx);
        N += n_tokens[i];
    }
    for (int64_t r = 0; r < N; r++)
        if (tokens[r] < 0 || tokens[r] >= D->n_vocab)
            return choir_err_set(err, CHOIR_EINVAL, "whisper: token %d outside the vocabulary",
                                 (int)tokens[r]);
    if (N == 0) return 0;
#ifdef CHOIR_HAVE_CUDA
    if (m->gpu) return wg_decode(m->gpu, seqs, n_seq, tokens, n_tokens, all_positions, logits, err);
#endif

    /* x, h, q, k, v, att [N, d]; hid [N, ffn]. */
    float *ws = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)(N * (6 * d + ffn)) * sizeof(float));
    if (!ws) return wh_oom(err, "decoder activations");
    float *x = ws, *h = x + N * d, *q = h + N * d, *k = q + N * d, *v = k + N * d;
    float *att = v + N * d, *hid = att + N * d;

    for (int i = 0, r = 0; i < n_seq; i++)
        for (int j = 0; j < n_tokens[i]; j++, r++) {
            choir_weight_row_f32(&m->tok_emb, tokens[r], x + r * d);
            const float *p = m->dec_pos + (int64_t)(seqs[i]->n_past + j) * d;
            for (int64_t c = 0; c < d; c++) x[r * d + c] += p[c];
        }

    for (int l = 0; l < D->n_text_layer; l++) {
        const wh_block *blk = &m->dec[l];
        /* Causal self-attention over each sequence's cache plus its new rows. */
        choir_layer_norm(x, h, N, d, blk->attn_ln_g, blk->attn_ln_b, WH_LN_EPS);
        choir_linear(h, N, &blk->attn.q, blk->attn.bq, q);
        choir_linear(h, N, &blk->attn.k, NULL, k);
        choir_linear(h, N, &blk->attn.v, blk->attn.bv, v);
        for (int i = 0, r = 0; i < n_seq; i++) {
            choir_whisper_seq *s = seqs[i];
            int n = n_tokens[i];
            size_t lo = (size_t)l * (size_t)s->n_ctx * (size_t)d;
            float *kc = s->k + lo, *vc = s->v + lo;
            memcpy(kc + (int64_t)s->n_past * d, k + (int64_t)r * d, (size_t)(n * d) * sizeof(float));
            memcpy(vc + (int64_t)s->n_past * d, v + (int64_t)r * d, (size_t)(n * d) * sizeof(float));
            choir_attention(q + (int64_t)r * d, d, kc, d, vc, d, att + (int64_t)r * d, d, n,
                            s->n_past + n, D->n_head, Dh, scale, NULL, true);
            r += n;
        }
        choir_linear(att, N, &blk->attn.o, blk->attn.bo, h);
        choir_add(x, h, x, N * d);

        /* Cross-attention to the sequence's window. */
        choir_layer_norm(x, h, N, d, blk->cross_ln_g, blk->cross_ln_b, WH_LN_EPS);
        choir_linear(h, N, &blk->cross.q, blk->cross.bq, q);
        for (int i = 0, r = 0; i < n_seq; i++) {
            const choir_whisper_cross *cr = seqs[i]->cross;
            size_t off = (size_t)l * (size_t)(A * d);
            choir_attention(q + (int64_t)r * d, d, cr->k + off, d, cr->v + off, d,
                            att + (int64_t)r * d, d, n_tokens[i], A, D->n_head, Dh, scale, NULL,
                            false);
            r += n_tokens[i];
        }
        choir_linear(att, N, &blk->cross.o, blk->cross.bo, h);
        choir_add(x, h, x, N * d);

        choir_layer_norm(x, h, N, d, blk->mlp_ln_g, blk->mlp_ln_b, WH_LN_EPS);
        choir_linear(h, N, &blk->fc1, blk->fc1_b, hid);
        choir_gelu_erf(hid, N * ffn);
        choir_linear(hid, N, &blk->fc2, blk->fc2_b, h);
        choir_add(x, h, x, N * d);
    }
    for (int i = 0; i < n_seq; i++) seqs[i]->n_past += n_tokens[i];

    /* Only the rows whose logits are wanted go through the final LN and the tied
     * output projection (the [V, d] product dominates a decoder step). */
    int64_t n_out = all_positions ? N : n_seq;
    if (!all_positions)
        for (int i = 0, r = 0; i < n_seq; i++) {
            r += n_tokens[i];
            memmove(x + (int64_t)i * d, x + (int64_t)(r - 1) * d, (size_t)d * sizeof(float));
        }
    choir_layer_norm(x, x, n_out, d, m->dec_ln_g, m->dec_ln_b, WH_LN_EPS);
    choir_linear(x, n_out, &m->tok_emb, NULL, logits);
    choir_free(ws);
    return 0;
}
