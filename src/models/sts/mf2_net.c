/* The MossFormer2 mask network (spec §6), time-major [T, C] throughout.
 *
 * Reading order: choir_mf2_mask (top level, §6.1) -> flash_layer (§6.3,
 * §6.4) and fsmn_block (§6.5), 24 times. All activations of one call come
 * from one piece of the caller's arena planned from T (mf2_mask_bytes); the
 * layers do not allocate. */
#include <math.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/arena.h"
#include "choir/kernels.h"
#include "mf2_internal.h"

/* Activation buffers for one pass over T frames. */
typedef struct mf2_work {
    int64_t T;
    float *h0;     /* [T, 512] encoder output (the skip around the stack) */
    float *h;      /* [T, 512] running state */
    float *shift;  /* [T, 512] token-shifted input of a FLASH layer */
    float *norm;   /* [T, 1024] normalised FFConvM input */
    float *pre;    /* [T, 2048] FFConvM linear output before the ConvModule */
    float *hidden; /* [T, 2048] v | u */
    float *qk;     /* [T, 128] */
    float *q4;     /* [4, T, 128] quad_q, lin_q, quad_k, lin_k */
    float *att_v;  /* [T, 1024] */
    float *att_u;  /* [T, 1024] */
    float *gate;   /* [T, 1024] */
    float *proj;   /* [T, 512] */
    float *kv;     /* [128, 1024] linear-attention summary */
    float *sim;    /* [256, 256] in-group similarities */
} mf2_work;

static int64_t work_floats(int64_t T) {
    return T * (4 * CHOIR_MF2_DIM + 1024 + 2 * MF2_HIDDEN + MF2_QK * 5 + 3 * MF2_VU + CHOIR_MF2_DIM) +
           MF2_QK * MF2_VU + MF2_GROUP * MF2_GROUP;
}

int64_t mf2_mask_bytes(int64_t T) { return work_floats(T) * (int64_t)sizeof(float) + CHOIR_ALIGN; }

int64_t choir_mf2_segment_bytes(int64_t samples) {
    if (samples < CHOIR_MF2_WIN) samples = CHOIR_MF2_WIN;
    return mf2_pass_bytes(samples) + mf2_outside_bytes(samples);
}

int64_t mf2_outside_bytes(int64_t samples) {
    /* choir_stft's 256-frame staging block and frame input (per call), the
     * iSTFT's window envelope and bins */
    return (int64_t)sizeof(float) * (256 * MF2_FBANK_BINS * 2 + MF2_FBANK_FFT + samples + 2 * CHOIR_MF2_BINS) +
           64 * 1024;
}

int64_t mf2_pass_bytes(int64_t samples) {
    if (samples < CHOIR_MF2_WIN) samples = CHOIR_MF2_WIN;
    int64_t T = choir_mf2_frames(samples);
    /* features and mask live through the pass; the front end's, the
     * network's and the resynthesis' buffers one after the other */
    int64_t live = (T * (CHOIR_MF2_FEATS + CHOIR_MF2_BINS)) * (int64_t)sizeof(float) + 2 * CHOIR_ALIGN;
    int64_t stage = mf2_features_bytes();
    if (mf2_mask_bytes(T) > stage) stage = mf2_mask_bytes(T);
    if (mf2_apply_bytes(samples, T) > stage) stage = mf2_apply_bytes(samples, T);
    return live + stage;
}

static int work_init(mf2_work *w, int64_t T, choir_arena *work) {
    float *base = choir_arena_alloc(work, (size_t)work_floats(T) * sizeof(float));
    if (!base) return CHOIR_ENOMEM;
    w->T = T;
    float *p = base;
#define TAKE(field, n) (w->field = p, p += (n))
    TAKE(h0, T * CHOIR_MF2_DIM);
    TAKE(h, T * CHOIR_MF2_DIM);
    TAKE(shift, T * CHOIR_MF2_DIM);
    TAKE(proj, T * CHOIR_MF2_DIM);
    TAKE(norm, T * 1024);
    TAKE(pre, T * MF2_HIDDEN);
    TAKE(hidden, T * MF2_HIDDEN);
    TAKE(qk, T * MF2_QK);
    TAKE(q4, 4 * T * MF2_QK);
    TAKE(att_v, T * MF2_VU);
    TAKE(att_u, T * MF2_VU);
    TAKE(gate, T * MF2_VU);
    TAKE(kv, MF2_QK * MF2_VU);
    TAKE(sim, MF2_GROUP * MF2_GROUP);
#undef TAKE
    return 0;
}

/* GroupNorm with one group: statistics over all T * C values of x [T, C],
 * then the per-channel affine. In place. */
static void group_norm_all(float *x, int64_t T, int64_t C, const float *w, const float *b, double eps) {
    double sum = 0, sq = 0;
    const int64_t n = T * C;
    for (int64_t i = 0; i < n; i++) sum += x[i];
    double mean = sum / (double)n;
    for (int64_t i = 0; i < n; i++) {
        double d = x[i] - mean;
        sq += d * d;
    }
    double inv = 1.0 / sqrt(sq / (double)n + eps);
    for (int64_t t = 0; t < T; t++)
        for (int64_t c = 0; c < C; c++) {
            float *v = &x[t * C + c];
            *v = (float)((*v - mean) * inv) * w[c] + b[c];
        }
}

static void prelu(float *x, int64_t n, float a) {
    for (int64_t i = 0; i < n; i++)
        if (x[i] < 0) x[i] *= a;
}

/* y[t, c] += w[c] * x[t, c] over c. In blocks of 8 with a fixed inner trip
 * count, so -O2's cheap vectorizer turns each block into one FMA. */
static void fma_row(float *restrict y, const float *restrict w, const float *restrict x, int64_t C) {
    int64_t c = 0;
    for (; c + 8 <= C; c += 8)
        for (int l = 0; l < 8; l++) y[c + l] += w[c + l] * x[c + l];
    for (; c < C; c++) y[c] += w[c] * x[c];
}

/* y[t, c] = x[t, c] + sum_k w[k, c] x[t + k - K/2, c] (zero padding). */
static void depthwise_residual(const float *x, int64_t T, int64_t C, const float *w, int K, float *y) {
    const int P = K / 2;
    for (int64_t t = 0; t < T; t++) {
        float *yr = y + t * C;
        memcpy(yr, x + t * C, (size_t)C * sizeof(float));
        int k0 = t - P < 0 ? (int)(P - t) : 0;
        int k1 = t - P + K > T ? (int)(T - t + P) : K;
        for (int k = k0; k < k1; k++) fma_row(yr, w + (int64_t)k * C, x + (t + k - P) * C, C);
    }
}

/* FFConvM: norm -> Linear -> SiLU -> x + depthwise conv. `out` [T, dout]
 * must not alias `in`. */
static void ffconvm(mf2_work *w, const mf2_ffconvm *f, const float *in, int64_t din, int64_t dout,
                    float *out) {
    const int64_t T = w->T;
    if (f->ln_w) {
        choir_layer_norm(in, w->norm, T, din, f->ln_w, f->ln_b, 1e-5f);
    } else {
        const float rs = 1.0f / sqrtf((float)din);
        for (int64_t t = 0; t < T; t++) {
            const float *xr = in + t * din;
            float *yr = w->norm + t * din;
            double ss = 0;
            for (int64_t c = 0; c < din; c++) ss += (double)xr[c] * xr[c];
            float nrm = (float)sqrt(ss) * rs;
            float k = f->scale_g / (nrm > 1e-5f ? nrm : 1e-5f);
            for (int64_t c = 0; c < din; c++) yr[c] = xr[c] * k;
        }
    }
    choir_linear(w->norm, T, &f->lin, f->lin_b, w->pre);
    choir_silu(w->pre, T * dout);
    depthwise_residual(w->pre, T, dout, f->dw, MF2_CONVK, out);
}

/* Rotary on the first 32 of 128 dims, interleaved pairs, positions 0..T-1. */
static void rotary(float *a, int64_t T, const float *freq) {
    for (int64_t t = 0; t < T; t++) {
        float *r = a + t * MF2_QK;
        for (int i = 0; i < MF2_ROT / 2; i++) {
            /* The angle is a float32 product in the reference. */
            float th = (float)t * freq[i];
            float c = (float)cos((double)th), s = (float)sin((double)th);
            float x0 = r[2 * i], x1 = r[2 * i + 1];
            r[2 * i] = x0 * c - x1 * s;
            r[2 * i + 1] = x1 * c + x0 * s;
        }
    }
}

static void flash_layer(const choir_mf2 *m, const mf2_flash *L, mf2_work *w) {
    const int64_t T = w->T, D = CHOIR_MF2_DIM;
    /* Token shift: the first half of the channels comes from the previous frame. */
    for (int64_t t = 0; t < T; t++) {
        float *dst = w->shift + t * D;
        if (t == 0) memset(dst, 0, (size_t)(D / 2) * sizeof(float));
        else memcpy(dst, w->h + (t - 1) * D, (size_t)(D / 2) * sizeof(float));
        memcpy(dst + D / 2, w->h + t * D + D / 2, (size_t)(D / 2) * sizeof(float));
    }
    ffconvm(w, &L->to_hidden, w->shift, D, MF2_HIDDEN, w->hidden);
    ffconvm(w, &L->to_qk, w->shift, D, MF2_QK, w->qk);
    for (int hd = 0; hd < 4; hd++) {
        float *q = w->q4 + (int64_t)hd * T * MF2_QK;
        const float *ga = L->gamma + hd * MF2_QK, *be = L->beta + hd * MF2_QK;
        for (int64_t t = 0; t < T; t++)
            for (int e = 0; e < MF2_QK; e++) q[t * MF2_QK + e] = w->qk[t * MF2_QK + e] * ga[e] + be[e];
        rotary(q, T, m->rot_freq);
    }
    const float *quad_q = w->q4, *lin_q = w->q4 + T * MF2_QK;
    const float *quad_k = w->q4 + 2 * T * MF2_QK, *lin_k = w->q4 + 3 * T * MF2_QK;
    const float *v = w->hidden, *u = w->hidden + MF2_VU;

    /* Global linear attention: (lin_k^T v / T) summarises the whole segment. */
    const float invT = 1.0f / (float)T;
    choir_gemm_f32(true, false, MF2_QK, MF2_VU, T, invT, lin_k, MF2_QK, v, MF2_HIDDEN, 0.0f, w->kv, MF2_VU);
    choir_gemm_f32(false, false, T, MF2_VU, MF2_QK, 1.0f, lin_q, MF2_QK, w->kv, MF2_VU, 0.0f, w->att_v, MF2_VU);
    choir_gemm_f32(true, false, MF2_QK, MF2_VU, T, invT, lin_k, MF2_QK, u, MF2_HIDDEN, 0.0f, w->kv, MF2_VU);
    choir_gemm_f32(false, false, T, MF2_VU, MF2_QK, 1.0f, lin_q, MF2_QK, w->kv, MF2_VU, 0.0f, w->att_u, MF2_VU);

    /* In-group quadratic attention, relu(q k / 256)^2, no softmax; a partial
     * last group simply has fewer keys. */
    for (int64_t g0 = 0; g0 < T; g0 += MF2_GROUP) {
        int64_t n = T - g0 < MF2_GROUP ? T - g0 : MF2_GROUP;
        choir_gemm_f32(false, true, n, n, MF2_QK, 1.0f / MF2_GROUP, quad_q + g0 * MF2_QK, MF2_QK,
                       quad_k + g0 * MF2_QK, MF2_QK, 0.0f, w->sim, n);
        for (int64_t i = 0; i < n * n; i++) {
            float s = w->sim[i] > 0 ? w->sim[i] : 0.0f;
            w->sim[i] = s * s;
        }
        choir_gemm_f32(false, false, n, MF2_VU, n, 1.0f, w->sim, n, v + g0 * MF2_HIDDEN, MF2_HIDDEN, 1.0f,
                       w->att_v + g0 * MF2_VU, MF2_VU);
        choir_gemm_f32(false, false, n, MF2_VU, n, 1.0f, w->sim, n, u + g0 * MF2_HIDDEN, MF2_HIDDEN, 1.0f,
                       w->att_u + g0 * MF2_VU, MF2_VU);
    }
    /* The crossing gate: u's attention times v, gated by v's attention times u. */
    for (int64_t t = 0; t < T; t++) {
        const float *vr = v + t * MF2_HIDDEN, *ur = u + t * MF2_HIDDEN;
        const float *av = w->att_v + t * MF2_VU, *au = w->att_u + t * MF2_VU;
        float *o = w->gate + t * MF2_VU;
        for (int c = 0; c < MF2_VU; c++) {
            float z = av[c] * ur[c];
            o[c] = au[c] * vr[c] * (1.0f / (1.0f + expf(-z)));
        }
    }
    ffconvm(w, &L->to_out, w->gate, MF2_VU, D, w->proj);
    choir_add(w->h, w->proj, w->h, T * D);
}

static void fsmn_block(const mf2_fsmn *F, mf2_work *w) {
    const int64_t T = w->T, C = MF2_INNER;
    /* Buffers reused from the FLASH layer, all [T, 256]. */
    float *a = w->att_v, *xu = w->att_v + T * C, *xv = w->att_v + 2 * T * C;
    float *f = w->att_u, *p = w->att_u + T * C, *mem = w->att_u + 2 * T * C;
    choir_linear(w->h, T, &F->conv1, F->conv1_b, a);
    prelu(a, T * C, F->prelu);
    choir_layer_norm(a, a, T, C, F->norm1_w, F->norm1_b, 1e-5f);
    ffconvm(w, &F->to_u, a, C, C, xu);
    ffconvm(w, &F->to_v, a, C, C, xv);
    /* UniDeepFsmn: xu + (p + symmetric memory conv of p), p = project(relu(linear(xu))). */
    choir_linear(xu, T, &F->linear, F->linear_b, f);
    choir_relu(f, T * C);
    choir_linear(f, T, &F->project, NULL, p);
    depthwise_residual(p, T, C, F->mem, MF2_FSMNK, mem);
    for (int64_t i = 0; i < T * C; i++) {
        float xu2 = xu[i] + mem[i];
        f[i] = xv[i] * xu2 + a[i];
    }
    choir_layer_norm(f, f, T, C, F->norm2_w, F->norm2_b, 1e-5f);
    choir_linear(f, T, &F->conv2, F->conv2_b, w->proj);
    choir_add(w->h, w->proj, w->h, T * CHOIR_MF2_DIM);
}

int choir_mf2_mask(const choir_mf2 *m, const float *features, int64_t T, float *mask,
                   choir_mf2_trace *trace, choir_err *err) {
    if (T < 1) return choir_err_set(err, CHOIR_EINVAL, "mossformer2: no frames");
    choir_arena *work = choir_arena_create((size_t)mf2_mask_bytes(T), CHOIR_MEM_ACTIVATIONS, err);
    if (!work) return CHOIR_ENOMEM;
    int rc = mf2_mask_in(m, features, T, mask, trace, work, err);
    choir_arena_free(work);
    return rc;
}

int mf2_mask_in(const choir_mf2 *m, const float *features, int64_t T, float *mask, choir_mf2_trace *trace,
                choir_arena *work, choir_err *err) {
    if (T < 1) return choir_err_set(err, CHOIR_EINVAL, "mossformer2: no frames");
    size_t mark = choir_arena_mark(work);
    mf2_work w;
    if (work_init(&w, T, work) != 0)
        return choir_err_set(err, CHOIR_ENOMEM, "mossformer2: the working memory has no room for %lld frames",
                             (long long)T);
    const int64_t D = CHOIR_MF2_DIM;
    choir_mf2_trace none = {0};
    if (!trace) trace = &none;

    /* Input GroupNorm over all frames and features, then the 1x1 encoder. */
    float *x = w.norm;
    memcpy(x, features, (size_t)(T * CHOIR_MF2_FEATS) * sizeof(float));
    group_norm_all(x, T, CHOIR_MF2_FEATS, m->norm_w, m->norm_b, 1e-8);
    choir_linear(x, T, &m->enc, NULL, w.h0);
    for (int64_t t = 0; t < T; t++) {
        float *r = w.h0 + t * D;
        for (int j = 0; j < (int)D / 2; j++) {
            float th = (float)t * m->pos_freq[j];
            r[j] += m->pos_scale * (float)sin((double)th);
            r[j + D / 2] += m->pos_scale * (float)cos((double)th);
        }
    }
    if (trace->enc) memcpy(trace->enc, w.h0, (size_t)(T * D) * sizeof(float));

    memcpy(w.h, w.h0, (size_t)(T * D) * sizeof(float));
    for (int i = 0; i < MF2_LAYERS; i++) {
        flash_layer(m, &m->flash[i], &w);
        if (i == 0 && trace->layer0_flash) memcpy(trace->layer0_flash, w.h, (size_t)(T * D) * sizeof(float));
        fsmn_block(&m->fsmn[i], &w);
        if (i == 0 && trace->layer0_fsmn) memcpy(trace->layer0_fsmn, w.h, (size_t)(T * D) * sizeof(float));
    }
    choir_layer_norm(w.h, w.h, T, D, m->ln_w, m->ln_b, 1e-6f);
    group_norm_all(w.h, T, D, m->gn_w, m->gn_b, 1e-8);
    choir_add(w.h, w.h0, w.h, T * D);
    if (trace->mdl_out) memcpy(trace->mdl_out, w.h, (size_t)(T * D) * sizeof(float));

    /* Head, speaker 0 only: PReLU -> conv1d_out rows 0..511 -> tanh * sigmoid gate -> decoder -> ReLU. */
    prelu(w.h, T * D, m->prelu);
    choir_linear(w.h, T, &m->out, m->out_b, w.shift);
    float *o = w.proj, *gt = w.h0;
    choir_linear(w.shift, T, &m->output, m->output_b, o);
    choir_tanh(o, T * D);
    choir_linear(w.shift, T, &m->output_gate, m->output_gate_b, gt);
    choir_sigmoid(gt, T * D);
    choir_mul(o, gt, o, T * D);
    if (trace->gate_out) memcpy(trace->gate_out, o, (size_t)(T * D) * sizeof(float));
    choir_linear(o, T, &m->dec, NULL, mask);
    choir_relu(mask, T * CHOIR_MF2_BINS);
    choir_arena_release(work, mark);
    return 0;
}
