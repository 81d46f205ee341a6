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

/* One thread per (item, channel): the segments summed in order, then the
 * AdaIN and Snake coefficients. */
__global__ void k_ig_coef(const double2 *__restrict__ part, int S, int64_t rows, int64_t C,
                          int64_t T, const int32_t *lens, choir_cuda_adain_snake p,
                          float *__restrict__ coef) {
    int64_t row = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const int64_t b = row / C, c = row % C;
    int64_t n = lens ? (int64_t)lens[b] : T;
    n = n < 0 ? 0 : (n > T ? T : n);
    double s = 0, q = 0;
    for (int i = 0; i < S; i++) s += part[row * S + i].x, q += part[row * S + i].y;
    double mean = n > 0 ? s / (double)n : 0.0, var = n > 0 ? q / (double)n - mean * mean : 0.0;
    if (var < 0) var = 0;
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

static size_t align256(size_t n) { return (n + 255) / 256 * 256; }

/* The prepass path of choir_cuda_conv1d_adain_snake: items in groups whose
 * staged frames fit the context's prepass bytes (at least one item), each
 * group's snake(adain(x)) written to `xp`, then convolved from it. */
static int ig_prepass_conv(choir_cuda *cu, int mode, ig_args a, int64_t B, int64_t group,
                           const float *x, const int32_t *in_lens, const float *coef, void *xp,
                           choir_err *err) {
    const bool fast = (cu->conv_opts & CHOIR_CUDA_CONV_FAST_SIN) && mode != IG_TF32X3;
    const int64_t Cin = a.Cin, T = a.T, Cout = a.Cout, Tout = a.Tout;
    const int32_t *out_lens = a.out_lens;
    const float *residual = a.residual;
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
    /* statistics: enough blocks to fill the device, each at least 2048 samples */
    const int64_t rows = B * Cin;
    const int64_t want = 4 * (int64_t)(cu->props.sm_count > 0 ? cu->props.sm_count : 132);
    int64_t S = (want + rows - 1) / rows;
    if (S > (T + 2047) / 2048) S = (T + 2047) / 2048;
    if (S < 1) S = 1;
    if (S > 1024) S = 1024;
    const int64_t seg = (T + S - 1) / S;
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
    k_ig_stats<<<dim3((unsigned)rows, (unsigned)S), 256, 0, cu->stream>>>(x, Cin, T, pre->lens,
                                                                           (int)S, seg, part);
    int rc = choir_cuda_check_launch(err, "adain statistics");
    if (rc) return rc;
    k_ig_coef<<<choir_cuda_blocks(rows, 256), 256, 0, cu->stream>>>(part, (int)S, rows, Cin, T,
                                                                    pre->lens, *pre, coef);
    if ((rc = choir_cuda_check_launch(err, "adain coefficients"))) return rc;
    ig_args a;
    rc = ig_setup(cu, mode, B, Cin, T, weight, Cout, kernel, padding, dilation, scr, &a, err);
    if (rc || a.Tout <= 0) return rc;
    a.bias = bias, a.out_lens = out_lens, a.residual = residual, a.y = y;
    if (prepass)
        return ig_prepass_conv(cu, mode, a, B, group, x, pre->lens, coef,
                               scr + pack + parts + coefs, err);
    a.x = x, a.in_lens = pre->lens, a.coef = coef;
    return ig_launch(cu, mode, IG_X_PRO, a, B, err);
}
#endif /* CHOIR_IG_EMU */
