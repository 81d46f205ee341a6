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

int choir_whisper_decode_check(const choir_whisper *m, choir_whisper_seq *const *seqs, int n_seq,
                               const int32_t *tokens, const int *n_tokens, choir_err *err) {
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
        if (tokens[r] < 0 || tokens[r] >= m->dims.n_vocab)
            return choir_err_set(err, CHOIR_EINVAL, "whisper: token %d outside the vocabulary",
                                 (int)tokens[r]);
    return 0;
}

int choir_whisper_decode(const choir_whisper *m, choir_whisper_seq *const *seqs, int n_seq,
                         const int32_t *tokens, const int *n_tokens, bool all_positions,
                         float *logits, choir_err *err) {
    int rc = choir_whisper_decode_check(m, seqs, n_seq, tokens, n_tokens, err);
    if (rc) return rc;
    int64_t N = 0;
    for (int i = 0; i < n_seq; i++) N += n_tokens[i];
    if (N == 0) return 0;
#ifdef CHOIR_HAVE_CUDA
    if (m->gpu) return wg_decode(m->gpu, seqs, n_seq, tokens, n_tokens, all_positions, logits, err);
#endif
    return wh_decode_host(m, seqs, n_seq, tokens, n_tokens, all_positions, logits, NULL, err);
}
