/* The Whisper network's memory: where it runs (the CPU, or an attached
 * device: whisper_cuda.c), the caches of windows and sequences, and the
 * decoder's entry point (the encoder and the cross-attention K/V are
 * whisper_enc.c, the decoder's layers whisper_dec.c).
 *
 * On the CPU a call makes its own stream (several engine workers run one
 * model at once) and each cache is an array of its own, unless the call
 * runs in a batch arena (a batch stream: whisper_internal.h), which then
 * holds the caches and serves every call of the batch; on a device the
 * calls share the device's streams (one user at a time) and the caches are
 * slots of its pools. */
#include <string.h>

#include "choir/alloc.h"
#include "models/whisper/whisper_internal.h"

static int wh_oom(choir_err *err, const char *what) {
    return choir_err_set(err, CHOIR_ENOMEM, "whisper: out of memory for %s", what);
}

/* --- placement -------------------------------------------------------------- */

const wh_net *wh_active_net(const choir_whisper *m) {
#ifdef CHOIR_HAVE_CUDA
    if (m->gpu) return wg_net(m->gpu);
#endif
    return &m->net;
}

choir_stream *wh_stream_open(const choir_whisper *m, size_t work, size_t scratch, choir_err *err) {
#ifdef CHOIR_HAVE_CUDA
    if (m->gpu) return wg_stream_open(m->gpu, work, err);
#endif
    choir_stream *s = choir_stream_create(m->net.be, err);
    if (s && choir_stream_reserve(s, work, scratch, err)) {
        choir_stream_free(s);
        return NULL;
    }
    return s;
}

int wh_stream_done(const choir_whisper *m, choir_stream *s, int rc, choir_err *err) {
#ifdef CHOIR_HAVE_CUDA
    if (m->gpu) return wg_stream_done(m->gpu, rc, err);
#endif
    choir_err e = {0};
    int st = choir_stream_sync(s, &e);
    if (!rc && st) {
        rc = st;
        if (err) *err = e;
    }
    choir_stream_free(s);
    return rc;
}

/* --- cross-attention caches -------------------------------------------------- */

/* A cache header and its K, V arrays of n elements of dtype dt each, carved
 * from the batch stream: NULL (the stream's error set) when its arena is
 * full. */
static void *wh_carve_cache(choir_stream *bs, size_t header, size_t n, choir_dtype dt, void **k,
                            void **v, const char *what) {
    void *h = choir_stream_alloc(bs, header, what);
    *k = choir_stream_alloc(bs, n * wh_kv_size(dt), what);
    *v = choir_stream_alloc(bs, n * wh_kv_size(dt), what);
    if (!h || !*k || !*v) return NULL;
    memset(h, 0, header);
    return h;
}

choir_whisper_cross *wh_cross_new(const choir_whisper *m, choir_stream *bs, choir_err *err) {
    const choir_whisper_dims *D = &m->dims;
    if (bs && !m->gpu) {
        size_t n = (size_t)D->n_audio_ctx * (size_t)D->d_model * (size_t)D->n_text_layer;
        void *k, *v;
        choir_whisper_cross *c =
            wh_carve_cache(bs, sizeof *c, n, m->cache_kv, &k, &v, "whisper cross-attention cache");
        if (!c) {
            choir_stream_status(bs, err);
            return NULL;
        }
        *c = (choir_whisper_cross){.n_layer = D->n_text_layer, .n_ctx = D->n_audio_ctx,
                                   .d = D->d_model, .k = k, .v = v, .kv = m->cache_kv,
                                   .bs = bs};
        return c;
    }
    choir_whisper_cross *c = choir_calloc(CHOIR_MEM_CACHE, 1, sizeof *c);
    if (!c) {
        wh_oom(err, "cross-attention cache");
        return NULL;
    }
    c->n_layer = D->n_text_layer;
    c->n_ctx = D->n_audio_ctx;
    c->d = D->d_model;
#ifdef CHOIR_HAVE_CUDA
    if (m->gpu) {
        if (wg_cross_init(m->gpu, c, err)) {
            choir_free(c);
            return NULL;
        }
        return c;
    }
#endif
    /* The model's cache dtype (wh_cpu_cache_dtype): 16-bit for 16-bit
     * weights, f32 for f32 ones (whose word timestamps' cross-attention
     * logits test_whisper_cross_qk holds to 2e-5; f16 keys move them by
     * 3e-4). */
    c->kv = m->cache_kv;
    size_t n = (size_t)c->n_ctx * (size_t)c->d * (size_t)c->n_layer;
    c->k = choir_alloc(CHOIR_MEM_CACHE, n * wh_kv_size(c->kv));
    c->v = choir_alloc(CHOIR_MEM_CACHE, n * wh_kv_size(c->kv));
    if (!c->k || !c->v) {
        choir_whisper_cross_free(c);
        wh_oom(err, "cross-attention cache");
        return NULL;
    }
    return c;
}

void choir_whisper_cross_free(choir_whisper_cross *c) {
    if (!c || c->bs) return; /* the batch stream's: released with its scope */
#ifdef CHOIR_HAVE_CUDA
    if (c->pool) {
        wg_slot_release(c->pool, c->slot);
        choir_free(c);
        return;
    }
#endif
    choir_free(c->k);
    choir_free(c->v);
    choir_free(c);
}

/* --- per-sequence state --------------------------------------------------- */

choir_whisper_seq *choir_whisper_seq_create(const choir_whisper *m, int capacity, choir_err *err) {
    return wh_seq_new(m, capacity, NULL, err);
}

choir_whisper_seq *wh_seq_new(const choir_whisper *m, int capacity, choir_stream *bs,
                              choir_err *err) {
    const choir_whisper_dims *D = &m->dims;
    int n_ctx = capacity > 0 && capacity < D->n_text_ctx ? capacity : D->n_text_ctx;
    if (bs && !m->gpu) {
        size_t n = (size_t)D->n_text_layer * (size_t)n_ctx * (size_t)D->d_model;
        void *k, *v;
        choir_whisper_seq *s =
            wh_carve_cache(bs, sizeof *s, n, m->cache_kv, &k, &v, "whisper decoder KV cache");
        if (!s) {
            choir_stream_status(bs, err);
            return NULL;
        }
        *s = (choir_whisper_seq){.n_layer = D->n_text_layer, .n_ctx = n_ctx, .positions = n_ctx,
                                 .d = D->d_model, .k = k, .v = v, .kv = m->cache_kv, .bs = bs};
        return s;
    }
    choir_whisper_seq *s = choir_calloc(CHOIR_MEM_CACHE, 1, sizeof *s);
    if (!s) {
        wh_oom(err, "decoder state");
        return NULL;
    }
    s->n_layer = D->n_text_layer;
    s->n_ctx = n_ctx;
    s->positions = s->n_ctx;
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
    s->kv = m->cache_kv;
    s->k = choir_alloc(CHOIR_MEM_CACHE, n * wh_kv_size(s->kv));
    s->v = choir_alloc(CHOIR_MEM_CACHE, n * wh_kv_size(s->kv));
    if (!s->k || !s->v) {
        choir_whisper_seq_free(s);
        wh_oom(err, "decoder KV cache");
        return NULL;
    }
    return s;
}

void choir_whisper_seq_free(choir_whisper_seq *s) {
    if (!s || s->bs) return; /* the batch stream's: released with its scope */
#ifdef CHOIR_HAVE_CUDA
    if (s->pool) {
        wg_slot_release(s->pool, s->slot);
        choir_free(s);
        return;
    }
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
    if (dst->gpu || src->gpu) {
        wg_seq_copy(dst->gpu ? dst->gpu : src->gpu, dst, src, n_keep);
        dst->n_past = n_keep;
        dst->cross = src->cross;
        return;
    }
#endif
    int64_t sp = (int64_t)src->positions * src->d, dp = (int64_t)dst->positions * dst->d;
    size_t row = (size_t)n_keep * (size_t)src->d * wh_kv_size(src->kv);
    for (int l = 0; l < src->n_layer; l++) {
        memcpy(wh_kv_at(dst->k, dst->kv, l * dp), wh_kv_at(src->k, src->kv, l * sp), row);
        memcpy(wh_kv_at(dst->v, dst->kv, l * dp), wh_kv_at(src->v, src->kv, l * sp), row);
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
        if (seqs[i]->gpu != m->gpu || seqs[i]->cross->gpu != m->gpu)
            return choir_err_set(err, CHOIR_EINVAL,
                                 "whisper: sequence %d or its window was made for the %s", i,
                                 m->gpu ? "CPU" : "GPU");
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
    if (m->gpu) {
        wh_dec_rt *rt = wg_dec_rt(m->gpu, N, logits ? (all_positions ? N : n_seq) : 0, 0, err);
        if (!rt) return err && err->code ? err->code : CHOIR_ENOMEM;
        return wh_decode_run(rt, wg_net(m->gpu), &m->dims, seqs, n_seq, tokens, n_tokens,
                             all_positions, logits, NULL, err);
    }
#endif
    return wh_decode_host(m, seqs, n_seq, tokens, n_tokens, all_positions, logits, NULL, err);
}

/* --- batch memory ------------------------------------------------------------ */

size_t wh_batch_scratch_bytes(const choir_whisper *m, int n_windows, int G) {
    const choir_whisper_dims *D = &m->dims;
    const wh_net *w = &m->net;
    int64_t nw = n_windows > 0 ? n_windows : 1, nb = nw < w->enc_windows ? nw : w->enc_windows;
    /* Decoder rows of one call: a prefill feeds each window's start sequence
     * (a prompt of at most n_text_ctx / 2 - 1 tokens, sot_prev, sot,
     * language, task, notimestamps), a step one token per hypothesis, a
     * word-timestamp pass one window's text (at most n_text_ctx). */
    int64_t prefill = nw * (D->n_text_ctx / 2 + 4), steps = nw * (G > 0 ? G : 1);
    int64_t N = prefill > steps ? prefill : steps;
    if (N < D->n_text_ctx) N = D->n_text_ctx;
    size_t s = wh_enc_scratch_bytes(w, D, nb), c = wh_cross_scratch_bytes(w, D),
           d = wh_dec_scratch_bytes(w, D, N, m->cache_kv);
    if (c > s) s = c;
    return d > s ? d : s;
}
