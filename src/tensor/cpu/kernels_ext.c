/* The kernels of choir/kernels_ext.h (GroupNorm, RMSNorm, interleaved RoPE,
 * ELU, Snake with epsilon, reflect padding). Hot loops reuse the twin table
 * of cpu_kernels.h (Snake's sin, normalisation's affine pass), so the AVX2
 * versions are picked up with the same run-time choice as the core kernels. */
#include <math.h>
#include <string.h>

#include "choir/kernels_ext.h"
#include "choir/pool.h"
#include "tensor/cpu/cpu_kernels.h"

#define EXT_PAR_MIN 32768

typedef struct gn_job {
    const float *x;
    float *y;
    int64_t C, T;
    int groups;
    const float *gamma, *beta;
    float eps;
} gn_job;

static void gn_range(void *ctx, int64_t begin, int64_t end, int worker) {
    (void)worker;
    const gn_job *j = ctx;
    const choir_cpu_ops *ops = choir_cpu_ops_now();
    int64_t cg = j->C / j->groups;
    for (int64_t g = begin; g < end; g++) {
        const float *x = j->x + g * cg * j->T;
        float *y = j->y + g * cg * j->T;
        int64_t n = cg * j->T;
        double s = 0, s2 = 0;
        for (int64_t i = 0; i < n; i++) s += x[i];
        double mean = s / (double)n;
        for (int64_t i = 0; i < n; i++) {
            double d = x[i] - mean;
            s2 += d * d;
        }
        float inv = (float)(1.0 / sqrt(s2 / (double)n + j->eps));
        for (int64_t c = 0; c < cg; c++) {
            int64_t ch = g * cg + c;
            float a = inv * (j->gamma ? j->gamma[ch] : 1.0f);
            float b = j->beta ? j->beta[ch] : 0.0f;
            ops->affine(x + c * j->T, y + c * j->T, j->T, (float)mean, a, b);
        }
    }
}

void choir_group_norm(const float *x, float *y, int64_t C, int64_t T, int groups, const float *gamma,
                      const float *beta, float eps) {
    if (groups < 1 || C % groups || T <= 0) return;
    gn_job j = {x, y, C, T, groups, gamma, beta, eps};
    if (groups == 1) {
        gn_range(&j, 0, 1, 0);
        return;
    }
    choir_pool_parallel_for(choir_pool_default(), groups, 1, gn_range, &j);
}

typedef struct rms_job {
    const float *x;
    int64_t ldx;
    float *y;
    int64_t ldy, dim;
    const float *w;
    float eps;
} rms_job;

static void rms_range(void *ctx, int64_t begin, int64_t end, int worker) {
    (void)worker;
    const rms_job *j = ctx;
    for (int64_t r = begin; r < end; r++) {
        const float *x = j->x + r * j->ldx;
        float *y = j->y + r * j->ldy;
        float ss = 0;
        for (int64_t i = 0; i < j->dim; i++) ss += x[i] * x[i];
        float inv = 1.0f / sqrtf(ss / (float)j->dim + j->eps);
        if (j->w)
            for (int64_t i = 0; i < j->dim; i++) y[i] = x[i] * inv * j->w[i];
        else
            for (int64_t i = 0; i < j->dim; i++) y[i] = x[i] * inv;
    }
}

void choir_rms_norm(const float *x, int64_t ldx, float *y, int64_t ldy, int64_t rows, int64_t dim,
                    const float *w, float eps) {
    rms_job j = {x, ldx, y, ldy, dim, w, eps};
    if (rows * dim < EXT_PAR_MIN) {
        rms_range(&j, 0, rows, 0);
        return;
    }
    int64_t grain = dim > 0 ? (EXT_PAR_MIN / 4 + dim - 1) / dim : rows;
    choir_pool_parallel_for(choir_pool_default(), rows, grain, rms_range, &j);
}

void choir_rope_interleaved(float *x, int64_t ld, int64_t T, int n_head, int64_t hd, const float *cos_t,
                            const float *sin_t, int64_t pos0) {
    int64_t half = hd / 2;
    for (int64_t t = 0; t < T; t++) {
        const float *c = cos_t + (pos0 + t) * half, *s = sin_t + (pos0 + t) * half;
        for (int h = 0; h < n_head; h++) {
            float *v = x + t * ld + (int64_t)h * hd;
            for (int64_t i = 0; i < half; i++) {
                float a = v[2 * i], b = v[2 * i + 1];
                v[2 * i] = a * c[i] - b * s[i];
                v[2 * i + 1] = a * s[i] + b * c[i];
            }
        }
    }
}

void choir_elu(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (x[i] < 0) x[i] = expm1f(x[i]);
}

typedef struct snake_eps_job {
    float *x;
    int64_t T;
    const float *alpha;
} snake_eps_job;

static void snake_eps_range(void *ctx, int64_t begin, int64_t end, int worker) {
    (void)worker;
    const snake_eps_job *j = ctx;
    const choir_cpu_ops *ops = choir_cpu_ops_now();
    for (int64_t c = begin; c < end; c++) {
        float a = j->alpha[c];
        ops->snake(j->x + c * j->T, j->T, a, 1.0f / (a + 1e-9f));
    }
}

void choir_snake_eps(float *x, int64_t C, int64_t T, const float *alpha) {
    snake_eps_job j = {x, T, alpha};
    if (C * T < EXT_PAR_MIN) {
        snake_eps_range(&j, 0, C, 0);
        return;
    }
    int64_t grain = T > 0 ? (EXT_PAR_MIN / 4 + T - 1) / T : C;
    choir_pool_parallel_for(choir_pool_default(), C, grain, snake_eps_range, &j);
}

void choir_pad_reflect(const float *x, int64_t C, int64_t T, int64_t left, int64_t right, float *y) {
    int64_t To = left + T + right;
    for (int64_t c = 0; c < C; c++) {
        const float *xc = x + c * T;
        float *yc = y + c * To;
        for (int64_t i = 0; i < left; i++) yc[i] = xc[left - i];
        memcpy(yc + left, xc, (size_t)T * sizeof *xc);
        for (int64_t i = 0; i < right; i++) yc[left + T + i] = xc[T - 2 - i];
    }
}
