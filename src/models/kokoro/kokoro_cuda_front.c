/* The costly parts of Kokoro's front on the CUDA backend: ALBERT (12 passes
 * of one shared layer, the largest share of the front's FLOPs) and the six
 * bidirectional LSTMs (duration encoder x3, duration LSTM, the prosody
 * predictor's shared LSTM over frames, the text encoder's), which on the CPU
 * are one GEMV per step and direction and do not spread over threads.
 *
 * ALBERT: its linear layers keep their storage on the device
 * (choir_cuda_weight_upload), the embeddings are summed and normalised on the
 * CPU exactly as there, and from map_in through bert_encoder every step runs
 * on the device (choir_cuda_linear, _attention, _layer_norm, _gelu_tanh).
 *
 * The weights of each LSTM are uploaded once, both directions stacked
 * (w_ih [2, 4H, In], w_hh [2, 4H, H], bias b_ih + b_hh [2, 4H], summed in
 * float as choir_lstm sums them), and choir_cuda_bilstm runs n sequences of
 * different lengths at once in one padded [n, T, In] block. The device memory
 * for inputs, outputs and scratch is one buffer grown to the largest call.
 * The caller (kk_gpu_bilstm in kokoro_cuda.c) holds the GPU's mutex. */
#include "choir/kokoro.h"

#ifdef CHOIR_HAVE_CUDA

#include <math.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/cuda_audio.h"
#include "models/kokoro/kokoro_internal.h"

#define KF_N_LSTM 6
#define KF_ALIGN 256

typedef struct kf_lstm {
    const kk_lstm *host; /* the model's LSTM this one mirrors (lookup key) */
    choir_cuda_buf w_ih; /* [2, 4H, In] */
    choir_cuda_buf w_hh; /* [2, 4H, H] */
    choir_cuda_buf bias; /* [2, 4H] */
} kf_lstm;

/* ALBERT's device weights: linears in their own storage, f32 vectors. */
typedef struct kf_albert {
    bool on;
    choir_cuda_weight map_in, q, k, v, dense, ffn, ffn_out, bert_encoder;
    choir_cuda_buf map_in_b, q_b, k_b, v_b, dense_b, ffn_b, ffn_out_b, bert_encoder_b;
    choir_cuda_buf att_ln_w, att_ln_b, full_ln_w, full_ln_b;
} kf_albert;

struct kg_front {
    kf_albert albert;
    kf_lstm lstm[KF_N_LSTM];
    int n_lstm;
    int64_t weight_bytes;
    choir_cuda_buf work; /* x, y, lens and scratch of one call; grown, never shrunk */
};

static int up_stacked(choir_cuda *cu, const float *const part[2], int64_t n, choir_cuda_buf *out,
                      choir_err *err) {
    size_t bytes = (size_t)n * sizeof(float);
    int rc = choir_cuda_buf_alloc(cu, 2 * bytes, out, err);
    for (int d = 0; d < 2 && !rc; d++) rc = choir_cuda_upload(cu, out, d * bytes, part[d], bytes, err);
    return rc;
}

static int up_lstm(kg_front *f, choir_cuda *cu, const kk_lstm *l, choir_err *err) {
    kf_lstm *k = &f->lstm[f->n_lstm++];
    const int64_t G = 4 * (int64_t)l->h;
    k->host = l;
    float *bias = choir_alloc(CHOIR_MEM_OTHER, 2 * (size_t)G * sizeof(float));
    if (!bias) return choir_err_set(err, CHOIR_ENOMEM, "kokoro gpu: out of host memory");
    for (int d = 0; d < 2; d++)
        for (int64_t i = 0; i < G; i++)
            bias[d * G + i] = (l->b_ih[d] ? l->b_ih[d][i] : 0.0f) + (l->b_hh[d] ? l->b_hh[d][i] : 0.0f);
    int rc = up_stacked(cu, l->w_ih, G * l->in, &k->w_ih, err);
    if (!rc) rc = up_stacked(cu, l->w_hh, G * l->h, &k->w_hh, err);
    if (!rc) rc = choir_cuda_buf_alloc(cu, 2 * (size_t)G * sizeof(float), &k->bias, err);
    if (!rc) rc = choir_cuda_upload(cu, &k->bias, 0, bias, 2 * (size_t)G * sizeof(float), err);
    choir_free(bias);
    f->weight_bytes += (int64_t)(k->w_ih.bytes + k->w_hh.bytes + k->bias.bytes);
    return rc;
}

static int up_vec(choir_cuda *cu, const float *host, int64_t n, choir_cuda_buf *out,
                  choir_err *err) {
    if (!host) return 0;
    int rc = choir_cuda_buf_alloc(cu, (size_t)n * sizeof(float), out, err);
    return rc ? rc : choir_cuda_upload(cu, out, 0, host, (size_t)n * sizeof(float), err);
}

static int up_linear(kg_front *f, choir_cuda *cu, const kk_linear *l, choir_cuda_weight *w,
                     choir_cuda_buf *b, choir_err *err) {
    int rc = choir_cuda_weight_upload(cu, &l->w, w, err);
    if (!rc) rc = up_vec(cu, l->b, l->w.rows, b, err);
    f->weight_bytes += (int64_t)(choir_cuda_weight_bytes(w) + b->bytes);
    return rc;
}

static int up_albert(kg_front *f, const choir_kokoro *m, choir_cuda *cu, choir_err *err) {
    kf_albert *a = &f->albert;
    const kk_linear *src[8] = {&m->map_in, &m->q,   &m->k,       &m->v,
                               &m->dense,  &m->ffn, &m->ffn_out, &m->bert_encoder};
    choir_cuda_weight *w[8] = {&a->map_in, &a->q,   &a->k,       &a->v,
                               &a->dense,  &a->ffn, &a->ffn_out, &a->bert_encoder};
    choir_cuda_buf *b[8] = {&a->map_in_b, &a->q_b,   &a->k_b,       &a->v_b,
                            &a->dense_b,  &a->ffn_b, &a->ffn_out_b, &a->bert_encoder_b};
    for (int i = 0; i < 8; i++)
        if (!src[i]->w.data) return 0; /* no ALBERT in this model: it stays on the CPU */
    int rc = 0;
    for (int i = 0; i < 8 && !rc; i++) rc = up_linear(f, cu, src[i], w[i], b[i], err);
    if (!rc) rc = up_vec(cu, m->att_ln_w, KK_BERT, &a->att_ln_w, err);
    if (!rc) rc = up_vec(cu, m->att_ln_b, KK_BERT, &a->att_ln_b, err);
    if (!rc) rc = up_vec(cu, m->full_ln_w, KK_BERT, &a->full_ln_w, err);
    if (!rc) rc = up_vec(cu, m->full_ln_b, KK_BERT, &a->full_ln_b, err);
    f->weight_bytes += 4 * KK_BERT * (int64_t)sizeof(float);
    a->on = rc == 0;
    return rc;
}

static void free_albert(kf_albert *a, choir_cuda *cu) {
    choir_cuda_weight *w[8] = {&a->map_in, &a->q,   &a->k,       &a->v,
                               &a->dense,  &a->ffn, &a->ffn_out, &a->bert_encoder};
    choir_cuda_buf *b[12] = {&a->map_in_b, &a->q_b,       &a->k_b,         &a->v_b,
                             &a->dense_b,  &a->ffn_b,     &a->ffn_out_b,   &a->bert_encoder_b,
                             &a->att_ln_w, &a->att_ln_b,  &a->full_ln_w,   &a->full_ln_b};
    for (int i = 0; i < 8; i++) choir_cuda_weight_free(cu, w[i]);
    for (int i = 0; i < 12; i++) choir_cuda_buf_free(cu, b[i]);
    a->on = false;
}

kg_front *kg_front_create(const choir_kokoro *m, choir_cuda *cu, choir_err *err) {
    kg_front *f = choir_calloc(CHOIR_MEM_WEIGHTS, 1, sizeof *f);
    if (!f) {
        choir_err_set(err, CHOIR_ENOMEM, "kokoro gpu: out of host memory");
        return NULL;
    }
    const kk_lstm *all[KF_N_LSTM] = {&m->dur_lstm[0], &m->dur_lstm[1], &m->dur_lstm[2],
                                     &m->pred_lstm,   &m->shared,      &m->te_lstm};
    int rc = up_albert(f, m, cu, err);
    for (int i = 0; i < KF_N_LSTM && !rc; i++) {
        /* a model built without a front (the GPU check's random decoder) has
         * no weights for some LSTMs: those stay on the CPU */
        if (!all[i]->w_ih[0] || !all[i]->w_ih[1] || !all[i]->w_hh[0] || !all[i]->w_hh[1] ||
            all[i]->h < 1)
            continue;
        rc = up_lstm(f, cu, all[i], err);
    }
    if (rc) {
        choir_err_prefix(err, "kokoro gpu: uploading the front's LSTMs");
        kg_front_free(f, cu);
        return NULL;
    }
    return f;
}

void kg_front_free(kg_front *f, choir_cuda *cu) {
    if (!f) return;
    free_albert(&f->albert, cu);
    for (int i = 0; i < f->n_lstm; i++) {
        choir_cuda_buf_free(cu, &f->lstm[i].w_ih);
        choir_cuda_buf_free(cu, &f->lstm[i].w_hh);
        choir_cuda_buf_free(cu, &f->lstm[i].bias);
    }
    choir_cuda_buf_free(cu, &f->work);
    choir_free(f);
}

int64_t kg_front_weight_bytes(const kg_front *f) { return f ? f->weight_bytes : 0; }

bool kg_front_has(const kg_front *f, const kk_lstm *l) {
    for (int i = 0; f && i < f->n_lstm; i++)
        if (f->lstm[i].host == l) return true;
    return false;
}

static size_t aligned(size_t bytes) { return (bytes + KF_ALIGN - 1) / KF_ALIGN * KF_ALIGN; }

int kg_front_bilstm(kg_front *f, choir_cuda *cu, const kk_lstm *l, int n, const float *const *x,
                    const int64_t *T, float *const *y, choir_err *err) {
    const kf_lstm *k = NULL;
    for (int i = 0; i < f->n_lstm; i++)
        if (f->lstm[i].host == l) k = &f->lstm[i];
    if (!k) return choir_err_set(err, CHOIR_EINVAL, "kokoro gpu: that LSTM is not on the device");
    const int64_t In = l->in, H = l->h, B = n;
    int64_t Tmax = 0;
    for (int b = 0; b < n; b++) {
        if (T[b] < 0 || !x[b] || !y[b])
            return choir_err_set(err, CHOIR_EINVAL, "kokoro gpu: LSTM piece %d: %lld steps or no data",
                                 b, (long long)T[b]);
        Tmax = T[b] > Tmax ? T[b] : Tmax;
    }
    if (Tmax < 1 || Tmax > INT32_MAX)
        return choir_err_set(err, CHOIR_EINVAL, "kokoro gpu: LSTM over %lld steps", (long long)Tmax);

    /* the work buffer: lens | x [B, Tmax, In] | y [B, Tmax, 2H] | scratch */
    const size_t o_x = aligned((size_t)B * sizeof(int32_t));
    const size_t o_y = o_x + aligned((size_t)(B * Tmax * In) * sizeof(float));
    const size_t o_s = o_y + aligned((size_t)(B * Tmax * 2 * H) * sizeof(float));
    const size_t need = o_s + (size_t)choir_cuda_bilstm_scratch_floats(B, Tmax, H) * sizeof(float);
    int rc = 0;
    if (f->work.bytes < need) {
        choir_cuda_buf_free(cu, &f->work);
        if ((rc = choir_cuda_buf_alloc(cu, need, &f->work, err))) return rc;
    }
    int32_t lens[64];
    int32_t *hl = n <= 64 ? lens : choir_alloc(CHOIR_MEM_OTHER, (size_t)n * sizeof *hl);
    if (!hl) return choir_err_set(err, CHOIR_ENOMEM, "kokoro gpu: out of host memory");
    for (int b = 0; b < n; b++) hl[b] = (int32_t)T[b];
    rc = choir_cuda_upload(cu, &f->work, 0, hl, (size_t)n * sizeof *hl, err);
    if (hl != lens) choir_free(hl);
    /* piece b's rows are contiguous in the padded block; its tail is never read */
    for (int b = 0; b < n && !rc; b++)
        rc = choir_cuda_upload(cu, &f->work, o_x + (size_t)(b * Tmax * In) * sizeof(float), x[b],
                               (size_t)(T[b] * In) * sizeof(float), err);
    char *base = f->work.ptr;
    if (!rc)
        rc = choir_cuda_bilstm(cu, (const float *)(base + o_x), B, Tmax, In, H, k->w_ih.ptr,
                               k->w_hh.ptr, k->bias.ptr, (const int32_t *)base, (float *)(base + o_s),
                               (float *)(base + o_y), err);
    for (int b = 0; b < n && !rc; b++)
        rc = choir_cuda_download(cu, y[b], &f->work, o_y + (size_t)(b * Tmax * 2 * H) * sizeof(float),
                                 (size_t)(T[b] * 2 * H) * sizeof(float), err);
    return rc;
}

bool kg_front_has_albert(const kg_front *f) { return f && f->albert.on; }

/* Grows the work buffer to `bytes` (contents are not kept). */
static int work_reserve(kg_front *f, choir_cuda *cu, size_t bytes, choir_err *err) {
    if (f->work.bytes >= bytes) return 0;
    choir_cuda_buf_free(cu, &f->work);
    return choir_cuda_buf_alloc(cu, bytes, &f->work, err);
}

/* ALBERT for n pieces at once. Every step but attention works on rows, so
 * the pieces' rows are stacked without padding ([R, .], R = sum of T[b]) and
 * each linear is one product over all of them; attention runs per piece on
 * its own rows (launches, not separate calls), so no piece sees another's
 * keys and no mask is needed. */
int kg_front_albert(kg_front *f, choir_cuda *cu, int n, const float *const *emb, const int64_t *T,
                    float *const *bert, float *const *d_en, choir_err *err) {
    const kf_albert *a = &f->albert;
    if (!a->on) return choir_err_set(err, CHOIR_EINVAL, "kokoro gpu: ALBERT is not on the device");
    int64_t R = 0;
    for (int b = 0; b < n; b++) {
        if (T[b] < 1 || !emb[b] || !bert[b] || !d_en[b])
            return choir_err_set(err, CHOIR_EINVAL, "kokoro gpu: ALBERT piece %d: %lld ids or no data",
                                 b, (long long)T[b]);
        R += T[b];
    }
    if (n < 1) return 0;
    /* e [R,128] | h, q, k, v, ctx, att [R,768] | ff [R,2048] | d_en [R,512] */
    const size_t n_e = aligned((size_t)(R * KK_BERT_EMB) * sizeof(float));
    const size_t n_h = aligned((size_t)(R * KK_BERT) * sizeof(float));
    const size_t n_ff = aligned((size_t)(R * KK_BERT_FF) * sizeof(float));
    const size_t n_d = aligned((size_t)(R * KK_HIDDEN) * sizeof(float));
    int rc = work_reserve(f, cu, n_e + 6 * n_h + n_ff + n_d, err);
    if (rc) return rc;
    char *p = f->work.ptr;
    float *e = (float *)p, *h = (float *)(p + n_e), *q = (float *)(p + n_e + n_h);
    float *k = (float *)(p + n_e + 2 * n_h), *v = (float *)(p + n_e + 3 * n_h);
    float *ctx = (float *)(p + n_e + 4 * n_h), *att = (float *)(p + n_e + 5 * n_h);
    float *ff = (float *)(p + n_e + 6 * n_h), *de = (float *)(p + n_e + 6 * n_h + n_ff);
#define KF_CK(call)                                                                                \
    do {                                                                                           \
        if ((rc = (call))) return rc;                                                              \
    } while (0)
    for (int b = 0, r0 = 0; b < n; r0 += (int)T[b], b++)
        KF_CK(choir_cuda_upload(cu, &f->work, (size_t)r0 * KK_BERT_EMB * sizeof(float), emb[b],
                                (size_t)(T[b] * KK_BERT_EMB) * sizeof(float), err));
    KF_CK(choir_cuda_linear(cu, e, R, &a->map_in, a->map_in_b.ptr, h, err));
    const int64_t dh = KK_BERT / KK_BERT_HEADS;
    for (int layer = 0; layer < KK_BERT_LAYERS; layer++) {
        KF_CK(choir_cuda_linear(cu, h, R, &a->q, a->q_b.ptr, q, err));
        KF_CK(choir_cuda_linear(cu, h, R, &a->k, a->k_b.ptr, k, err));
        KF_CK(choir_cuda_linear(cu, h, R, &a->v, a->v_b.ptr, v, err));
        for (int b = 0, r0 = 0; b < n; r0 += (int)T[b], b++) {
            const int64_t o = (int64_t)r0 * KK_BERT;
            KF_CK(choir_cuda_attention(cu, q + o, KK_BERT, k + o, KK_BERT, v + o, KK_BERT, ctx + o,
                                       KK_BERT, T[b], T[b], KK_BERT_HEADS, dh,
                                       1.0f / sqrtf((float)dh), NULL, false, err));
        }
        KF_CK(choir_cuda_linear(cu, ctx, R, &a->dense, a->dense_b.ptr, att, err));
        KF_CK(choir_cuda_add(cu, att, h, att, R * KK_BERT, err));
        KF_CK(choir_cuda_layer_norm(cu, att, att, R, KK_BERT, a->att_ln_w.ptr, a->att_ln_b.ptr,
                                    1e-12f, err));
        KF_CK(choir_cuda_linear(cu, att, R, &a->ffn, a->ffn_b.ptr, ff, err));
        KF_CK(choir_cuda_gelu_tanh(cu, ff, R * KK_BERT_FF, err));
        KF_CK(choir_cuda_linear(cu, ff, R, &a->ffn_out, a->ffn_out_b.ptr, h, err));
        KF_CK(choir_cuda_add(cu, h, att, h, R * KK_BERT, err));
        KF_CK(choir_cuda_layer_norm(cu, h, h, R, KK_BERT, a->full_ln_w.ptr, a->full_ln_b.ptr,
                                    1e-12f, err));
    }
    KF_CK(choir_cuda_linear(cu, h, R, &a->bert_encoder, a->bert_encoder_b.ptr, de, err));
    for (int b = 0, r0 = 0; b < n; r0 += (int)T[b], b++) {
        KF_CK(choir_cuda_download(cu, bert[b], &f->work, n_e + (size_t)r0 * KK_BERT * sizeof(float),
                                  (size_t)(T[b] * KK_BERT) * sizeof(float), err));
        KF_CK(choir_cuda_download(cu, d_en[b], &f->work,
                                  n_e + 6 * n_h + n_ff + (size_t)r0 * KK_HIDDEN * sizeof(float),
                                  (size_t)(T[b] * KK_HIDDEN) * sizeof(float), err));
    }
#undef KF_CK
    return 0;
}

#endif /* CHOIR_HAVE_CUDA */
