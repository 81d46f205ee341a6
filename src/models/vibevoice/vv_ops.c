/* The operations VibeVoice's forward passes are written in (vv_internal.h),
 * on the CPU: matrix products through choir_linear / choir_gemm_f32 (BLAS
 * and the SIMD kernels), the rest as loops split over the default pool. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "choir/kernels.h"
#include "choir/pool.h"
#include "models/vibevoice/vv_internal.h"

/* Rows per pool task for row-wise operations: enough work to pay for a task. */
static int64_t grain_rows(int64_t cols) { return cols >= 4096 ? 1 : 4096 / (cols > 0 ? cols : 1); }

typedef struct norm_job {
    const float *x;
    float *y;
    int64_t dim;
    const float *w;
    float eps;
} norm_job;

static void norm_rows(void *ctx, int64_t a, int64_t b, int worker) {
    (void)worker;
    const norm_job *j = ctx;
    for (int64_t r = a; r < b; r++) {
        const float *x = j->x + r * j->dim;
        float *y = j->y + r * j->dim;
        double ss = 0;
        for (int64_t i = 0; i < j->dim; i++) ss += (double)x[i] * x[i];
        /* As torch in fp32: the mean of squares, then rsqrt of mean + eps. */
        float inv = 1.0f / sqrtf((float)(ss / (double)j->dim) + j->eps);
        if (j->w)
            for (int64_t i = 0; i < j->dim; i++) y[i] = j->w[i] * (x[i] * inv);
        else
            for (int64_t i = 0; i < j->dim; i++) y[i] = x[i] * inv;
    }
}

void vv_rmsnorm(const float *x, float *y, int64_t rows, int64_t dim, const float *w, float eps) {
    norm_job j = {x, y, dim, w, eps};
    choir_pool_parallel_for(choir_pool_default(), rows, grain_rows(dim), norm_rows, &j);
}

void vv_linear(const float *x, int64_t rows, const choir_weight *w, const float *b, float *y) {
    choir_linear(x, rows, w, b, y);
}

typedef struct stem_job {
    const vv_conv *c;
    const float *in;
    float *out;
} stem_job;

static void stem_rows(void *ctx, int64_t a, int64_t b, int worker) {
    (void)worker;
    const stem_job *j = ctx;
    const vv_conv *c = j->c;
    int co = c->cout;
    for (int64_t t = a; t < b; t++) {
        float *o = j->out + t * co;
        for (int i = 0; i < co; i++) o[i] = c->bias ? c->bias[i] : 0.0f;
        for (int k = 0; k < c->kernel; k++) {
            float v = j->in[t + k];
            const float *w = c->taps1 + (int64_t)k * co;
            for (int i = 0; i < co; i++) o[i] += w[i] * v;
        }
    }
}

void vv_conv_causal(const vv_conv *c, const float *in, int64_t t_out, float *out, float *tmp) {
    if (t_out <= 0) return;
    if (c->taps1) {
        stem_job j = {c, in, out};
        choir_pool_parallel_for(choir_pool_default(), t_out, grain_rows(c->cout * c->kernel), stem_rows, &j);
        return;
    }
    int64_t row = (int64_t)c->stride * c->cin;
    vv_linear(in, t_out, &c->blk[0], c->bias, out);
    for (int g = 1; g < c->n_blocks; g++) {
        vv_linear(in + (int64_t)g * row, t_out, &c->blk[g], NULL, tmp);
        vv_add_scaled(out, tmp, NULL, t_out, c->cout);
    }
}

typedef struct dw_job {
    const float *in, *w, *b;
    float *out;
    int64_t C;
    int k;
} dw_job;

static void dw_rows(void *ctx, int64_t a, int64_t bnd, int worker) {
    (void)worker;
    const dw_job *j = ctx;
    int64_t C = j->C;
    for (int64_t t = a; t < bnd; t++) {
        float *o = j->out + t * C;
        if (j->b) memcpy(o, j->b, (size_t)C * sizeof *o);
        else memset(o, 0, (size_t)C * sizeof *o);
        for (int k = 0; k < j->k; k++) {
            const float *x = j->in + (t + k) * C, *w = j->w + (int64_t)k * C;
            for (int64_t c = 0; c < C; c++) o[c] += w[c] * x[c];
        }
    }
}

void vv_dwconv_causal(const float *in, int64_t T, int64_t C, int k, const float *w, const float *b,
                      float *out) {
    dw_job j = {in, w, b, out, C, k};
    choir_pool_parallel_for(choir_pool_default(), T, grain_rows(C * k), dw_rows, &j);
}

typedef struct add_job {
    float *x;
    const float *y, *g;
    int64_t C;
} add_job;

static void add_rows(void *ctx, int64_t a, int64_t b, int worker) {
    (void)worker;
    const add_job *j = ctx;
    for (int64_t r = a; r < b; r++) {
        float *x = j->x + r * j->C;
        const float *y = j->y + r * j->C;
        if (j->g)
            for (int64_t c = 0; c < j->C; c++) x[c] += j->g[c] * y[c];
        else
            for (int64_t c = 0; c < j->C; c++) x[c] += y[c];
    }
}

void vv_add_scaled(float *x, const float *y, const float *g, int64_t rows, int64_t C) {
    add_job j = {x, y, g, C};
    choir_pool_parallel_for(choir_pool_default(), rows, grain_rows(C), add_rows, &j);
}

void vv_gelu(float *x, int64_t n) { choir_gelu_erf(x, n); }

typedef struct swiglu_job {
    float *g;
    const float *u;
} swiglu_job;

static void swiglu_range(void *ctx, int64_t a, int64_t b, int worker) {
    (void)worker;
    const swiglu_job *j = ctx;
    for (int64_t i = a; i < b; i++) {
        float v = j->g[i];
        j->g[i] = v / (1.0f + expf(-v)) * j->u[i];
    }
}

void vv_swiglu(float *gate, const float *up, int64_t n) {
    swiglu_job j = {gate, up};
    choir_pool_parallel_for(choir_pool_default(), n, 16384, swiglu_range, &j);
}

void vv_rope(float *x, int64_t T, int n_heads, int D, int64_t pos0, const float *inv_freq) {
    int half = D / 2;
    for (int64_t t = 0; t < T; t++) {
        /* HF: angle = float(position) * inv_freq in fp32, then cos / sin. */
        float pos = (float)(pos0 + t);
        for (int i = 0; i < half; i++) {
            float ang = pos * inv_freq[i];
            float c = (float)cos((double)ang), s = (float)sin((double)ang);
            for (int h = 0; h < n_heads; h++) {
                float *v = x + (t * n_heads + h) * (int64_t)D;
                float a = v[i], b = v[i + half];
                v[i] = a * c - b * s;
                v[i + half] = b * c + a * s;
            }
        }
    }
}

/* Flash attention: one task per (head, block of queries). */
#define VV_ATT_BQ 16
#define VV_ATT_BK 128
#define VV_ATT_MAX_D 256

typedef struct att_job {
    const float *q, *kc, *vc;
    float *out;
    int64_t T, pos0;
    int nh, nkv, D, n_qblocks;
    float scale;
} att_job;

static void att_tasks(void *ctx, int64_t a, int64_t b, int worker) {
    (void)worker;
    const att_job *j = ctx;
    int D = j->D, ldq = j->nh * D, ldk = j->nkv * D;
    float s[VV_ATT_BQ * VV_ATT_BK], acc[VV_ATT_BQ * VV_ATT_MAX_D], m[VV_ATT_BQ], l[VV_ATT_BQ];
    for (int64_t task = a; task < b; task++) {
        int h = (int)(task / j->n_qblocks), qb = (int)(task % j->n_qblocks);
        int kvh = h / (j->nh / j->nkv);
        int64_t t0 = (int64_t)qb * VV_ATT_BQ;
        int nq = (int)(j->T - t0 < VV_ATT_BQ ? j->T - t0 : VV_ATT_BQ);
        const float *q = j->q + t0 * ldq + (int64_t)h * D;
        const float *kc = j->kc + (int64_t)kvh * D, *vc = j->vc + (int64_t)kvh * D;
        for (int i = 0; i < nq; i++) m[i] = -INFINITY, l[i] = 0.0f;
        memset(acc, 0, sizeof(float) * (size_t)nq * (size_t)D);
        /* Keys the last query of the block may see. */
        int64_t n_keys = j->pos0 + t0 + nq;
        for (int64_t k0 = 0; k0 < n_keys; k0 += VV_ATT_BK) {
            int nk = (int)(n_keys - k0 < VV_ATT_BK ? n_keys - k0 : VV_ATT_BK);
            choir_gemm_f32(false, true, nq, nk, D, j->scale, q, ldq, kc + k0 * ldk, ldk, 0.0f, s, nk);
            for (int i = 0; i < nq; i++) {
                float *si = s + (int64_t)i * nk;
                int64_t limit = j->pos0 + t0 + i; /* causal: keys <= its position */
                float mx = m[i];
                for (int c = 0; c < nk; c++) {
                    if (k0 + c > limit) si[c] = -INFINITY;
                    else if (si[c] > mx) mx = si[c];
                }
                if (mx == -INFINITY) {
                    for (int c = 0; c < nk; c++) si[c] = 0.0f;
                    continue;
                }
                float alpha = expf(m[i] - mx), sum = 0.0f;
                for (int c = 0; c < nk; c++) {
                    float p = si[c] == -INFINITY ? 0.0f : expf(si[c] - mx);
                    si[c] = p;
                    sum += p;
                }
                l[i] = l[i] * alpha + sum;
                m[i] = mx;
                float *ai = acc + (int64_t)i * D;
                for (int d = 0; d < D; d++) ai[d] *= alpha;
            }
            choir_gemm_f32(false, false, nq, D, nk, 1.0f, s, nk, vc + k0 * ldk, ldk, 1.0f, acc, D);
        }
        for (int i = 0; i < nq; i++) {
            float inv = l[i] > 0 ? 1.0f / l[i] : 0.0f;
            float *o = j->out + (t0 + i) * ldq + (int64_t)h * D;
            for (int d = 0; d < D; d++) o[d] = acc[(int64_t)i * D + d] * inv;
        }
    }
}

void vv_attention(const float *q, int64_t T, const float *kc, const float *vc, int64_t pos0,
                  int n_heads, int n_kv, int D, float *out) {
    att_job j = {q, kc, vc, out, T, pos0, n_heads, n_kv, D,
                 (int)((T + VV_ATT_BQ - 1) / VV_ATT_BQ), 1.0f / sqrtf((float)D)};
    choir_pool_parallel_for(choir_pool_default(), (int64_t)n_heads * j.n_qblocks, 1, att_tasks, &j);
}

void vv_embed(const choir_weight *E, const int32_t *ids, int n, float *out) {
    for (int i = 0; i < n; i++) choir_weight_row_f32(E, ids[i], out + (int64_t)i * E->cols);
}

int64_t vv_ffn_tile(int64_t C, int ffn_mult) {
    int64_t t = (4 << 20) / (C * (ffn_mult > 0 ? ffn_mult : 4));
    return t < 16 ? 16 : t;
}
