/* Host versions of the VibeVoice CUDA kernels (src/tensor/cuda/cuda_vibevoice.h)
 * for the fake CUDA build (fake_cuda.c): plain loops written from the header's
 * formulas, the attention in double, so that tests/cuda/vibevoice_gpu_check.c
 * runs the model's CUDA data path (uploads, device buffers, downloads, host
 * staging) on a machine without a GPU. Not for graph capture. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "choir/tensor.h"
#include "tensor/cuda/cuda_vibevoice.h"

int choir_cuda_vv_conv_stem(choir_cuda *cu, const float *in, int64_t T, const float *taps,
                            const float *bias, int64_t cout, int kernel, float *out, choir_err *err) {
    (void)cu, (void)err;
    for (int64_t t = 0; t < T; t++)
        for (int64_t c = 0; c < cout; c++) {
            float a = bias ? bias[c] : 0.0f;
            for (int k = 0; k < kernel; k++) a += taps[(int64_t)k * cout + c] * in[t + k];
            out[t * cout + c] = a;
        }
    return 0;
}

int choir_cuda_vv_dwconv(choir_cuda *cu, const float *in, int64_t T, int64_t C, int kernel,
                         const float *w, const float *b, float *out, choir_err *err) {
    (void)cu, (void)err;
    for (int64_t t = 0; t < T; t++)
        for (int64_t c = 0; c < C; c++) {
            float a = b ? b[c] : 0.0f;
            for (int j = 0; j < kernel; j++) a += w[(int64_t)j * C + c] * in[(t + j) * C + c];
            out[t * C + c] = a;
        }
    return 0;
}

int choir_cuda_vv_add_scaled(choir_cuda *cu, float *x, const float *y, const float *g, int64_t rows,
                             int64_t C, choir_err *err) {
    (void)cu, (void)err;
    for (int64_t i = 0; i < rows * C; i++) x[i] += (g ? g[i % C] : 1.0f) * y[i];
    return 0;
}

int choir_cuda_vv_dwconv_residual(choir_cuda *cu, const float *in, int64_t T, int64_t C, int kernel,
                                  const float *w, const float *b, const float *g, float *x, choir_err *err) {
    (void)cu, (void)err;
    for (int64_t t = 0; t < T; t++)
        for (int64_t c = 0; c < C; c++) {
            float a = b ? b[c] : 0.0f;
            for (int j = 0; j < kernel; j++) a += w[(int64_t)j * C + c] * in[(t + j) * C + c];
            x[t * C + c] += (g ? g[c] : 1.0f) * a;
        }
    return 0;
}

int choir_cuda_vv_attention(choir_cuda *cu, const float *q, int64_t T, const float *kc,
                            const float *vc, int64_t pos0, int n_heads, int n_kv, int D, float *out,
                            choir_err *err) {
    (void)cu;
    int64_t ldq = (int64_t)n_heads * D, ldk = (int64_t)n_kv * D;
    double *p = malloc((size_t)(pos0 + T) * sizeof *p);
    if (!p) return choir_err_set(err, CHOIR_ENOMEM, "fake cuda: attention");
    for (int64_t i = 0; i < T; i++)
        for (int h = 0; h < n_heads; h++) {
            int kh = h / (n_heads / n_kv);
            double mx = -INFINITY, sum = 0;
            for (int64_t j = 0; j <= pos0 + i; j++) {
                double d = 0;
                for (int e = 0; e < D; e++) d += (double)q[i * ldq + h * D + e] * kc[j * ldk + kh * D + e];
                p[j] = d / sqrt((double)D);
                if (p[j] > mx) mx = p[j];
            }
            for (int64_t j = 0; j <= pos0 + i; j++) sum += p[j] = exp(p[j] - mx);
            for (int e = 0; e < D; e++) {
                double a = 0;
                for (int64_t j = 0; j <= pos0 + i; j++) a += p[j] * vc[j * ldk + kh * D + e];
                out[i * ldq + h * D + e] = (float)(a / sum);
            }
        }
    free(p);
    return 0;
}

/* Row by row: row i over keys 0 .. pos[i] (at most max_keys), reading the
 * positions when it runs, so it is recorded in a capture and replayed. */
typedef struct att_at_args {
    const float *q, *kc, *vc;
    const int32_t *pos;
    int64_t T, max_keys;
    int n_heads, n_kv, D;
    float *out;
} att_at_args;

int fake_cuda_run_or_record(int (*fn)(const void *args), const void *args, size_t size);

static int att_at_run(const void *args) {
    const att_at_args *a = args;
    int64_t ld = (int64_t)a->n_heads * a->D;
    for (int64_t i = 0; i < a->T; i++) {
        int64_t p = a->pos[i] + 1 > a->max_keys ? a->max_keys - 1 : a->pos[i];
        int rc = choir_cuda_vv_attention(NULL, a->q + i * ld, 1, a->kc, a->vc, p, a->n_heads, a->n_kv, a->D,
                                         a->out + i * ld, NULL);
        if (rc) return rc;
    }
    return 0;
}

int choir_cuda_vv_attention_at(choir_cuda *cu, const float *q, int64_t T, const float *kc,
                               const float *vc, const int32_t *pos, int64_t max_keys, int n_heads,
                               int n_kv, int D, float *out, choir_err *err) {
    (void)cu;
    (void)err;
    att_at_args a = {q, kc, vc, pos, T, max_keys, n_heads, n_kv, D, out};
    return fake_cuda_run_or_record(att_at_run, &a, sizeof a);
}

/* Over a paged cache: each row's keys gathered through its table in double,
 * run (or recorded in a capture) with the positions read when it runs. */
typedef struct att_paged_args {
    const float *q;
    const void *kp, *vp;
    bool bf16;
    const int32_t *table, *pos;
    int64_t table_stride, pos0, T, max_keys;
    int n_heads, n_kv, D;
    float *out;
} att_paged_args;

/* Element e of a pool row, widened from bf16 when the pool holds it. */
static double pool_at(const att_paged_args *a, const void *p, int64_t e) {
    return a->bf16 ? (double)choir_bf16_to_f32(((const uint16_t *)p)[e]) : (double)((const float *)p)[e];
}

static int att_paged_run(const void *args) {
    const att_paged_args *a = args;
    int64_t ldq = (int64_t)a->n_heads * a->D, ldk = (int64_t)a->n_kv * a->D;
    for (int64_t i = 0; i < a->T; i++) {
        int64_t n_keys = (a->pos ? (int64_t)a->pos[i] : a->pos0 + i) + 1;
        if (n_keys > a->max_keys) n_keys = a->max_keys;
        const int32_t *tab = a->table + (a->pos ? i * a->table_stride : 0);
        double *p = malloc((size_t)n_keys * sizeof *p);
        if (!p) return CHOIR_ENOMEM;
        for (int h = 0; h < a->n_heads; h++) {
            int kh = h / (a->n_heads / a->n_kv);
            double mx = -INFINITY, sum = 0;
            for (int64_t j = 0; j < n_keys; j++) {
                int64_t kr = ((int64_t)tab[j / 128] * 128 + j % 128) * ldk + kh * a->D;
                double d = 0;
                for (int e = 0; e < a->D; e++) d += (double)a->q[i * ldq + h * a->D + e] * pool_at(a, a->kp, kr + e);
                p[j] = d / sqrt((double)a->D);
                if (p[j] > mx) mx = p[j];
            }
            for (int64_t j = 0; j < n_keys; j++) sum += p[j] = exp(p[j] - mx);
            for (int e = 0; e < a->D; e++) {
                double acc = 0;
                for (int64_t j = 0; j < n_keys; j++)
                    acc += p[j] * pool_at(a, a->vp, ((int64_t)tab[j / 128] * 128 + j % 128) * ldk + kh * a->D + e);
                a->out[i * ldq + h * a->D + e] = (float)(acc / sum);
            }
        }
        free(p);
    }
    return 0;
}

/* One kernel here whichever the device would take. */
void choir_cuda_vv_set_split128(bool on) { (void)on; }
void choir_cuda_vv_set_att_warps(int warps) { (void)warps; }
void choir_cuda_vv_set_att_v2(bool on) { (void)on; }
bool choir_cuda_vv_att_v2_on(void) { return false; }
void choir_cuda_vv_set_att_v2_split(int keys) { (void)keys; }
void choir_cuda_vv_set_att_v2_fold(bool on) { (void)on; }
void choir_cuda_vv_set_att_v2_deep(bool on) { (void)on; }
bool choir_cuda_vv_att_v2_deep_on(void) { return false; }
void choir_cuda_vv_set_att_tc(bool on) { (void)on; }
bool choir_cuda_vv_att_tc_on(void) { return false; }
void choir_cuda_vv_prefill_flash(bool on) { (void)on; }
bool choir_cuda_vv_prefill_flash_on(void) { return false; }
void choir_cuda_vv_prefill_flash_warps(int warps) { (void)warps; }
void choir_cuda_vv_prefill_flash_v2(bool on) { (void)on; }
bool choir_cuda_vv_prefill_flash_v2_on(void) { return false; }
void choir_cuda_vv_prefill_flash_wg(int mode) { (void)mode; }
int choir_cuda_vv_prefill_flash_wg_mode(void) { return 0; }
bool choir_cuda_vv_prefill_flash_wg_usable(void) { return false; }
int choir_cuda_vv_wg_selftest(choir_cuda *cu, double *err_s, double *err_o, choir_err *err) {
    (void)cu, (void)err;
    *err_s = *err_o = INFINITY;
    return 1;
}

int choir_cuda_vv_attention_paged(choir_cuda *cu, const float *q, int64_t T, const void *kpool,
                                  const void *vpool, bool kv_bf16, const int32_t *table, int64_t table_stride,
                                  int64_t pos0, const int32_t *pos, int64_t max_keys, int n_heads,
                                  int n_kv, int D, float *out, choir_err *err) {
    (void)cu;
    (void)err;
    att_paged_args a = {q, kpool, vpool, kv_bf16, table, pos, table_stride, pos0, T, pos ? max_keys : pos0 + T,
                        n_heads, n_kv, D, out};
    return fake_cuda_run_or_record(att_paged_run, &a, sizeof a);
}

/* choir_cuda_vv_rope_kv: the fake's rope (fake_cuda.c, the same expressions)
 * on q and k, then k's and v's rows to their destinations as its
 * rows_scatter writes them, positions and slots read when it runs. */
typedef struct rope_kv_args {
    float *q, *k;
    const float *v;
    int64_t T, D;
    int n_heads, n_kv;
    const int32_t *pos;
    float theta;
    choir_cuda_vv_rows_dst kd, vd;
} rope_kv_args;

static void rows_put(const choir_cuda_vv_rows_dst *d, int64_t r, const float *row, int64_t n) {
    int64_t at = (int64_t)(d->slot ? d->slot[r] : (int32_t)r) * d->slot_stride + (int64_t)d->pos[r] * d->ld;
    if (d->bf16) choir_f32_to_bf16_n(row, (uint16_t *)d->dst + at, n);
    else memcpy((float *)d->dst + at, row, (size_t)n * sizeof(float));
}

static int rope_kv_run(const void *args) {
    const rope_kv_args *a = args;
    int64_t D = a->D, half = D / 2, kvd = (int64_t)a->n_kv * D;
    for (int64_t r = 0; r < a->T; r++) {
        for (int64_t i = 0; i < half; i++) {
            float inv_freq = (float)(1.0 / pow((double)a->theta, (double)(2 * i) / (double)D));
            float ang = (float)a->pos[r] * inv_freq, cs = cosf(ang), sn = sinf(ang);
            for (int h = 0; h < a->n_heads + a->n_kv; h++) {
                float *xh = h < a->n_heads ? a->q + (r * a->n_heads + h) * D : a->k + r * kvd + (h - a->n_heads) * D;
                float x0 = xh[i], x1 = xh[i + half];
                xh[i] = x0 * cs - x1 * sn;
                xh[i + half] = x1 * cs + x0 * sn;
            }
        }
        rows_put(&a->kd, r, a->k + r * kvd, kvd);
        rows_put(&a->vd, r, a->v + r * kvd, kvd);
    }
    return 0;
}

int choir_cuda_vv_rope_kv(choir_cuda *cu, float *q, float *k, const float *v, int64_t T, int n_heads, int n_kv,
                          int64_t D, const int32_t *pos, float theta, const choir_cuda_vv_rows_dst *kd,
                          const choir_cuda_vv_rows_dst *vd, choir_err *err) {
    (void)cu;
    if (T <= 0) return 0;
    if (D <= 0 || D % 2 || D > CHOIR_CUDA_VV_ROPE_KV_MAX_D || !kd->dst || !vd->dst)
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "fake cuda: rope and cache rows of %lld values", (long long)D);
    rope_kv_args a = {q, k, v, T, D, n_heads, n_kv, pos, theta, *kd, *vd};
    return fake_cuda_run_or_record(rope_kv_run, &a, sizeof a);
}
