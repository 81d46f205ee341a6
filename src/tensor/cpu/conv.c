/* conv1d and conv_transpose1d with PyTorch semantics (zero padding, groups,
 * dilation, output_padding).
 *
 * Wide convolutions (Cin/groups * kernel >= CONV_GEMM_MIN_DEPTH) run as
 * im2col + sgemm over blocks of output frames, or sgemm + col2im per block of
 * output channels for the transposed one, with per-worker scratch so memory
 * stays bounded for any length. Narrow ones (depthwise, tiny kernels) run the
 * direct loop, which is also the fallback when scratch cannot be allocated. */
#include <cblas.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/kernels.h"
#include "choir/pool.h"
#include "tensor/cpu/cpu_kernels.h"

#define CONV_GEMM_MIN_DEPTH 16
#define CONV_FRAME_BLOCK    256 /* output frames per im2col block */
#define CONVT_CHANNEL_BLOCK 16

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
/* floor(a / b) for b > 0 and any sign of a. */
static int64_t floordiv(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

int64_t choir_conv1d_out_len(int64_t T, int64_t kernel, int stride, int padding, int dilation) {
    if (stride < 1 || dilation < 1 || kernel < 1) return 0;
    int64_t span = (int64_t)dilation * (kernel - 1) + 1;
    int64_t n = T + 2 * (int64_t)padding - span;
    return n < 0 ? 0 : n / stride + 1;
}

int64_t choir_conv_transpose1d_out_len(int64_t T, int64_t kernel, int stride, int padding,
                                       int output_padding, int dilation) {
    if (T <= 0 || stride < 1 || dilation < 1 || kernel < 1) return 0;
    int64_t n = (T - 1) * stride - 2 * (int64_t)padding + (int64_t)dilation * (kernel - 1) +
                output_padding + 1;
    return n < 0 ? 0 : n;
}

typedef struct conv_job {
    const choir_cpu_ops *ops;
    const float *x, *weight, *bias;
    int64_t Cin, T, Cout, K, Tout;
    int stride, padding, dilation, groups;
    float *y;
    float *scratch;
    int64_t scratch_per_worker;
} conv_job;

static void fill_bias(float *y, const float *bias, int64_t C, int64_t T) {
    for (int64_t c = 0; c < C; c++) {
        float b = bias ? bias[c] : 0.0f;
        for (int64_t t = 0; t < T; t++)
            y[c * T + t] = b;
    }
}

/* Direct conv1d for output channels [begin, end): y[co] += w * shifted x[ci]. */
static void conv_direct_range(void *ctx, int64_t begin, int64_t end, int worker) {
    const conv_job *j = ctx;
    int64_t cin_g = j->Cin / j->groups, cout_g = j->Cout / j->groups;
    for (int64_t co = begin; co < end; co++) {
        int64_t g = co / cout_g;
        float *yr = j->y + co * j->Tout;
        for (int64_t ci = 0; ci < cin_g; ci++) {
            const float *xr = j->x + (g * cin_g + ci) * j->T;
            const float *wr = j->weight + (co * cin_g + ci) * j->K;
            for (int64_t k = 0; k < j->K; k++) {
                /* Output frames t whose input frame t*stride - padding + k*dilation is inside x. */
                int64_t off = k * j->dilation - j->padding;
                int64_t t0 = max64(0, floordiv(-off + j->stride - 1, j->stride));
                int64_t t1 = min64(j->Tout, floordiv(j->T - 1 - off, j->stride) + 1);
                if (t1 <= t0) continue;
                float w = wr[k];
                if (j->stride == 1) {
                    j->ops->axpy(w, xr + (t0 + off), yr + t0, t1 - t0);
                } else {
                    for (int64_t t = t0; t < t1; t++)
                        yr[t] += w * xr[t * j->stride + off];
                }
            }
        }
    }
}

/* im2col + sgemm for output frame blocks [begin, end). */
static void conv_gemm_range(void *ctx, int64_t begin, int64_t end, int worker) {
    const conv_job *j = ctx;
    int64_t cin_g = j->Cin / j->groups, cout_g = j->Cout / j->groups;
    int64_t depth = cin_g * j->K;
    float *col = j->scratch + (int64_t)worker * j->scratch_per_worker;
    for (int64_t b = begin; b < end; b++) {
        int64_t t_first = b * CONV_FRAME_BLOCK;
        int64_t nt = min64(CONV_FRAME_BLOCK, j->Tout - t_first);
        for (int64_t g = 0; g < j->groups; g++) {
            /* col[ci*K + k, tt] = x[g*cin_g + ci, (t_first+tt)*stride - padding + k*dilation] */
            for (int64_t ci = 0; ci < cin_g; ci++) {
                const float *xr = j->x + (g * cin_g + ci) * j->T;
                for (int64_t k = 0; k < j->K; k++) {
                    float *cr = col + (ci * j->K + k) * nt;
                    int64_t base = t_first * j->stride - j->padding + k * j->dilation;
                    /* Frames [lo, hi) read inside x; the rest is zero padding. */
                    int64_t lo = min64(nt, max64(0, floordiv(-base + j->stride - 1, j->stride)));
                    int64_t hi = max64(lo, min64(nt, floordiv(j->T - 1 - base, j->stride) + 1));
                    memset(cr, 0, (size_t)lo * sizeof(float));
                    if (j->stride == 1) {
                        memcpy(cr + lo, xr + (base + lo), (size_t)(hi - lo) * sizeof(float));
                    } else {
                        for (int64_t tt = lo; tt < hi; tt++)
                            cr[tt] = xr[base + tt * j->stride];
                    }
                    memset(cr + hi, 0, (size_t)(nt - hi) * sizeof(float));
                }
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)cout_g, (blasint)nt,
                        (blasint)depth, 1.0f, j->weight + g * cout_g * depth, (blasint)depth, col,
                        (blasint)nt, 1.0f, j->y + g * cout_g * j->Tout + t_first, (blasint)j->Tout);
        }
    }
}

void choir_conv1d(const float *x, int64_t Cin, int64_t T, const float *weight, const float *bias,
                  int64_t Cout, int64_t kernel, int stride, int padding, int dilation, int groups,
                  float *y) {
    int64_t Tout = choir_conv1d_out_len(T, kernel, stride, padding, dilation);
    if (Tout <= 0 || Cout <= 0 || groups < 1) return;
    choir_blas_init();
    fill_bias(y, bias, Cout, Tout);
    conv_job j = {choir_cpu_ops_now(),
                  x,
                  weight,
                  bias,
                  Cin,
                  T,
                  Cout,
                  kernel,
                  Tout,
                  stride,
                  padding,
                  dilation,
                  groups,
                  y,
                  NULL,
                  0};
    choir_pool *pool = choir_pool_default();
    int64_t depth = Cin / groups * kernel;
    if (depth >= CONV_GEMM_MIN_DEPTH) {
        int threads = choir_pool_threads(pool);
        j.scratch_per_worker = depth * min64(CONV_FRAME_BLOCK, Tout);
        j.scratch = choir_kscratch_get((size_t)threads * (size_t)j.scratch_per_worker * sizeof(float));
        if (j.scratch) {
            int64_t blocks = (Tout + CONV_FRAME_BLOCK - 1) / CONV_FRAME_BLOCK;
            choir_pool_parallel_for(pool, blocks, 1, conv_gemm_range, &j);
            choir_kscratch_put(j.scratch);
            return;
        }
    }
    int64_t work = (Cin / groups) * kernel * Tout;
    choir_pool_parallel_for(pool, Cout, 65536 / (work + 1) + 1, conv_direct_range, &j);
}

/* --- transposed ------------------------------------------------------------ */

/* Direct conv_transpose1d for output channels [begin, end). */
static void convt_direct_range(void *ctx, int64_t begin, int64_t end, int worker) {
    const conv_job *j = ctx;
    int64_t cin_g = j->Cin / j->groups, cout_g = j->Cout / j->groups;
    for (int64_t co = begin; co < end; co++) {
        int64_t g = co / cout_g, cog = co % cout_g;
        float *yr = j->y + co * j->Tout;
        for (int64_t ci = 0; ci < cin_g; ci++) {
            int64_t cin = g * cin_g + ci;
            const float *xr = j->x + cin * j->T;
            const float *wr = j->weight + (cin * cout_g + cog) * j->K;
            for (int64_t k = 0; k < j->K; k++) {
                /* Input frames t landing at t*stride + off inside y. */
                int64_t off = k * j->dilation - j->padding;
                int64_t t0 = max64(0, floordiv(-off + j->stride - 1, j->stride));
                int64_t t1 = min64(j->T, floordiv(j->Tout - 1 - off, j->stride) + 1);
                if (t1 <= t0) continue;
                float w = wr[k];
                if (j->stride == 1) {
                    j->ops->axpy(w, xr + t0, yr + (t0 + off), t1 - t0);
                } else {
                    for (int64_t t = t0; t < t1; t++)
                        yr[t * j->stride + off] += w * xr[t];
                }
            }
        }
    }
}

/* sgemm + col2im for blocks of CONVT_CHANNEL_BLOCK output channels of one
 * group: col[c*K + k, t] = sum_ci W[ci, c, k] x[ci, t], then scattered. Each
 * block owns its output rows, so blocks never race. */
static void convt_gemm_range(void *ctx, int64_t begin, int64_t end, int worker) {
    const conv_job *j = ctx;
    int64_t cin_g = j->Cin / j->groups, cout_g = j->Cout / j->groups;
    int64_t per_group = (cout_g + CONVT_CHANNEL_BLOCK - 1) / CONVT_CHANNEL_BLOCK;
    float *col = j->scratch + (int64_t)worker * j->scratch_per_worker;
    for (int64_t b = begin; b < end; b++) {
        int64_t g = b / per_group;
        int64_t c0 = (b % per_group) * CONVT_CHANNEL_BLOCK;
        int64_t nc = min64(CONVT_CHANNEL_BLOCK, cout_g - c0);
        const float *wg = j->weight + g * cin_g * cout_g * j->K;
        for (int64_t t_first = 0; t_first < j->T; t_first += CONV_FRAME_BLOCK) {
            int64_t nt = min64(CONV_FRAME_BLOCK, j->T - t_first);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (blasint)(nc * j->K), (blasint)nt,
                        (blasint)cin_g, 1.0f, wg + c0 * j->K, (blasint)(cout_g * j->K),
                        j->x + g * cin_g * j->T + t_first, (blasint)j->T, 0.0f, col, (blasint)nt);
            for (int64_t c = 0; c < nc; c++) {
                float *yr = j->y + (g * cout_g + c0 + c) * j->Tout;
                for (int64_t k = 0; k < j->K; k++) {
                    const float *cr = col + (c * j->K + k) * nt;
                    int64_t off = (int64_t)k * j->dilation - j->padding + t_first * j->stride;
                    int64_t t0 = max64(0, floordiv(-off + j->stride - 1, j->stride));
                    int64_t t1 = min64(nt, floordiv(j->Tout - 1 - off, j->stride) + 1);
                    if (j->stride == 1) {
                        if (t1 > t0) j->ops->add(yr + (off + t0), cr + t0, yr + (off + t0), t1 - t0);
                    } else {
                        for (int64_t t = t0; t < t1; t++)
                            yr[t * j->stride + off] += cr[t];
                    }
                }
            }
        }
    }
}

void choir_conv_transpose1d(const float *x, int64_t Cin, int64_t T, const float *weight,
                            const float *bias, int64_t Cout, int64_t kernel, int stride,
                            int padding, int output_padding, int dilation, int groups, float *y) {
    int64_t Tout =
        choir_conv_transpose1d_out_len(T, kernel, stride, padding, output_padding, dilation);
    if (Tout <= 0 || Cout <= 0 || groups < 1) return;
    choir_blas_init();
    fill_bias(y, bias, Cout, Tout);
    conv_job j = {choir_cpu_ops_now(),
                  x,
                  weight,
                  bias,
                  Cin,
                  T,
                  Cout,
                  kernel,
                  Tout,
                  stride,
                  padding,
                  dilation,
                  groups,
                  y,
                  NULL,
                  0};
    choir_pool *pool = choir_pool_default();
    int64_t cin_g = Cin / groups, cout_g = Cout / groups;
    if (cin_g >= CONV_GEMM_MIN_DEPTH) {
        int threads = choir_pool_threads(pool);
        j.scratch_per_worker =
            min64(CONVT_CHANNEL_BLOCK, cout_g) * kernel * min64(CONV_FRAME_BLOCK, T);
        j.scratch = choir_kscratch_get((size_t)threads * (size_t)j.scratch_per_worker * sizeof(float));
        if (j.scratch) {
            int64_t blocks = groups * ((cout_g + CONVT_CHANNEL_BLOCK - 1) / CONVT_CHANNEL_BLOCK);
            choir_pool_parallel_for(pool, blocks, 1, convt_gemm_range, &j);
            choir_kscratch_put(j.scratch);
            return;
        }
    }
    int64_t work = cin_g * kernel * T;
    choir_pool_parallel_for(pool, Cout, 65536 / (work + 1) + 1, convt_direct_range, &j);
}

size_t choir_conv1d_scratch_bytes(int64_t Cin, int64_t T, int64_t kernel, int stride,
                                  int padding, int dilation, int groups) {
    if (groups < 1) return 0;
    int64_t Tout = choir_conv1d_out_len(T, kernel, stride, padding, dilation);
    int64_t depth = Cin / groups * kernel;
    if (Tout <= 0 || depth < CONV_GEMM_MIN_DEPTH) return 0;
    return (size_t)choir_pool_threads(choir_pool_default()) *
           (size_t)(depth * min64(CONV_FRAME_BLOCK, Tout)) * sizeof(float);
}

size_t choir_conv_transpose1d_scratch_bytes(int64_t Cin, int64_t T, int64_t Cout,
                                            int64_t kernel, int groups) {
    if (groups < 1 || T <= 0) return 0;
    int64_t cin_g = Cin / groups, cout_g = Cout / groups;
    if (cin_g < CONV_GEMM_MIN_DEPTH) return 0;
    return (size_t)choir_pool_threads(choir_pool_default()) *
           (size_t)(min64(CONVT_CHANNEL_BLOCK, cout_g) * kernel * min64(CONV_FRAME_BLOCK, T)) *
           sizeof(float);
}
