/* VibeVoice-ASR's operations (choir/backend_vibevoice.h): on the CPU as loops
 * split over the default pool (the attention's products through
 * choir_gemm_f32), on CUDA through cuda_vibevoice.cu. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "choir/backend_vibevoice.h"
#include "choir/kernels.h"
#include "choir/pool.h"
#include "choir/tensor.h"
#include "tensor/backend/backend_internal.h"

#ifdef CHOIR_HAVE_CUDA
#include "tensor/cuda/cuda_vibevoice.h"
#endif

/* Rows per pool task for row-wise loops: enough work to pay for a task. */
static int64_t grain_rows(int64_t cols) { return cols >= 4096 ? 1 : 4096 / (cols > 0 ? cols : 1); }

/* --- the stem ---------------------------------------------------------------------- */

typedef struct stem_job {
    const float *in, *taps, *bias;
    float *out;
    int64_t cout;
    int kernel;
} stem_job;

static void stem_rows(void *ctx, int64_t a, int64_t b, int worker) {
    (void)worker;
    const stem_job *j = ctx;
    int64_t co = j->cout;
    for (int64_t t = a; t < b; t++) {
        float *o = j->out + t * co;
        for (int64_t i = 0; i < co; i++) o[i] = j->bias ? j->bias[i] : 0.0f;
        for (int k = 0; k < j->kernel; k++) {
            float v = j->in[t + k];
            const float *w = j->taps + (int64_t)k * co;
            for (int64_t i = 0; i < co; i++) o[i] += w[i] * v;
        }
    }
}

int choir_op_conv_stem_rows(choir_stream *s, const float *in, int64_t T, const float *taps,
                            const float *bias, int64_t cout, int kernel, float *out) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (T < 0 || cout <= 0 || kernel <= 0)
        return be_invalid(s, "conv_stem_rows: %lld rows, %lld channels, kernel %d", (long long)T,
                          (long long)cout, kernel);
    if (T == 0) return 0;
    if (be_host(s)) {
        stem_job j = {in, taps, bias, out, cout, kernel};
        choir_pool_parallel_for(choir_pool_default(), T, grain_rows(cout * kernel), stem_rows, &j);
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    BE_CUDA(s, "conv_stem_rows",
            choir_cuda_vv_conv_stem(s->be->cu, in, T, taps, bias, cout, kernel, out, BE_ERR));
#endif
    return be_unsupported(s, "conv_stem_rows");
}

/* --- the depthwise mixer -------------------------------------------------------------- */

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

int choir_op_dwconv_rows(choir_stream *s, const float *in, int64_t T, int64_t C, int kernel,
                         const float *w, const float *b, float *out) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (T < 0 || C <= 0 || kernel <= 0)
        return be_invalid(s, "dwconv_rows: %lld rows of %lld, kernel %d", (long long)T,
                          (long long)C, kernel);
    if (T == 0) return 0;
    if (be_host(s)) {
        dw_job j = {in, w, b, out, C, kernel};
        choir_pool_parallel_for(choir_pool_default(), T, grain_rows(C * kernel), dw_rows, &j);
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    BE_CUDA(s, "dwconv_rows", choir_cuda_vv_dwconv(s->be->cu, in, T, C, kernel, w, b, out, BE_ERR));
#endif
    return be_unsupported(s, "dwconv_rows");
}

/* The mixer and its residual: each value's depthwise sum as dw_rows makes
 * it (bias, then the taps in order), then added as add_rows adds it; a row
 * in pieces of DWRES_PIECE channels, the sums on the stack. */
#define DWRES_PIECE 256
typedef struct dwres_job {
    const float *in, *w, *b, *g;
    float *x;
    int64_t C;
    int k;
} dwres_job;

static void dwres_rows(void *ctx, int64_t a, int64_t bnd, int worker) {
    (void)worker;
    const dwres_job *j = ctx;
    int64_t C = j->C;
    float o[DWRES_PIECE];
    for (int64_t t = a; t < bnd; t++) {
        for (int64_t c0 = 0; c0 < C; c0 += DWRES_PIECE) {
            int64_t n = C - c0 < DWRES_PIECE ? C - c0 : DWRES_PIECE;
            for (int64_t c = 0; c < n; c++) o[c] = j->b ? j->b[c0 + c] : 0.0f;
            for (int k = 0; k < j->k; k++) {
                const float *x = j->in + (t + k) * C + c0, *w = j->w + (int64_t)k * C + c0;
                for (int64_t c = 0; c < n; c++) o[c] += w[c] * x[c];
            }
            float *x = j->x + t * C + c0;
            if (j->g)
                for (int64_t c = 0; c < n; c++) x[c] += j->g[c0 + c] * o[c];
            else
                for (int64_t c = 0; c < n; c++) x[c] += o[c];
        }
    }
}

int choir_op_dwconv_residual_rows(choir_stream *s, const float *in, int64_t T, int64_t C, int kernel,
                                  const float *w, const float *b, const float *g, float *x) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (T < 0 || C <= 0 || kernel <= 0)
        return be_invalid(s, "dwconv_residual_rows: %lld rows of %lld, kernel %d", (long long)T,
                          (long long)C, kernel);
    if (T == 0) return 0;
    if (be_host(s)) {
        dwres_job j = {in, w, b, g, x, C, kernel};
        choir_pool_parallel_for(choir_pool_default(), T, grain_rows(C * kernel), dwres_rows, &j);
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    BE_CUDA(s, "dwconv_residual_rows",
            choir_cuda_vv_dwconv_residual(s->be->cu, in, T, C, kernel, w, b, g, x, BE_ERR));
#endif
    return be_unsupported(s, "dwconv_residual_rows");
}

/* --- scaled residual ------------------------------------------------------------------ */

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

int choir_op_add_scaled_rows(choir_stream *s, float *x, const float *y, const float *g,
                             int64_t rows, int64_t C) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (rows < 0 || C <= 0)
        return be_invalid(s, "add_scaled_rows: %lld rows of %lld", (long long)rows, (long long)C);
    if (rows == 0) return 0;
    if (be_host(s)) {
        add_job j = {x, y, g, C};
        choir_pool_parallel_for(choir_pool_default(), rows, grain_rows(C), add_rows, &j);
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    BE_CUDA(s, "add_scaled_rows", choir_cuda_vv_add_scaled(s->be->cu, x, y, g, rows, C, BE_ERR));
#endif
    return be_unsupported(s, "add_scaled_rows");
}

/* --- attention over the cache ------------------------------------------------------------ */

/* One pool task per (head, block of queries); scores of one block of keys
 * at a time on the stack, with an online softmax over the blocks. */
#define ATT_BQ 16
#define ATT_BK 128
#define ATT_MAX_D 256

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
    float s[ATT_BQ * ATT_BK], acc[ATT_BQ * ATT_MAX_D], m[ATT_BQ], l[ATT_BQ];
    for (int64_t task = a; task < b; task++) {
        int h = (int)(task / j->n_qblocks), qb = (int)(task % j->n_qblocks);
        int kvh = h / (j->nh / j->nkv);
        int64_t t0 = (int64_t)qb * ATT_BQ;
        int nq = (int)(j->T - t0 < ATT_BQ ? j->T - t0 : ATT_BQ);
        const float *q = j->q + t0 * ldq + (int64_t)h * D;
        const float *kc = j->kc + (int64_t)kvh * D, *vc = j->vc + (int64_t)kvh * D;
        for (int i = 0; i < nq; i++) m[i] = -INFINITY, l[i] = 0.0f;
        memset(acc, 0, sizeof(float) * (size_t)nq * (size_t)D);
        /* Keys the last query of the block may see. */
        int64_t n_keys = j->pos0 + t0 + nq;
        for (int64_t k0 = 0; k0 < n_keys; k0 += ATT_BK) {
            int nk = (int)(n_keys - k0 < ATT_BK ? n_keys - k0 : ATT_BK);
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

int choir_op_attention_cached(choir_stream *s, const float *q, int64_t T, const float *kc,
                              const float *vc, int64_t pos0, int n_heads, int n_kv, int D,
                              float *out) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (T < 0 || pos0 < 0 || n_heads <= 0 || n_kv <= 0 || n_heads % n_kv || D <= 0 ||
        D > ATT_MAX_D)
        return be_invalid(s, "attention_cached: %lld queries at %lld, %d heads over %d of %d",
                          (long long)T, (long long)pos0, n_heads, n_kv, D);
    if (T == 0) return 0;
    if (be_host(s)) {
        att_job j = {q, kc, vc, out, T, pos0, n_heads, n_kv, D,
                     (int)((T + ATT_BQ - 1) / ATT_BQ), 1.0f / sqrtf((float)D)};
        choir_pool_parallel_for(choir_pool_default(), (int64_t)n_heads * j.n_qblocks, 1, att_tasks,
                                &j);
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    BE_CUDA(s, "attention_cached",
            choir_cuda_vv_attention(s->be->cu, q, T, kc, vc, pos0, n_heads, n_kv, D, out, BE_ERR));
#endif
    return be_unsupported(s, "attention_cached");
}

int choir_op_attention_cached_at(choir_stream *s, const float *q, int64_t T, const float *kc,
                                 const float *vc, const int32_t *pos, int64_t max_keys, int n_heads,
                                 int n_kv, int D, float *out) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (T < 0 || max_keys <= 0 || !pos || n_heads <= 0 || n_kv <= 0 || n_heads % n_kv || D <= 0 ||
        D > ATT_MAX_D)
        return be_invalid(s, "attention_cached_at: %lld queries over %lld keys, %d heads over %d of %d",
                          (long long)T, (long long)max_keys, n_heads, n_kv, D);
    if (T == 0) return 0;
    if (be_host(s)) {
        /* Row by row, each as attention_cached at its own position. */
        int64_t ld = (int64_t)n_heads * D;
        for (int64_t i = 0; i < T; i++) {
            int64_t p = pos[i] + 1 > max_keys ? max_keys - 1 : pos[i];
            if (p < 0) return be_invalid(s, "attention_cached_at: position %lld", (long long)p);
            att_job j = {q + i * ld, kc, vc, out + i * ld, 1, p, n_heads, n_kv, D, 1, 1.0f / sqrtf((float)D)};
            choir_pool_parallel_for(choir_pool_default(), n_heads, 1, att_tasks, &j);
        }
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    BE_CUDA(s, "attention_cached_at",
            choir_cuda_vv_attention_at(s->be->cu, q, T, kc, vc, pos, max_keys, n_heads, n_kv, D, out,
                                       BE_ERR));
#endif
    return be_unsupported(s, "attention_cached_at");
}

/* --- attention over a paged cache -------------------------------------------------- */

/* One task per (query row, head): the row's keys page by page (scores of a
 * page, then the online-softmax rescale), each page found in its table. */
typedef struct paged_job {
    const float *q;
    const void *kp, *vp;
    int bf16; /* the pool holds bf16 values */
    const int32_t *table, *pos;
    int64_t table_stride, pos0, max_keys;
    float *out;
    int nh, nkv, D;
    float scale;
} paged_job;

static void paged_tasks(void *ctx, int64_t a, int64_t b, int worker) {
    (void)worker;
    const paged_job *j = ctx;
    int D = j->D;
    int64_t ldq = (int64_t)j->nh * D, ldk = (int64_t)j->nkv * D;
    float sc[CHOIR_VV_PAGE], acc[ATT_MAX_D], kw[ATT_MAX_D], vw[ATT_MAX_D];
    for (int64_t task = a; task < b; task++) {
        int64_t i = task / j->nh;
        int h = (int)(task % j->nh), kh = h / (j->nh / j->nkv);
        int64_t n_keys = (j->pos ? (int64_t)j->pos[i] : j->pos0 + i) + 1;
        if (n_keys > j->max_keys) n_keys = j->max_keys;
        const int32_t *tab = j->table + (j->pos ? i * j->table_stride : 0);
        const float *qr = j->q + i * ldq + (int64_t)h * D;
        float m = -INFINITY, l = 0.0f;
        memset(acc, 0, sizeof(float) * (size_t)D);
        for (int64_t k0 = 0; k0 < n_keys; k0 += CHOIR_VV_PAGE) {
            int nk = (int)(n_keys - k0 < CHOIR_VV_PAGE ? n_keys - k0 : CHOIR_VV_PAGE);
            int64_t r0 = (int64_t)tab[k0 / CHOIR_VV_PAGE] * CHOIR_VV_PAGE, at = r0 * ldk + (int64_t)kh * D;
            const float *kr = (const float *)j->kp + at, *vr = (const float *)j->vp + at;
            const uint16_t *kh16 = (const uint16_t *)j->kp + at, *vh16 = (const uint16_t *)j->vp + at;
            float mt = m;
            for (int k = 0; k < nk; k++) {
                const float *kk = kr + k * ldk;
                if (j->bf16) {
                    for (int e = 0; e < D; e++) kw[e] = choir_bf16_to_f32(kh16[k * ldk + e]);
                    kk = kw;
                }
                float d = 0.0f;
                for (int e = 0; e < D; e++) d += qr[e] * kk[e];
                sc[k] = d * j->scale;
                if (sc[k] > mt) mt = sc[k];
            }
            float alpha = expf(m - mt); /* 0 on the first page (m = -inf) */
            l *= alpha;
            for (int e = 0; e < D; e++) acc[e] *= alpha;
            for (int k = 0; k < nk; k++) {
                float p = expf(sc[k] - mt);
                l += p;
                const float *vv = vr + k * ldk;
                if (j->bf16) {
                    for (int e = 0; e < D; e++) vw[e] = choir_bf16_to_f32(vh16[k * ldk + e]);
                    vv = vw;
                }
                for (int e = 0; e < D; e++) acc[e] += p * vv[e];
            }
            m = mt;
        }
        float inv = l > 0.0f ? 1.0f / l : 0.0f, *o = j->out + i * ldq + (int64_t)h * D;
        for (int e = 0; e < D; e++) o[e] = acc[e] * inv;
    }
}

static int paged_run(choir_stream *s, const char *what, const float *q, int64_t T, const void *kp,
                     const void *vp, choir_dtype kv, const int32_t *table, int64_t table_stride, int64_t pos0,
                     const int32_t *pos, int64_t max_keys, int n_heads, int n_kv, int D, float *out) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (T < 0 || pos0 < 0 || max_keys <= 0 || !table || table_stride < 0 || n_heads <= 0 || n_kv <= 0 ||
        n_heads % n_kv || D <= 0 || D > ATT_MAX_D)
        return be_invalid(s, "%s: %lld queries over %lld keys, %d heads over %d of %d", what, (long long)T,
                          (long long)max_keys, n_heads, n_kv, D);
    if (kv != CHOIR_DTYPE_F32 && kv != CHOIR_DTYPE_BF16)
        return be_invalid(s, "%s: a pool of %s values (f32 or bf16)", what, choir_dtype_name(kv));
    if (T == 0) return 0;
    if (be_host(s)) {
        if (pos)
            for (int64_t i = 0; i < T; i++)
                if (pos[i] < 0) return be_invalid(s, "%s: position %d", what, (int)pos[i]);
        paged_job j = {q, kp, vp, kv == CHOIR_DTYPE_BF16, table, pos, table_stride, pos0, max_keys, out, n_heads,
                       n_kv, D, 1.0f / sqrtf((float)D)};
        choir_pool_parallel_for(choir_pool_default(), T * n_heads, 1, paged_tasks, &j);
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    BE_CUDA(s, what,
            choir_cuda_vv_attention_paged(s->be->cu, q, T, kp, vp, kv == CHOIR_DTYPE_BF16, table, table_stride, pos0,
                                          pos, max_keys, n_heads, n_kv, D, out, BE_ERR));
#endif
    return be_unsupported(s, what);
}

int choir_op_attention_paged_kv(choir_stream *s, const float *q, int64_t T, const void *kpool,
                                const void *vpool, choir_dtype kv, const int32_t *table, int64_t pos0,
                                int n_heads, int n_kv, int D, float *out) {
    return paged_run(s, "attention_paged", q, T, kpool, vpool, kv, table, 0, pos0, NULL, pos0 + T, n_heads,
                     n_kv, D, out);
}

int choir_op_attention_paged_at_kv(choir_stream *s, const float *q, int64_t T, const void *kpool,
                                   const void *vpool, choir_dtype kv, const int32_t *table,
                                   int64_t table_stride, const int32_t *pos, int64_t max_keys, int n_heads,
                                   int n_kv, int D, float *out) {
    if (!pos) return paged_run(s, "attention_paged_at", q, T, kpool, vpool, kv, table, table_stride, 0, NULL, 0,
                               n_heads, n_kv, D, out);
    return paged_run(s, "attention_paged_at", q, T, kpool, vpool, kv, table, table_stride, 0, pos, max_keys,
                     n_heads, n_kv, D, out);
}

int choir_op_attention_paged(choir_stream *s, const float *q, int64_t T, const float *kpool,
                             const float *vpool, const int32_t *table, int64_t pos0, int n_heads,
                             int n_kv, int D, float *out) {
    return choir_op_attention_paged_kv(s, q, T, kpool, vpool, CHOIR_DTYPE_F32, table, pos0, n_heads, n_kv, D,
                                       out);
}

int choir_op_attention_paged_at(choir_stream *s, const float *q, int64_t T, const float *kpool,
                                const float *vpool, const int32_t *table, int64_t table_stride,
                                const int32_t *pos, int64_t max_keys, int n_heads, int n_kv, int D,
                                float *out) {
    return choir_op_attention_paged_at_kv(s, q, T, kpool, vpool, CHOIR_DTYPE_F32, table, table_stride, pos,
                                          max_keys, n_heads, n_kv, D, out);
}

/* --- a decoding step's rotations and new cache rows ------------------------------- */

int choir_op_rope_kv_rows(choir_stream *s, float *q, float *k, const float *v, int64_t T, int n_heads, int n_kv,
                          int64_t D, const int32_t *pos, float theta, const choir_rows_out *kout,
                          const choir_rows_out *vout) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (T < 0 || n_heads <= 0 || n_kv <= 0 || D <= 0 || D % 2 || !kout || !vout || !kout->dst || !vout->dst)
        return be_invalid(s, "rope_kv_rows: %lld rows, %d and %d heads of %lld", (long long)T, n_heads, n_kv,
                          (long long)D);
    if (T == 0) return 0;
    int64_t kvd = (int64_t)n_kv * D;
#ifdef CHOIR_HAVE_CUDA
    bool f32_or_bf16 = (kout->dtype == CHOIR_DTYPE_F32 || kout->dtype == CHOIR_DTYPE_BF16) &&
                       (vout->dtype == CHOIR_DTYPE_F32 || vout->dtype == CHOIR_DTYPE_BF16);
    if (!be_host(s) && f32_or_bf16 && D <= CHOIR_CUDA_VV_ROPE_KV_MAX_D) {
        s->ops += 3; /* the two ropes and the two scatters */
        choir_cuda_vv_rows_dst kd = {kout->dst, kout->dtype == CHOIR_DTYPE_BF16, kout->slot_stride, kout->ld,
                                     kout->slot, kout->pos};
        choir_cuda_vv_rows_dst vd = {vout->dst, vout->dtype == CHOIR_DTYPE_BF16, vout->slot_stride, vout->ld,
                                     vout->slot, vout->pos};
        BE_CUDA(s, "rope_kv_rows",
                choir_cuda_vv_rope_kv(s->be->cu, q, k, v, T, n_heads, n_kv, D, pos, theta, &kd, &vd, BE_ERR));
    }
#endif
    /* The operations in turn (the CPU's version, and CUDA's where its
     * kernel does not apply), counted as they count. */
    s->ops--;
    choir_op_rope(s, q, T, (int64_t)n_heads * D, n_heads, D, 0, pos, theta, false);
    choir_op_rope(s, k, T, kvd, n_kv, D, 0, pos, theta, false);
    choir_op_rows_scatter(s, k, T, kvd, kout->dst, kout->dtype, kout->slot_stride, kout->ld, kout->slot, kout->pos);
    return choir_op_rows_scatter(s, v, T, kvd, vout->dst, vout->dtype, vout->slot_stride, vout->ld, vout->slot,
                                 vout->pos);
}

/* CHOIR_VV_ROPE_KV: -1 until read from the environment or set, then 0 or 1. */
static int g_rope_kv = -1;

void choir_vv_set_rope_kv(bool on) { __atomic_store_n(&g_rope_kv, on ? 1 : 0, __ATOMIC_RELAXED); }

bool choir_vv_rope_kv_on(void) {
    int v = __atomic_load_n(&g_rope_kv, __ATOMIC_RELAXED);
    if (v < 0) {
        const char *e = getenv("CHOIR_VV_ROPE_KV");
        v = !(e && strcmp(e, "0") == 0); /* on unless "0" (ran on an H100 on 7 Dec 2026) */
        __atomic_store_n(&g_rope_kv, v, __ATOMIC_RELAXED);
    }
    return v == 1;
}
