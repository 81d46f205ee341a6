/* conv1d and conv_transpose1d with PyTorch semantics (zero padding, groups,
 * dilation, output_padding).
 *
 * Wide convolutions (Cin/groups * kernel >= CONV_GEMM_MIN_DEPTH) run as
 * im2col + sgemm over blocks of output frames, or sgemm + col2im per block of
 * output channels for the transposed one, with per-worker scratch so memory
 * stays bounded for any length. Narrow ones (depthwise, tiny kernels) run the
 * direct loop, which is also the fallback when scratch cannot be allocated.
 *
 * On AVX-512 CPUs the product is choir's own (x86/avx512_gemm.c) instead of
 * sgemm: im2col writes its rows straight into that kernel's packed panels,
 * blocks are CONV512_FRAME_BLOCK frames (a whole number of its 48-frame
 * panels), and the weights are read where they are, unpacked. */
#include <cblas.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/kernels.h"
#include "choir/pool.h"
#include "tensor/cpu/cpu_kernels.h"

#define CONV_GEMM_MIN_DEPTH 16
#define CONV_FRAME_BLOCK    256 /* output frames per im2col block */
#define CONVT_CHANNEL_BLOCK 16
#if defined(CHOIR_X86)
#define CONV512_FRAME_BLOCK (8 * CHOIR_G512_NR)
#else
#define CONV512_FRAME_BLOCK CONV_FRAME_BLOCK
#endif

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
    bool g512;           /* the AVX-512 product instead of sgemm */
    int64_t frame_block; /* frames per block */
    int64_t mparts;      /* conv1d: tasks per frame block, each a slice of the output channels */
    int64_t mchunk;      /* output channels per slice (a multiple of 8) */
} conv_job;

static int64_t round16(int64_t n) { return (n + 15) / 16 * 16; }

/* Floats of the AVX-512 product's packed B for a depth x frames block. */
static int64_t bpack_floats(int64_t depth, int64_t frames) {
#if defined(CHOIR_X86)
    return choir_g512_bpack_floats(depth, frames);
#else
    return depth * round16(frames);
#endif
}

/* The AVX-512 product (it falls back to sgemm elsewhere). */
static bool use_g512(void) {
#if defined(CHOIR_X86)
    return choir_kernels_isa() == CHOIR_ISA_AVX512;
#else
    return false;
#endif
}

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

/* One im2col row of a frame block: cr[tt] = xr[(t_first+tt)*stride - padding
 * + k*dilation] for tt < nt, zero where that frame is outside x. */
/* The first input frame of tap k for output frame t_first, and the block's
 * frames [lo, hi) that read inside x (the rest is zero padding). */
static int64_t im2col_range(const conv_job *j, int64_t k, int64_t t_first, int64_t nt,
                            int64_t *lo, int64_t *hi) {
    int64_t base = t_first * j->stride - j->padding + k * j->dilation;
    *lo = min64(nt, max64(0, floordiv(-base + j->stride - 1, j->stride)));
    *hi = max64(*lo, min64(nt, floordiv(j->T - 1 - base, j->stride) + 1));
    return base;
}

static void im2col_row(const conv_job *j, const float *xr, int64_t k, int64_t t_first, int64_t nt,
                       float *cr) {
    int64_t lo, hi, base = im2col_range(j, k, t_first, nt, &lo, &hi);
    memset(cr, 0, (size_t)lo * sizeof(float));
    if (j->stride == 1) {
        memcpy(cr + lo, xr + (base + lo), (size_t)(hi - lo) * sizeof(float));
    } else {
        for (int64_t tt = lo; tt < hi; tt++)
            cr[tt] = xr[base + tt * j->stride];
    }
    memset(cr + hi, 0, (size_t)(nt - hi) * sizeof(float));
}

/* im2col + sgemm for tasks [begin, end): task b * mparts + part is frame
 * block b, output channels [part * mchunk, +mchunk) of each group. */
static void conv_gemm_range(void *ctx, int64_t begin, int64_t end, int worker) {
    const conv_job *j = ctx;
    int64_t cin_g = j->Cin / j->groups, cout_g = j->Cout / j->groups;
    int64_t depth = cin_g * j->K;
    float *col = j->scratch + (int64_t)worker * j->scratch_per_worker;
    for (int64_t task = begin; task < end; task++) {
        int64_t b = task / j->mparts, part = task % j->mparts;
        int64_t t_first = b * j->frame_block;
        int64_t nt = min64(j->frame_block, j->Tout - t_first);
        int64_t m0 = part * j->mchunk, mn = min64(j->mchunk, cout_g - m0);
        if (mn <= 0) continue;
        for (int64_t g = 0; g < j->groups; g++) {
            /* col[ci*K + k, tt] = x[g*cin_g + ci, (t_first+tt)*stride - padding + k*dilation] */
            for (int64_t ci = 0; ci < cin_g; ci++)
                for (int64_t k = 0; k < j->K; k++)
                    im2col_row(j, j->x + (g * cin_g + ci) * j->T, k, t_first, nt,
                               col + (ci * j->K + k) * nt);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)mn, (blasint)nt,
                        (blasint)depth, 1.0f, j->weight + (g * cout_g + m0) * depth,
                        (blasint)depth, col, (blasint)nt, 1.0f,
                        j->y + (g * cout_g + m0) * j->Tout + t_first, (blasint)j->Tout);
        }
    }
}

#if defined(CHOIR_X86)
/* The same with the AVX-512 product. The inner dimension goes in slices of
 * CHOIR_G512_KC rows: each slice's im2col rows are packed just before the
 * product uses them, so they are still in L2 (a whole block's rows, depth up
 * to 3270 x 384 frames, would not be). */
static void conv512_range(void *ctx, int64_t begin, int64_t end, int worker) {
    const conv_job *j = ctx;
    int64_t cin_g = j->Cin / j->groups, cout_g = j->Cout / j->groups;
    int64_t depth = cin_g * j->K, slice = min64(depth, CHOIR_G512_KC);
    float *bp = j->scratch + (int64_t)worker * j->scratch_per_worker;
    for (int64_t task = begin; task < end; task++) {
        int64_t b = task / j->mparts, part = task % j->mparts;
        int64_t t_first = b * j->frame_block;
        int64_t nt = min64(j->frame_block, j->Tout - t_first);
        int64_t m0 = part * j->mchunk, mn = min64(j->mchunk, cout_g - m0);
        if (mn <= 0) continue;
        for (int64_t g = 0; g < j->groups; g++) {
            const float *w = j->weight + (g * cout_g + m0) * depth;
            float *yb = j->y + (g * cout_g + m0) * j->Tout + t_first;
            /* The task's tile of y starts as the bias: filled here, by the
             * worker, just before its first slice adds onto it. */
            for (int64_t m = 0; m < mn; m++) {
                float bias = j->bias ? j->bias[g * cout_g + m0 + m] : 0.0f;
                float *yr = yb + m * j->Tout;
                for (int64_t t = 0; t < nt; t++) yr[t] = bias;
            }
            for (int64_t r0 = 0; r0 < depth; r0 += slice) {
                int64_t kc = min64(slice, depth - r0);
                /* Row r of col is input channel r / K, tap r % K. */
                for (int64_t r = r0; r < r0 + kc; r++) {
                    int64_t lo, hi, base = im2col_range(j, r % j->K, t_first, nt, &lo, &hi);
                    choir_g512_pack_conv_row(j->x + (g * cin_g + r / j->K) * j->T, base,
                                             j->stride, lo, hi, nt, r - r0, kc, bp);
                }
                choir_g512_gemm(mn, nt, kc, w + r0, depth, 1, bp, yb, j->Tout, true);
            }
        }
    }
}
#endif

/* Per-worker scratch floats of conv1d's gemm path. */
static int64_t conv_scratch_floats(bool g512, int64_t depth, int64_t Tout) {
    if (!g512) return depth * min64(CONV_FRAME_BLOCK, Tout);
    int64_t nt = min64(CONV512_FRAME_BLOCK, Tout);
#if defined(CHOIR_X86)
    depth = min64(depth, CHOIR_G512_KC);
#endif
    return bpack_floats(depth, nt) + round16(nt);
}

void choir_conv1d(const float *x, int64_t Cin, int64_t T, const float *weight, const float *bias,
                  int64_t Cout, int64_t kernel, int stride, int padding, int dilation, int groups,
                  float *y) {
    int64_t Tout = choir_conv1d_out_len(T, kernel, stride, padding, dilation);
    if (Tout <= 0 || Cout <= 0 || groups < 1) return;
    choir_blas_init();
    conv_job j = {.ops = choir_cpu_ops_now(), .x = x, .weight = weight, .bias = bias,
                  .Cin = Cin, .T = T, .Cout = Cout, .K = kernel, .Tout = Tout,
                  .stride = stride, .padding = padding, .dilation = dilation, .groups = groups,
                  .y = y, .mparts = 1};
    choir_pool *pool = choir_pool_default();
    int64_t depth = Cin / groups * kernel;
    /* The AVX-512 path's workers write the bias into their own tiles. */
    bool bias_filled = false;
    if (!(depth >= CONV_GEMM_MIN_DEPTH && use_g512())) {
        fill_bias(y, bias, Cout, Tout);
        bias_filled = true;
    }
    if (depth >= CONV_GEMM_MIN_DEPTH) {
        int threads = choir_pool_threads(pool);
        j.g512 = use_g512();
        j.frame_block = j.g512 ? CONV512_FRAME_BLOCK : CONV_FRAME_BLOCK;
        j.scratch_per_worker = conv_scratch_floats(j.g512, depth, Tout);
        j.scratch = choir_kscratch_get((size_t)threads * (size_t)j.scratch_per_worker * sizeof(float));
        if (j.scratch) {
            int64_t blocks = (Tout + j.frame_block - 1) / j.frame_block;
            /* Fewer blocks than two per thread (short inputs): split the
             * output channels too, in slices of 8, so every thread works. */
            int64_t cout_g = Cout / groups, slices = (cout_g + 7) / 8;
            j.mparts = 1;
            if (j.g512 && blocks < 2 * threads)
                j.mparts = min64(slices, (2 * threads + blocks - 1) / blocks);
            j.mchunk = (slices + j.mparts - 1) / j.mparts * 8;
            j.mparts = (slices * 8 + j.mchunk - 1) / j.mchunk;
            choir_range_fn fn = conv_gemm_range;
#if defined(CHOIR_X86)
            if (j.g512) fn = conv512_range;
#endif
            choir_pool_parallel_for(pool, blocks * j.mparts, 1, fn, &j);
            choir_kscratch_put(j.scratch);
            return;
        }
    }
    if (!bias_filled) fill_bias(y, bias, Cout, Tout);
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
    /* The AVX-512 path packs the block's input frames here first. */
    float *xpack = j->g512 ? col + round16(min64(CONVT_CHANNEL_BLOCK, cout_g) * j->K *
                                           min64(j->frame_block, j->T))
                           : NULL;
    for (int64_t b = begin; b < end; b++) {
        int64_t g = b / per_group;
        int64_t c0 = (b % per_group) * CONVT_CHANNEL_BLOCK;
        int64_t nc = min64(CONVT_CHANNEL_BLOCK, cout_g - c0);
        const float *wg = j->weight + g * cin_g * cout_g * j->K;
        for (int64_t t_first = 0; t_first < j->T; t_first += j->frame_block) {
            int64_t nt = min64(j->frame_block, j->T - t_first);
            const float *xg = j->x + g * cin_g * j->T + t_first;
#if defined(CHOIR_X86)
            if (j->g512) {
                /* col[m, t] = sum_ci W[ci, c0*K + m] x[ci, t]: W's rows are
                 * the inner dimension, read in place (ars 1, acs cout_g*K). */
                choir_g512_pack_b(xg, j->T, cin_g, nt, xpack);
                choir_g512_gemm(nc * j->K, nt, cin_g, wg + c0 * j->K, 1, cout_g * j->K, xpack,
                                col, nt, false);
            } else
#endif
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (blasint)(nc * j->K),
                            (blasint)nt, (blasint)cin_g, 1.0f, wg + c0 * j->K,
                            (blasint)(cout_g * j->K), xg, (blasint)j->T, 0.0f, col, (blasint)nt);
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

/* Per-worker scratch floats of conv_transpose1d's gemm path: the columns
 * (and, for the AVX-512 product, the packed input frames). */
static int64_t convt_scratch_floats(bool g512, int64_t cin_g, int64_t cout_g, int64_t kernel,
                                    int64_t T) {
    int64_t nt = min64(g512 ? CONV512_FRAME_BLOCK : CONV_FRAME_BLOCK, T);
    int64_t cols = min64(CONVT_CHANNEL_BLOCK, cout_g) * kernel * nt;
    return g512 ? round16(cols) + bpack_floats(cin_g, nt) : cols;
}

void choir_conv_transpose1d(const float *x, int64_t Cin, int64_t T, const float *weight,
                            const float *bias, int64_t Cout, int64_t kernel, int stride,
                            int padding, int output_padding, int dilation, int groups, float *y) {
    int64_t Tout =
        choir_conv_transpose1d_out_len(T, kernel, stride, padding, output_padding, dilation);
    if (Tout <= 0 || Cout <= 0 || groups < 1) return;
    choir_blas_init();
    fill_bias(y, bias, Cout, Tout);
    conv_job j = {.ops = choir_cpu_ops_now(), .x = x, .weight = weight, .bias = bias,
                  .Cin = Cin, .T = T, .Cout = Cout, .K = kernel, .Tout = Tout,
                  .stride = stride, .padding = padding, .dilation = dilation, .groups = groups,
                  .y = y, .mparts = 1};
    choir_pool *pool = choir_pool_default();
    int64_t cin_g = Cin / groups, cout_g = Cout / groups;
    if (cin_g >= CONV_GEMM_MIN_DEPTH) {
        int threads = choir_pool_threads(pool);
        j.g512 = use_g512();
        j.frame_block = j.g512 ? CONV512_FRAME_BLOCK : CONV_FRAME_BLOCK;
        j.scratch_per_worker = convt_scratch_floats(j.g512, cin_g, cout_g, kernel, T);
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
    /* The larger of the two paths', so a plan holds whichever ISA runs. */
    int64_t per = max64(conv_scratch_floats(false, depth, Tout),
                        conv_scratch_floats(true, depth, Tout));
    return (size_t)choir_pool_threads(choir_pool_default()) * (size_t)per * sizeof(float);
}

size_t choir_conv_transpose1d_scratch_bytes(int64_t Cin, int64_t T, int64_t Cout,
                                            int64_t kernel, int groups) {
    if (groups < 1 || T <= 0) return 0;
    int64_t cin_g = Cin / groups, cout_g = Cout / groups;
    if (cin_g < CONV_GEMM_MIN_DEPTH) return 0;
    int64_t per = max64(convt_scratch_floats(false, cin_g, cout_g, kernel, T),
                        convt_scratch_floats(true, cin_g, cout_g, kernel, T));
    return (size_t)choir_pool_threads(choir_pool_default()) * (size_t)per * sizeof(float);
}
