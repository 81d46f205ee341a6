/* Kokoro's Snake-unit convolution fused (choir_cuda_conv1d_adain_snake,
 * choir/cuda_audio.h): y = residual + conv1d(snake(adain(x))). AdaIN's
 * statistics in one pass over x (double sums, fixed order), the AdaIN and
 * Snake coefficients per (item, channel), then the implicit GEMM of
 * cuda_conv.cu with the pre-activation applied one of two ways:
 * - by default, as the convolution stages x (IG_X_PRO): the activation is
 *   never stored, but its sinf and coefficient loads run in the main loop;
 * - with CHOIR_CUDA_CONV_PREPASS, k_ig_prepass writes it once, rounded to
 *   the product's operands and laid out as the staged rows (IG_XP_FRAME),
 *   and the convolution brings it by cp.async (IG_X_PRE). Bytes at a 40-s
 *   piece's stage-1 shape (128 x 192001 per item): the prepass reads 98 MB
 *   and writes 49 MB (bf16) or 98 MB, ~50 / ~65 us at 3 TB/s, against a
 *   fixed ~0.21-0.24 ms a convolution measured on the H100 for the staging
 *   in the main loop. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifndef CHOIR_IG_EMU
#include <cuda_bf16.h>

#include "choir/cuda_audio.h"
#include "tensor/cuda/cuda_internal.h"
#endif
#include "tensor/cuda/cuda_conv_ig.h"

/* The prepass (CHOIR_CUDA_CONV_PREPASS): snake(adain(x)) of chunk
 * blockIdx.y % nchunk of item blockIdx.y / nchunk, written as staged frames
 * (IG_XP_FRAME): a thread per frame reads the chunk's CK channels at it
 * (each warp 128 contiguous bytes a channel) and writes its 32 bytes (a warp
 * 1 KB contiguous). The pre-activation is adain_snake, so the staged words
 * are the fused path's bit for bit. */
template <int MODE, bool FAST>
__global__ void __launch_bounds__(256)
    k_ig_prepass(const float *__restrict__ x, const float *__restrict__ coef,
                 const int32_t *__restrict__ in_lens, int64_t Cin, int64_t T, int nchunk,
                 void *__restrict__ xp) {
    constexpr int CK = MODE == IG_BF16 ? 16 : 8;
    constexpr int VPW = MODE == IG_BF16 ? 2 : 1;
    __shared__ float cfs[CK][IG_COEF];
    const int64_t bc = blockIdx.y, b = bc / nchunk;
    const int c = (int)(bc % nchunk);
    for (int i = threadIdx.x; i < CK * IG_COEF; i += blockDim.x) {
        const int64_t ci = (int64_t)c * CK + i / IG_COEF;
        cfs[i / IG_COEF][i % IG_COEF] =
            ci < Cin ? coef[(b * Cin + ci) * IG_COEF + i % IG_COEF] : 0.0f;
    }
    __syncthreads();
    int64_t tlim = in_lens ? (int64_t)in_lens[b] : T;
    tlim = tlim < T ? tlim : T;
    const int nch = Cin - (int64_t)c * CK < CK ? (int)(Cin - (int64_t)c * CK) : CK;
    const float *xc = x + (b * Cin + (int64_t)c * CK) * T;
    unsigned char *dst = (unsigned char *)xp + bc * T * IG_XP_FRAME;
    GRID_STRIDE(t, T) {
        uint32_t word[8];
#pragma unroll
        for (int w = 0; w < 8; w++) {
            float v[VPW];
#pragma unroll
            for (int u = 0; u < VPW; u++) {
                const int j = w * VPW + u;
                v[u] = 0.0f;
                if (t < tlim && j < nch) {
                    if constexpr (FAST)
                        v[u] = adain_snake_fast(__ldg(xc + j * T + t), cfs[j]);
                    else
                        v[u] = adain_snake(__ldg(xc + j * T + t), cfs[j]);
                }
            }
            word[w] = ig_word<MODE>(v);
        }
        ig_st_frame(dst + t * IG_XP_FRAME, word);
    }
}

#ifndef CHOIR_IG_EMU
/* --- AdaIN statistics for the fused pre-activation ---------------------------- */

/* Block (row, s) sums segment s of row's valid samples and their squares in
 * double: part[row S + s]. */
__global__ void k_ig_stats(const float *__restrict__ x, int64_t C, int64_t T,
                           const int32_t *lens, int S, int64_t seg, double2 *part) {
    __shared__ double sh[2][32];
    const int64_t row = blockIdx.x, b = row / C;
    int64_t n = lens ? (int64_t)lens[b] : T;
    n = n < 0 ? 0 : (n > T ? T : n);
    const int64_t lo = (int64_t)blockIdx.y * seg, hi = lo + seg < n ? lo + seg : n;
    const float *xr = x + row * T;
    double s = 0, q = 0;
    int64_t t = lo + threadIdx.x;
    for (; t + 3 * (int64_t)blockDim.x < hi; t += 4 * (int64_t)blockDim.x) {
        float v0 = xr[t], v1 = xr[t + blockDim.x], v2 = xr[t + 2 * blockDim.x],
              v3 = xr[t + 3 * blockDim.x];
        s += (double)v0 + (double)v1 + (double)v2 + (double)v3;
        q += (double)v0 * v0 + (double)v1 * v1 + (double)v2 * v2 + (double)v3 * v3;
    }
    for (; t < hi; t += blockDim.x) {
        double v = xr[t];
        s += v;
        q += v * v;
    }
    for (int o = 16; o > 0; o >>= 1) {
        s += __shfl_down_sync(0xffffffffu, s, o);
        q += __shfl_down_sync(0xffffffffu, q, o);
    }
    const int w = threadIdx.x >> 5;
    if ((threadIdx.x & 31) == 0) sh[0][w] = s, sh[1][w] = q;
    __syncthreads();
    if (threadIdx.x == 0) {
        s = 0, q = 0;
        for (int i = 0; i < (int)(blockDim.x >> 5); i++) s += sh[0][i], q += sh[1][i];
        part[row * S + blockIdx.y] = make_double2(s, q);
    }
}

/* A row's sums of its S parts (pairs of doubles: sum, sum of squares) into
 * mean and variance (k_ig_coef's arithmetic), then the AdaIN and Snake
 * coefficients (coef NULL: none) and the moments (mv NULL: none). WARP:
 * a warp per (item, channel), lane l summing parts l, l + 32, ... in order,
 * the lanes added by xor shuffles (the per-128-frame partials of
 * choir_cuda_adain_stats or of the producing convolution, hundreds a row);
 * else a thread per row, the parts in order (k_ig_stats's few segments, the
 * sums bit for bit as before). */
template <bool WARP>
__global__ void k_ig_coef(const double *__restrict__ part, int64_t S, int64_t rows, int64_t C,
                          int64_t T, const int32_t *lens, choir_cuda_adain_snake p,
                          float *__restrict__ coef, double *__restrict__ mv) {
    const int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t row = WARP ? id >> 5 : id;
    const int lane = WARP ? (int)(threadIdx.x & 31) : 0;
    if (row >= rows) return; /* WARP: a warp's lanes share the row */
    const int64_t b = row / C, c = row % C;
    int64_t n = lens ? (int64_t)lens[b] : T;
    n = n < 0 ? 0 : (n > T ? T : n);
    double s = 0, q = 0;
    for (int64_t i = lane; i < S; i += WARP ? 32 : 1)
        s += part[(row * S + i) * 2], q += part[(row * S + i) * 2 + 1];
    if constexpr (WARP) {
        for (int o = 16; o > 0; o >>= 1) {
            s += __shfl_xor_sync(0xffffffffu, s, o);
            q += __shfl_xor_sync(0xffffffffu, q, o);
        }
        if (lane) return;
    }
    double mean = n > 0 ? s / (double)n : 0.0, var = n > 0 ? q / (double)n - mean * mean : 0.0;
    if (var < 0) var = 0;
    if (mv) mv[row * 2] = mean, mv[row * 2 + 1] = var;
    if (!coef) return;
    float a = 1.0f / sqrtf((float)var + p.eps), bb = 0.0f;
    if (p.norm_w) a *= p.norm_w[c];
    if (p.norm_b) bb = p.norm_b[c];
    const float *g = p.gb + b * p.gb_stride;
    float *cf = coef + row * IG_COEF;
    cf[0] = (float)mean;
    cf[1] = a;
    cf[2] = bb;
    cf[3] = 1.0f + g[c];
    cf[4] = g[C + c];
    cf[5] = p.alpha[c];
    cf[6] = 1.0f / p.alpha[c];
    cf[7] = 0.0f;
}

/* choir_cuda_adain_stats: a warp per (row, 128-frame tile), lane l summing
 * frames l, l + 32, l + 64, l + 96 of the tile in order (those below the
 * item's length), the lanes added by xor shuffles; lane 0 writes the slot. */
__global__ void k_ig_stats_part(const float *__restrict__ x, int64_t C, int64_t T,
                                const int32_t *lens, int64_t rows, double *__restrict__ part) {
    const int64_t ntiles = IG_STAT_TILES(T);
    const int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (w >= rows * ntiles) return;
    const int64_t row = w / ntiles, tile = w % ntiles, b = row / C;
    int64_t n = lens ? (int64_t)lens[b] : T;
    n = n < 0 ? 0 : (n > T ? T : n);
    const float *xr = x + row * T;
    double s = 0, q = 0;
#pragma unroll
    for (int k = 0; k < IG_STAT_FRAMES / 32; k++) {
        const int64_t t = tile * IG_STAT_FRAMES + k * 32 + lane;
        if (t < n) {
            const double v = xr[t];
            s += v;
            q += v * v;
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        s += __shfl_xor_sync(0xffffffffu, s, o);
        q += __shfl_xor_sync(0xffffffffu, q, o);
    }
    if (lane == 0) part[w * 2] = s, part[w * 2 + 1] = q;
}

int64_t choir_cuda_adain_stat_tiles(int64_t T) { return T > 0 ? IG_STAT_TILES(T) : 0; }

int choir_cuda_adain_stats(choir_cuda *cu, const float *x, int64_t B, int64_t C, int64_t T,
                           const int32_t *lens, double *part, choir_err *err) {
    if (!cu || !x || !part || B < 1 || C < 1 || T < 1)
        return choir_err_set(err, CHOIR_EINVAL, "cuda: adain_stats of B %lld, C %lld, T %lld",
                             (long long)B, (long long)C, (long long)T);
    const int64_t warps = B * C * IG_STAT_TILES(T);
    k_ig_stats_part<<<choir_cuda_blocks(warps * 32, 256), 256, 0, cu->stream>>>(x, C, T, lens,
                                                                               B * C, part);
    return choir_cuda_check_launch(err, "adain statistics partials");
}

/* The statistics' segments of choir_cuda_conv1d_adain_snake's own pass:
 * enough blocks to fill the device, each at least 2048 samples. */
static int64_t ig_stat_segments(const choir_cuda *cu, int64_t rows, int64_t T) {
    const int64_t want = 4 * (int64_t)(cu->props.sm_count > 0 ? cu->props.sm_count : 132);
    int64_t S = (want + rows - 1) / rows;
    if (S > (T + 2047) / 2048) S = (T + 2047) / 2048;
    if (S < 1) S = 1;
    if (S > 1024) S = 1024;
    return S;
}

int choir_cuda_adain_moments(choir_cuda *cu, const float *x, int64_t B, int64_t C, int64_t T,
                             const int32_t *lens, const double *part, double *mean_var,
                             choir_err *err) {
    if (!cu || (!x && !part) || !mean_var || B < 1 || C < 1 || T < 1)
        return choir_err_set(err, CHOIR_EINVAL, "cuda: adain_moments of B %lld, C %lld, T %lld",
                             (long long)B, (long long)C, (long long)T);
    const int64_t rows = B * C;
    choir_cuda_adain_snake none;
    memset(&none, 0, sizeof none);
    if (part) {
        k_ig_coef<true><<<choir_cuda_blocks(rows * 32, 256), 256, 0, cu->stream>>>(
            part, IG_STAT_TILES(T), rows, C, T, lens, none, NULL, mean_var);
        return choir_cuda_check_launch(err, "adain moments from partials");
    }
    const int64_t S = ig_stat_segments(cu, rows, T), seg = (T + S - 1) / S;
    double2 *sp = (double2 *)choir_cuda_scratch(cu, (size_t)(rows * S) * sizeof(double2), err);
    if (!sp) return err ? err->code : CHOIR_ENOMEM;
    k_ig_stats<<<dim3((unsigned)rows, (unsigned)S), 256, 0, cu->stream>>>(x, C, T, lens, (int)S,
                                                                           seg, sp);
    int rc = choir_cuda_check_launch(err, "adain statistics");
    if (rc) return rc;
    k_ig_coef<false><<<choir_cuda_blocks(rows, 256), 256, 0, cu->stream>>>(
        (const double *)sp, S, rows, C, T, lens, none, NULL, mean_var);
    return choir_cuda_check_launch(err, "adain moments");
}

static size_t align256(size_t n) { return (n + 255) / 256 * 256; }

/* The prepass path of choir_cuda_conv1d_adain_snake: items in groups whose
 * staged frames fit the context's prepass bytes (at least one item), each
 * group's snake(adain(x)) written to `xp`, then convolved from it. */
static int ig_prepass_conv(choir_cuda *cu, int mode, ig_args a, int64_t B, int64_t group,
                           const float *x, const int32_t *in_lens, const float *coef, void *xp,
                           choir_err *err) {
    const bool fast = (cu->conv_opts & CHOIR_CUDA_CONV_FAST_SIN) && mode != IG_TF32X3;
    const int64_t Cin = a.Cin, T = a.T, Cout = a.Cout, Tout = a.Tout;
    const int32_t *out_lens = a.out_lens, *stats_lens = a.stats_lens;
    const float *residual = a.residual;
    double *stats = a.stats;
    float *y = a.y;
    void (*prep)(const float *, const float *, const int32_t *, int64_t, int64_t, int, void *) =
        mode == IG_BF16   ? (fast ? k_ig_prepass<IG_BF16, true> : k_ig_prepass<IG_BF16, false>)
        : mode == IG_TF32 ? (fast ? k_ig_prepass<IG_TF32, true> : k_ig_prepass<IG_TF32, false>)
                          : k_ig_prepass<IG_TF32X3, false>;
    for (int64_t g0 = 0; g0 < B; g0 += group) {
        const int64_t gb = B - g0 < group ? B - g0 : group;
        dim3 grid((unsigned)((T + 1023) / 1024), (unsigned)(gb * a.nchunk));
        const float *xg = x + g0 * Cin * T, *cg = coef + g0 * Cin * IG_COEF;
        const int32_t *lg = in_lens ? in_lens + g0 : NULL;
        prep<<<grid, 256, 0, cu->stream>>>(xg, cg, lg, Cin, T, a.nchunk, xp);
        int rc = choir_cuda_check_launch(err, "conv prepass");
        if (rc) return rc;
        a.xp = xp;
        a.out_lens = out_lens ? out_lens + g0 : NULL;
        a.stats = stats ? stats + g0 * Cout * IG_STAT_TILES(Tout) * 2 : NULL;
        a.stats_lens = stats_lens ? stats_lens + g0 : NULL;
        a.residual = residual ? residual + g0 * Cout * Tout : NULL;
        a.y = y + g0 * Cout * Tout;
        if ((rc = ig_launch(cu, mode, IG_X_PRE, a, gb, err))) return rc;
    }
    return 0;
}

int choir_cuda_conv1d_adain_snake(choir_cuda *cu, const float *x, int64_t B, int64_t Cin,
                                  int64_t T, const choir_cuda_adain_snake *pre,
                                  choir_cuda_conv_weight weight, const float *bias, int64_t Cout,
                                  int64_t kernel, int padding, int dilation,
                                  const int32_t *out_lens, const float *residual, float *y,
                                  choir_err *err) {
    return choir_cuda_conv1d_adain_snake_stats(cu, x, B, Cin, T, pre, weight, bias, Cout, kernel,
                                               padding, dilation, out_lens, residual, y, NULL,
                                               NULL, err);
}

int choir_cuda_conv1d_adain_snake_stats(choir_cuda *cu, const float *x, int64_t B, int64_t Cin,
                                        int64_t T, const choir_cuda_adain_snake *pre,
                                        choir_cuda_conv_weight weight, const float *bias,
                                        int64_t Cout, int64_t kernel, int padding, int dilation,
                                        const int32_t *out_lens, const float *residual, float *y,
                                        double *stats_out, const int32_t *stats_lens,
                                        choir_err *err) {
    if (!cu || !x || !pre || !pre->gb || !pre->alpha || !weight.w || !y || B < 1 || Cin < 1 ||
        T < 1 || Cout < 1 || kernel < 1 || padding < 0 || dilation < 1 ||
        B * Cin > INT32_MAX)
        return choir_err_set(err, CHOIR_EINVAL,
                             "cuda: conv1d_adain_snake with B %lld, Cin %lld, T %lld, Cout %lld, "
                             "kernel %lld, padding %d, dilation %d or a missing pointer",
                             (long long)B, (long long)Cin, (long long)T, (long long)Cout,
                             (long long)kernel, padding, dilation);
    if (!choir_cuda_conv1d_implicit_ok(cu, Cin, Cout, kernel, 1, padding, dilation))
        return choir_err_set(err, CHOIR_EUNSUPPORTED,
                             "cuda: conv1d_adain_snake: kernel %lld, dilation %d, or the im2col "
                             "path asked for",
                             (long long)kernel, dilation);
    const int mode = ig_mode(cu, weight), CK = mode == IG_BF16 ? 16 : 8;
    /* statistics: x's partials when given (pre->part), else one pass here */
    const int64_t rows = B * Cin;
    const int64_t S = pre->part ? 0 : ig_stat_segments(cu, rows, T);
    const int64_t seg = pre->part ? 0 : (T + S - 1) / S;
    /* the prepass's group: its frames within the context's bytes, its grid's
     * y (items x chunks) within 65535 */
    const bool prepass = (cu->conv_opts & CHOIR_CUDA_CONV_PREPASS) != 0;
    const int64_t nchunk = (Cin + CK - 1) / CK, per_item = nchunk * T * IG_XP_FRAME;
    int64_t group = prepass ? cu->conv_prepass_bytes / per_item : 0;
    if (prepass) {
        if (group > 65535 / nchunk) group = 65535 / nchunk;
        if (group > B) group = B;
        if (group < 1) group = 1;
    }
    const size_t pack = align256(ig_pack_bytes(mode, Cin, Cout, kernel));
    const size_t parts = align256((size_t)(rows * S) * sizeof(double2));
    const size_t coefs = align256((size_t)rows * IG_COEF * sizeof(float));
    const size_t xpb = (size_t)(group * per_item);
    char *scr = (char *)choir_cuda_scratch(cu, pack + parts + coefs + xpb, err);
    if (!scr) return err ? err->code : CHOIR_ENOMEM;
    double2 *part = (double2 *)(scr + pack);
    float *coef = (float *)(scr + pack + parts);
    int rc;
    if (pre->part) {
        k_ig_coef<true><<<choir_cuda_blocks(rows * 32, 256), 256, 0, cu->stream>>>(
            pre->part, IG_STAT_TILES(T), rows, Cin, T, pre->lens, *pre, coef, NULL);
    } else {
        k_ig_stats<<<dim3((unsigned)rows, (unsigned)S), 256, 0, cu->stream>>>(
            x, Cin, T, pre->lens, (int)S, seg, part);
        if ((rc = choir_cuda_check_launch(err, "adain statistics"))) return rc;
        k_ig_coef<false><<<choir_cuda_blocks(rows, 256), 256, 0, cu->stream>>>(
            (const double *)part, S, rows, Cin, T, pre->lens, *pre, coef, NULL);
    }
    if ((rc = choir_cuda_check_launch(err, "adain coefficients"))) return rc;
    ig_args a;
    rc = ig_setup(cu, mode, B, Cin, T, weight, Cout, kernel, padding, dilation, scr, &a, err);
    if (rc || a.Tout <= 0) return rc;
    a.bias = bias, a.out_lens = out_lens, a.residual = residual, a.y = y;
    a.stats = stats_out, a.stats_lens = stats_lens;
    if (prepass)
        return ig_prepass_conv(cu, mode, a, B, group, x, pre->lens, coef,
                               scr + pack + parts + coefs, err);
    a.x = x, a.in_lens = pre->lens, a.coef = coef;
    return ig_launch(cu, mode, IG_X_PRO, a, B, err);
}
#endif /* CHOIR_IG_EMU */
