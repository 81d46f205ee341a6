/* The costly parts of Kokoro's front written once over backend operations:
 * ALBERT (12 passes of one shared layer, then bert_encoder) and the six
 * bidirectional LSTMs (duration encoder x3, duration LSTM, text encoder,
 * the prosody predictor's shared LSTM over frames), for n pieces per call.
 *
 * ALBERT: every step but attention works on rows, so the pieces' rows are
 * stacked without padding ([R, .], R = sum of T[b]) and each linear is one
 * product over all of them; attention runs per piece on its own rows, so no
 * piece sees another's and none needs a mask. LSTMs: the pieces padded to
 * the longest [n, T, In], each with its own length (packed-sequence
 * semantics: a piece's result is the LSTM over it alone).
 *
 * Inputs and outputs are host memory; on the CPU backend they are staged in
 * the stream's (host) working memory, on a device backend uploaded. On the
 * CPU a call for one piece is bit for bit kokoro's single-piece computation
 * (the operations' CPU versions are its kernels.h calls). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/backend_vocoder.h"
#include "choir/pool.h"
#include "models/kokoro/kokoro_front_net.h"

/* CHOIR_KOKORO_PROFILE=1 on a device: the ALBERT and duration calls wait for
 * the stream between their phases and print one line of milliseconds each
 * (the waits cost a little; off, nothing waits). */
static bool profiling(choir_stream *s) {
    const char *e = getenv("CHOIR_KOKORO_PROFILE");
    return e && e[0] && strcmp(e, "0") != 0 && !choir_backend_is_host(choir_stream_backend(s));
}

static double tick(choir_stream *s, bool on) {
    if (!on) return 0.0;
    choir_stream_sync(s, NULL);
    return choir_now_s();
}

/* On a device: ALBERT's attention over all pieces in one operation
 * (choir_op_attention_ragged) and the text encoder's convolutions, norms
 * and activations over the padded batch instead of per piece. On unless
 * CHOIR_KOKORO_FRONT_BATCH=0 (H100, 7 Dec 2026: 32 pieces' front 177 ->
 * 161 ms, the text encoder 23.1 -> 8.5 ms); the CPU path never takes it. */
static bool front_batch(choir_stream *s) {
    const char *e = getenv("CHOIR_KOKORO_FRONT_BATCH");
    return !(e && strcmp(e, "0") == 0) && !choir_backend_is_host(choir_stream_backend(s));
}

typedef struct kf_lin {
    choir_weight w; /* backend, the checkpoint's storage */
    const float *b;
} kf_lin;

static const choir_bilstm_weights *lstm_of(const kk_fnet *f, const kk_lstm *l);

struct kk_fnet {
    const choir_kokoro *m;
    choir_backend *be;
    choir_backend_weights *ws;
    bool has_albert;
    kf_lin map_in, q, k, v, dense, ffn, ffn_out, bert_encoder;
    const float *att_ln_w, *att_ln_b, *full_ln_w, *full_ln_b; /* [768] */
    /* the text encoder's embedding and convolutions (has_text) */
    bool has_text;
    choir_weight te_emb;             /* [178, 512], the checkpoint's storage */
    choir_weight te_w[3];            /* [512, 512 x 5] f32 */
    const float *te_b[3], *te_ln_g[3], *te_ln_b[3];
    const kk_lstm *lstm_of[6]; /* the model's LSTMs (lookup keys) */
    choir_bilstm_weights lstm[6];
    int n_lstm;
};

static void put_lin(kk_fnet *f, const kk_linear *l, kf_lin *out) {
    choir_backend_weight_exact(f->ws, &l->w, &out->w);
    out->b = choir_backend_vec(f->ws, l->b, l->w.rows);
}

kk_fnet *kk_fnet_create(const choir_kokoro *m, choir_backend *be, choir_err *err) {
    kk_fnet *f = choir_calloc(CHOIR_MEM_WEIGHTS, 1, sizeof *f);
    if (!f) {
        choir_err_set(err, CHOIR_ENOMEM, "kokoro: out of memory for the front");
        return NULL;
    }
    f->m = m, f->be = be;
    if (!(f->ws = choir_backend_weights_create(be, err))) {
        choir_free(f);
        return NULL;
    }
    int rc = 0;
    f->has_albert = m->map_in.w.data && m->q.w.data && m->ffn.w.data && m->bert_encoder.w.data;
    if (f->has_albert) {
        put_lin(f, &m->map_in, &f->map_in);
        put_lin(f, &m->q, &f->q);
        put_lin(f, &m->k, &f->k);
        put_lin(f, &m->v, &f->v);
        put_lin(f, &m->dense, &f->dense);
        put_lin(f, &m->ffn, &f->ffn);
        put_lin(f, &m->ffn_out, &f->ffn_out);
        put_lin(f, &m->bert_encoder, &f->bert_encoder);
        f->att_ln_w = choir_backend_vec(f->ws, m->att_ln_w, KK_BERT);
        f->att_ln_b = choir_backend_vec(f->ws, m->att_ln_b, KK_BERT);
        f->full_ln_w = choir_backend_vec(f->ws, m->full_ln_w, KK_BERT);
        f->full_ln_b = choir_backend_vec(f->ws, m->full_ln_b, KK_BERT);
    }
    f->has_text = m->te_emb.w.data && m->te_lstm.w_ih[0];
    for (int i = 0; i < 3 && f->has_text; i++)
        f->has_text = m->te_cnn[i].w && m->te_cnn[i].cin == KK_HIDDEN &&
                      m->te_cnn[i].cout == KK_HIDDEN && m->te_cnn[i].k == 5;
    if (f->has_text) {
        choir_backend_weight_exact(f->ws, &m->te_emb.w, &f->te_emb);
        for (int i = 0; i < 3; i++) {
            const kk_conv *c = &m->te_cnn[i];
            choir_weight hw = choir_weight_f32(c->w, c->cout, (int64_t)c->cin * c->k);
            choir_backend_weight_exact(f->ws, &hw, &f->te_w[i]);
            f->te_b[i] = choir_backend_vec(f->ws, c->b, c->cout);
            f->te_ln_g[i] = choir_backend_vec(f->ws, m->te_ln_g[i], KK_HIDDEN);
            f->te_ln_b[i] = choir_backend_vec(f->ws, m->te_ln_b[i], KK_HIDDEN);
        }
    }
    const kk_lstm *all[6] = {&m->dur_lstm[0], &m->dur_lstm[1], &m->dur_lstm[2], &m->pred_lstm,
                             &m->shared,      &m->te_lstm};
    for (int i = 0; i < 6 && !rc; i++) {
        const kk_lstm *l = all[i];
        if (!l->w_ih[0] || !l->w_ih[1] || !l->w_hh[0] || !l->w_hh[1]) continue;
        rc = choir_backend_bilstm_weights(f->ws, be, l->w_ih, l->w_hh, l->b_ih, l->b_hh, l->in,
                                          l->h, &f->lstm[f->n_lstm]);
        f->lstm_of[f->n_lstm++] = l;
    }
    if (!rc) rc = choir_backend_weights_status(f->ws, err);
    else choir_err_set(err, rc, "kokoro: out of memory for the front's LSTMs");
    if (rc) {
        choir_err_prefix(err, "kokoro: front weights on %s", choir_backend_name(be));
        kk_fnet_free(f);
        return NULL;
    }
    return f;
}

void kk_fnet_free(kk_fnet *f) {
    if (!f) return;
    choir_backend_weights_free(f->ws);
    choir_free(f);
}

int64_t kk_fnet_weight_bytes(const kk_fnet *f) { return f ? choir_backend_weights_bytes(f->ws) : 0; }
bool kk_fnet_has_albert(const kk_fnet *f) { return f && f->has_albert; }
bool kk_fnet_has_text(const kk_fnet *f) { return f && f->has_text && lstm_of(f, &f->m->te_lstm); }

static const choir_bilstm_weights *lstm_of(const kk_fnet *f, const kk_lstm *l) {
    for (int i = 0; f && i < f->n_lstm; i++)
        if (f->lstm_of[i] == l) return &f->lstm[i];
    return NULL;
}
bool kk_fnet_has_lstm(const kk_fnet *f, const kk_lstm *l) { return lstm_of(f, l) != NULL; }

/* --- ALBERT ------------------------------------------------------------------ */

int64_t kk_fnet_albert_work_bytes(int64_t rows) {
    /* e [R, 128], h, q, k, v, ctx, a [R, 768], ff [R, 2048], d_en [R, 512],
     * plus each piece's alignment slack */
    return (rows * (128 + 6 * 768 + 2048 + 512) + 8192) * (int64_t)sizeof(float) +
           ((int64_t)1 << 16);
}

int kk_fnet_albert(const kk_fnet *f, choir_stream *s, int n, const float *const *emb,
                   const int64_t *T, float *const *bert, float *const *d_en, choir_err *err) {
    if (!f || !f->has_albert)
        return choir_err_set(err, CHOIR_EINVAL, "kokoro: the front has no ALBERT on this backend");
    int64_t R = 0;
    for (int b = 0; b < n; b++) {
        if (T[b] < 1 || !emb[b] || !d_en[b])
            return choir_err_set(err, CHOIR_EINVAL, "kokoro: ALBERT piece %d: %lld ids or no data",
                                 b, (long long)T[b]);
        R += T[b];
    }
    const bool host = choir_backend_is_host(choir_stream_backend(s));
    size_t mark = choir_stream_mark(s);
    float *e = choir_stream_floats(s, R * KK_BERT_EMB, "ALBERT embeddings"); /* [R, 128] */
    float *h = choir_stream_floats(s, R * KK_BERT, "ALBERT");                 /* [R, 768] */
    float *q = choir_stream_floats(s, R * KK_BERT, "ALBERT");
    float *k = choir_stream_floats(s, R * KK_BERT, "ALBERT");
    float *v = choir_stream_floats(s, R * KK_BERT, "ALBERT");
    float *ctx = choir_stream_floats(s, R * KK_BERT, "ALBERT");
    float *a = choir_stream_floats(s, R * KK_BERT, "ALBERT"); /* attention block output */
    float *ff = choir_stream_floats(s, R * KK_BERT_FF, "ALBERT"); /* [R, 2048] */
    float *de = choir_stream_floats(s, R * KK_HIDDEN, "ALBERT");  /* [R, 512] */
    /* with the switch: each piece's first row and length, for the ragged
     * attention (backend memory, [2, n]) */
    const bool ragged = front_batch(s) && R <= INT32_MAX;
    int32_t *ol = ragged ? choir_stream_alloc(s, 2 * (size_t)n * sizeof(int32_t), "ALBERT pieces")
                         : NULL;
    int32_t *ol_host = ragged ? choir_alloc(CHOIR_MEM_OTHER, 2 * (size_t)n * sizeof(int32_t)) : NULL;
    int64_t Tm = 0;
    int rc = choir_stream_status(s, NULL);
    const bool prof = profiling(s);
    double c0 = tick(s, prof), c1 = c0, c2 = c0, c3 = c0;
    if (!rc && ragged && !ol_host)
        rc = choir_stream_fail(s, CHOIR_ENOMEM, "kokoro: out of host memory");
    if (rc) goto done;
    for (int64_t b = 0, r = 0; ragged && b < n; r += T[b], b++) {
        ol_host[b] = (int32_t)r, ol_host[n + b] = (int32_t)T[b];
        Tm = T[b] > Tm ? T[b] : Tm;
    }
    if (ragged) choir_op_upload(s, ol, ol_host, 2 * (size_t)n * sizeof(int32_t));
    for (int64_t b = 0, r = 0; b < n; r += T[b], b++) {
        size_t bytes = (size_t)(T[b] * KK_BERT_EMB) * sizeof(float);
        if (host) memcpy(e + r * KK_BERT_EMB, emb[b], bytes);
        else choir_op_upload(s, e + r * KK_BERT_EMB, emb[b], bytes);
    }
    c1 = tick(s, prof);
    choir_op_linear(s, e, R, &f->map_in.w, f->map_in.b, h);
    const int64_t dh = KK_BERT / KK_BERT_HEADS;
    const choir_attn at = {.n_head = KK_BERT_HEADS, .Dh = dh, .scale = 1.0f / sqrtf((float)dh)};
    for (int layer = 0; layer < KK_BERT_LAYERS; layer++) {
        choir_op_linear(s, h, R, &f->q.w, f->q.b, q);
        choir_op_linear(s, h, R, &f->k.w, f->k.b, k);
        choir_op_linear(s, h, R, &f->v.w, f->v.b, v);
        if (ragged)
            choir_op_attention_ragged(s, n, q, k, v, KK_BERT, ol, ol + n, Tm, ctx, &at);
        for (int64_t b = 0, o = 0; b < n && !ragged; o += T[b] * KK_BERT, b++)
            choir_op_attention(s, q + o, KK_BERT, k + o, KK_BERT, v + o, KK_BERT, ctx + o, KK_BERT,
                               T[b], T[b], &at, NULL);
        choir_op_linear(s, ctx, R, &f->dense.w, f->dense.b, a);
        choir_op_add(s, a, h, a, R * KK_BERT);
        choir_op_layer_norm(s, a, a, R, KK_BERT, f->att_ln_w, f->att_ln_b, 1e-12f);
        choir_op_linear(s, a, R, &f->ffn.w, f->ffn.b, ff);
        choir_op_act(s, CHOIR_ACT_GELU_TANH, ff, R * KK_BERT_FF, 0.0f);
        choir_op_linear(s, ff, R, &f->ffn_out.w, f->ffn_out.b, h);
        choir_op_add(s, h, a, h, R * KK_BERT);
        choir_op_layer_norm(s, h, h, R, KK_BERT, f->full_ln_w, f->full_ln_b, 1e-12f);
    }
    choir_op_linear(s, h, R, &f->bert_encoder.w, f->bert_encoder.b, de);
    c2 = tick(s, prof);
    for (int64_t b = 0, r = 0; b < n; r += T[b], b++) {
        if (bert[b]) /* NULL: not wanted (only traced) */
            choir_op_download(s, bert[b], h + r * KK_BERT,
                              (size_t)(T[b] * KK_BERT) * sizeof(float));
        choir_op_download(s, d_en[b], de + r * KK_HIDDEN, (size_t)(T[b] * KK_HIDDEN) * sizeof(float));
    }
    c3 = tick(s, prof);
    if (prof)
        fprintf(stderr,
                "kokoro ALBERT: %d pieces, %lld ids: upload %.1f, 12 layers + bert_encoder %.1f, "
                "download %.1f ms%s\n",
                n, (long long)R, 1e3 * (c1 - c0), 1e3 * (c2 - c1), 1e3 * (c3 - c2),
                ragged ? " (attention batched)" : "");
done:
    rc = choir_stream_sync(s, err);
    choir_stream_clear(s);
    choir_stream_release(s, mark);
    choir_free(ol_host);
    return rc;
}

/* --- LSTMs ------------------------------------------------------------------- */

int64_t kk_fnet_bilstm_work_bytes(int n, int64_t T, int64_t In, int64_t H, bool host) {
    /* x [n, T, In], y [n, T, 2H], lengths; a device kernel's n T 8H + 2 n H */
    int64_t floats = (int64_t)n * T * (In + 2 * H) + n + 1024;
    if (!host) floats += (int64_t)n * T * 8 * H + 2 * (int64_t)n * H;
    return floats * (int64_t)sizeof(float) + ((int64_t)1 << 12);
}

/* The LSTM over n pieces of host input x[b], or of the backend's x_dev
 * [n, keep_Tm, In] (x NULL); its output [n, Tm, 2H] goes to the host rows
 * y[b], or stays in the backend's `keep` (y NULL, Tm given). */
static int bilstm(const kk_fnet *f, choir_stream *s, const kk_lstm *l, int n,
                  const float *const *x, const float *x_dev, const int64_t *T, float *const *y,
                  int64_t keep_Tm, float *keep, choir_err *err) {
    const choir_bilstm_weights *w = lstm_of(f, l);
    if (!w) return choir_err_set(err, CHOIR_EINVAL, "kokoro: that LSTM is not on this backend");
    if (!x && (!x_dev || !keep))
        return choir_err_set(err, CHOIR_EINVAL, "kokoro: LSTM input on the backend without output kept");
    int64_t Tm = 0;
    for (int b = 0; b < n; b++) {
        if (T[b] < 0 || T[b] > INT32_MAX || (T[b] && ((x && !x[b]) || (!keep && !y[b]))))
            return choir_err_set(err, CHOIR_EINVAL, "kokoro: LSTM piece %d: %lld steps or no data",
                                 b, (long long)T[b]);
        Tm = T[b] > Tm ? T[b] : Tm;
    }
    if (keep && keep_Tm < Tm)
        return choir_err_set(err, CHOIR_EINVAL, "kokoro: LSTM output of %lld steps kept in %lld",
                             (long long)Tm, (long long)keep_Tm);
    if (keep) Tm = keep_Tm;
    if (n < 1 || Tm == 0) return 0;
    const int64_t In = w->In, H = w->H;
    const bool host = choir_backend_is_host(choir_stream_backend(s));
    size_t mark = choir_stream_mark(s);
    int32_t *lens = choir_stream_alloc(s, (size_t)n * sizeof(int32_t), "LSTM lengths");
    float *xd = x ? choir_stream_floats(s, n * Tm * In, "LSTM input") /* [n, Tm, In] */
                  : (float *)x_dev;
    float *yd = keep ? keep : choir_stream_floats(s, n * Tm * 2 * H, "LSTM output"); /* [n, Tm, 2H] */
    int32_t *lens_host = host ? lens : choir_alloc(CHOIR_MEM_OTHER, (size_t)n * sizeof(int32_t));
    int rc = choir_stream_status(s, NULL);
    if (!rc && !lens_host) rc = choir_stream_fail(s, CHOIR_ENOMEM, "kokoro: out of host memory");
    if (rc) goto done;
    for (int64_t b = 0; b < n; b++) {
        lens_host[b] = (int32_t)T[b];
        /* rows past a piece's length are not read: no padding to write */
        size_t bytes = (size_t)(T[b] * In) * sizeof(float);
        if (!T[b] || !x) continue;
        if (host) memcpy(xd + b * Tm * In, x[b], bytes);
        else choir_op_upload(s, xd + b * Tm * In, x[b], bytes);
    }
    if (!host) choir_op_upload(s, lens, lens_host, (size_t)n * sizeof(int32_t));
    choir_op_bilstm_w(s, xd, n, Tm, w, lens, yd);
    for (int64_t b = 0; b < n && !keep; b++)
        if (T[b])
            choir_op_download(s, y[b], yd + b * Tm * 2 * H, (size_t)(T[b] * 2 * H) * sizeof(float));
done:
    rc = choir_stream_sync(s, err);
    choir_stream_clear(s);
    choir_stream_release(s, mark);
    if (!host) choir_free(lens_host);
    return rc;
}

int kk_fnet_bilstm(const kk_fnet *f, choir_stream *s, const kk_lstm *l, int n,
                   const float *const *x, const int64_t *T, float *const *y, choir_err *err) {
    return bilstm(f, s, l, n, x, NULL, T, y, 0, NULL, err);
}

int kk_fnet_bilstm_keep(const kk_fnet *f, choir_stream *s, const kk_lstm *l, int n,
                        const float *const *x, const int64_t *T, int64_t Tm, float *y,
                        choir_err *err) {
    if (!y) return choir_err_set(err, CHOIR_EINVAL, "kokoro: no LSTM output");
    return bilstm(f, s, l, n, x, NULL, T, NULL, Tm, y, err);
}

int kk_fnet_bilstm_dev(const kk_fnet *f, choir_stream *s, const kk_lstm *l, int n,
                       const float *x, const int64_t *T, int64_t Tm, float *y, choir_err *err) {
    if (!x || !y) return choir_err_set(err, CHOIR_EINVAL, "kokoro: no LSTM input or output");
    return bilstm(f, s, l, n, NULL, x, T, NULL, Tm, y, err);
}

/* --- the duration encoder and the duration LSTM -------------------------------- */

int64_t kk_fnet_duration_work_bytes(int n, int64_t T) {
    /* x [n, T, 640], y [n, T, 512], the LSTM's device scratch n T 8 H + 2 n H
     * at H 256, the three norms' gamma / beta [3, n, 1024], the lengths */
    int64_t floats = (int64_t)n * T * (640 + 512 + 8 * 256) + 2 * (int64_t)n * 256 +
                     3 * (int64_t)n * 1024 + n + 1024;
    return floats * (int64_t)sizeof(float) + ((int64_t)1 << 14);
}

int kk_fnet_duration(const kk_fnet *f, choir_stream *s, int n, float *const *d, const int64_t *T,
                     const float *const *norm_gb, float *const *y, choir_err *err) {
    const kk_lstm *ls[4] = {&f->m->dur_lstm[0], &f->m->dur_lstm[1], &f->m->dur_lstm[2],
                            &f->m->pred_lstm};
    const choir_bilstm_weights *w[4];
    for (int i = 0; i < 4; i++)
        if (!(w[i] = lstm_of(f, ls[i])) || w[i]->In != KK_HIDDEN + KK_STYLE ||
            2 * w[i]->H != KK_HIDDEN)
            return choir_err_set(err, CHOIR_EINVAL,
                                 "kokoro: the duration encoder is not on this backend");
    int64_t Tm = 0;
    for (int b = 0; b < n; b++) {
        if (T[b] < 1 || T[b] > INT32_MAX || !d[b] || !y[b] || !norm_gb[b])
            return choir_err_set(err, CHOIR_EINVAL, "kokoro: duration piece %d: %lld ids or no data",
                                 b, (long long)T[b]);
        Tm = T[b] > Tm ? T[b] : Tm;
    }
    if (n < 1) return 0;
    const int64_t C = KK_HIDDEN, Cd = KK_HIDDEN + KK_STYLE, NG = 2 * KK_HIDDEN;
    const bool host = choir_backend_is_host(choir_stream_backend(s));
    size_t mark = choir_stream_mark(s);
    int32_t *lens = choir_stream_alloc(s, (size_t)n * sizeof(int32_t), "LSTM lengths");
    float *xd = choir_stream_floats(s, n * Tm * Cd, "duration encoder"); /* [n, Tm, 640] */
    float *yd = choir_stream_floats(s, n * Tm * C, "duration encoder");  /* [n, Tm, 512] */
    float *gb = choir_stream_floats(s, 3 * n * NG, "duration norms");    /* [n, 3, 1024] */
    int32_t *lens_host = host ? lens : choir_alloc(CHOIR_MEM_OTHER, (size_t)n * sizeof(int32_t));
    int rc = choir_stream_status(s, NULL);
    const bool prof = profiling(s);
    double c[5] = {tick(s, prof)};
    if (!rc && !lens_host) rc = choir_stream_fail(s, CHOIR_ENOMEM, "kokoro: out of host memory");
    if (rc) goto done;
    for (int64_t b = 0; b < n; b++) {
        lens_host[b] = (int32_t)T[b];
        size_t bytes = (size_t)(T[b] * Cd) * sizeof(float), gbytes = 3 * NG * sizeof(float);
        if (host) {
            memcpy(xd + b * Tm * Cd, d[b], bytes);
            memcpy(gb + b * 3 * NG, norm_gb[b], gbytes);
        } else {
            choir_op_upload(s, xd + b * Tm * Cd, d[b], bytes);
            choir_op_upload(s, gb + b * 3 * NG, norm_gb[b], gbytes);
        }
    }
    if (!host) choir_op_upload(s, lens, lens_host, (size_t)n * sizeof(int32_t));
    /* 3 x (LSTM, AdaLayerNorm into x's first 512 columns; the style columns
     * stay as uploaded), then the duration LSTM over the last x */
    c[1] = tick(s, prof);
    double norms = 0.0;
    for (int l = 0; l < 3; l++) {
        choir_op_bilstm_w(s, xd, n, Tm, w[l], lens, yd);
        const double n0 = tick(s, prof);
        for (int64_t b = 0; b < n; b++) {
            const float *g = gb + (b * 3 + l) * NG;
            choir_op_layer_norm(s, yd + b * Tm * C, yd + b * Tm * C, T[b], C, g, g + C, 1e-5f);
            choir_op_copy_rows(s, xd + b * Tm * Cd, Cd, yd + b * Tm * C, C, T[b], C);
        }
        norms += tick(s, prof) - n0;
    }
    choir_op_bilstm_w(s, xd, n, Tm, w[3], lens, yd);
    c[2] = tick(s, prof);
    for (int64_t b = 0; b < n; b++) {
        choir_op_download(s, d[b], xd + b * Tm * Cd, (size_t)(T[b] * Cd) * sizeof(float));
        choir_op_download(s, y[b], yd + b * Tm * C, (size_t)(T[b] * C) * sizeof(float));
    }
    c[3] = tick(s, prof);
    if (prof)
        fprintf(stderr,
                "kokoro duration call: %d pieces of up to %lld ids: upload %.1f, 4 LSTMs %.1f, "
                "3 norms %.1f, download %.1f ms\n",
                n, (long long)Tm, 1e3 * (c[1] - c[0]), 1e3 * (c[2] - c[1] - norms), 1e3 * norms,
                1e3 * (c[3] - c[2]));
done:
    rc = choir_stream_sync(s, err);
    choir_stream_clear(s);
    choir_stream_release(s, mark);
    if (!host) choir_free(lens_host);
    return rc;
}

/* --- the text encoder -------------------------------------------------------- */

int64_t kk_fnet_text_work_bytes(int n, int64_t T) {
    /* ids, the LSTM's x [n, T, 512] and y [n, T, 512] (+ its device scratch,
     * n T 8 H + 2 n H at H 256), one piece's e / x / y [T, 512]; with
     * CHOIR_KOKORO_FRONT_BATCH the convolutions' x / y [n, 512, T] instead */
    int64_t floats = (int64_t)n * T * (512 + 512 + 8 * 256) + 2 * (int64_t)n * 256 +
                     3 * T * KK_HIDDEN + 2 * (int64_t)n * T * KK_HIDDEN + 2 * (int64_t)n * T +
                     2048;
    return floats * (int64_t)sizeof(float) + ((int64_t)1 << 14);
}

int kk_fnet_text_encoder(const kk_fnet *f, choir_stream *s, int n, const int32_t *const *ids,
                         const int64_t *T, float *const *y, choir_err *err) {
    const choir_bilstm_weights *w = f ? lstm_of(f, &f->m->te_lstm) : NULL;
    if (!f || !f->has_text || !w)
        return choir_err_set(err, CHOIR_EINVAL, "kokoro: the text encoder is not on this backend");
    int64_t Tm = 0, R = 0;
    for (int b = 0; b < n; b++) {
        if (T[b] < 1 || T[b] > INT32_MAX || !ids[b] || !y[b])
            return choir_err_set(err, CHOIR_EINVAL, "kokoro: text encoder piece %d: %lld ids",
                                 b, (long long)T[b]);
        Tm = T[b] > Tm ? T[b] : Tm, R += T[b];
    }
    if (n < 1) return 0;
    const int64_t C = KK_HIDDEN, H = w->H;
    const bool host = choir_backend_is_host(choir_stream_backend(s));
    /* CHOIR_KOKORO_FRONT_BATCH: the ids padded to [n, Tm] (ids[R] stays the
     * stacked ids' room), the convolutions over the padded batch */
    const bool batched = front_batch(s);
    const int64_t NI = batched ? n * Tm : R; /* ids staged */
    const int64_t CW = batched ? n : 1;      /* items of the convolutions' buffers */
    size_t mark = choir_stream_mark(s);
    int32_t *id_d = choir_stream_alloc(s, (size_t)(NI + 2 * n) * sizeof(int32_t), "text ids");
    float *xd = choir_stream_floats(s, n * Tm * C, "text encoder");  /* [n, Tm, 512] LSTM in */
    float *yd = choir_stream_floats(s, n * Tm * 2 * H, "text encoder"); /* [n, Tm, 2H] */
    float *e = batched ? NULL : choir_stream_floats(s, Tm * C, "text encoder"); /* [T, 512] */
    float *cx = choir_stream_floats(s, CW * C * Tm, "text encoder"); /* [CW, 512, T] */
    float *cy = choir_stream_floats(s, CW * C * Tm, "text encoder"); /* [CW, 512, T] */
    int32_t *lens = id_d ? id_d + NI + n : NULL;
    int32_t *stage = host ? id_d : choir_alloc(CHOIR_MEM_OTHER, (size_t)(NI + 2 * n) * sizeof(int32_t));
    int rc = choir_stream_status(s, NULL);
    if (!rc && !stage) rc = choir_stream_fail(s, CHOIR_ENOMEM, "kokoro: out of host memory");
    if (rc) goto done;
    if (batched) memset(stage, 0, (size_t)NI * sizeof(int32_t)); /* padding: id 0 */
    for (int64_t b = 0, r = 0; b < n; r += T[b], b++) {
        memcpy(stage + (batched ? b * Tm : r), ids[b], (size_t)T[b] * sizeof(int32_t));
        stage[NI + n + b] = (int32_t)T[b];
    }
    if (!host) choir_op_upload(s, id_d, stage, (size_t)(NI + 2 * n) * sizeof(int32_t));
    if (batched) {
        /* The whole batch at once, padded to Tm: embedding rows [n, Tm, 512]
         * (padding id 0), each conv's input channels-first with zeros past
         * each piece's length (what the piece's own zero padding reads) and
         * its output zeroed there, the norm and LeakyReLU over all rows
         * (padded rows never reach the LSTM's output): 14 launches instead
         * of 14 a piece. */
        choir_op_rows_gather(s, &f->te_emb, id_d, n * Tm, xd);
        choir_op_transpose_lens(s, xd, n, Tm, C, lens, cx);
        for (int i = 0; i < 3; i++) {
            choir_op_conv1d_lens(s, cx, n, C, Tm, &f->te_w[i], f->te_b[i], C, 5, 1, 2, 1, lens,
                                 cy);
            choir_op_transpose_lens(s, cy, n, C, Tm, NULL, xd);
            choir_op_layer_norm(s, xd, xd, n * Tm, C, f->te_ln_g[i], f->te_ln_b[i], 1e-5f);
            choir_op_act(s, CHOIR_ACT_LEAKY_RELU, xd, n * Tm * C, 0.2f);
            if (i < 2) choir_op_transpose_lens(s, xd, n, Tm, C, lens, cx);
        }
    }
    /* Per piece, at its own length (so a piece in a batch is what it is
     * alone, bit for bit): embedding, then 3 x (conv k5, LayerNorm over
     * channels, LeakyReLU 0.2), into the LSTM's padded input. */
    for (int64_t b = 0, r = 0; b < n && !batched; r += T[b], b++) {
        const int64_t Tb = T[b];
        float *tc = xd + b * Tm * C; /* [Tb, 512] */
        choir_op_rows_gather(s, &f->te_emb, id_d + r, Tb, e);
        choir_op_transpose(s, e, Tb, C, NULL, cx);
        for (int i = 0; i < 3; i++) {
            choir_op_conv1d_lens(s, cx, 1, C, Tb, &f->te_w[i], f->te_b[i], C, 5, 1, 2, 1, NULL,
                                 cy);
            choir_op_transpose(s, cy, C, Tb, NULL, tc);
            choir_op_layer_norm(s, tc, tc, Tb, C, f->te_ln_g[i], f->te_ln_b[i], 1e-5f);
            choir_op_act(s, CHOIR_ACT_LEAKY_RELU, tc, Tb * C, 0.2f);
            if (i < 2) choir_op_transpose(s, tc, Tb, C, NULL, cx);
        }
    }
    choir_op_bilstm_w(s, xd, n, Tm, w, lens, yd);
    for (int64_t b = 0; b < n; b++)
        choir_op_download(s, y[b], yd + b * Tm * 2 * H, (size_t)(T[b] * 2 * H) * sizeof(float));
done:
    rc = choir_stream_sync(s, err);
    choir_stream_clear(s);
    choir_stream_release(s, mark);
    if (!host) choir_free(stage);
    return rc;
}
