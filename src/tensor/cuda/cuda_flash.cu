/* Fused attention over bf16 rows on the tensor cores (flash-style): each
 * block takes 16 MT query rows per warp of one head and walks the keys in
 * tiles of 64, keeping the running maximum, the running sum and the output
 * accumulators in registers, so the scores never reach device memory.
 *
 * Per key tile: S = Q K^T with mma.m16n8k16 (bf16 in, f32 accumulation),
 * the online softmax in f32 (exp2 of scores pre-scaled by scale log2 e),
 * P rounded to bf16 and O += P V with the same instruction. K and V tiles are
 * copied into shared memory with cp.async, two tiles deep, rows padded by 16
 * bytes so that the fragment reads hit 32 distinct banks. The result is
 * O / l rounded to bf16 (a row that sees no key gets zeros). */
#include <cuda_bf16.h>

#include <stdint.h>

#include "tensor/cuda/cuda_internal.h"
#include "tensor/cuda/cuda_mma.h"

#define FA_KT 64                 /* keys per tile */
#define FA_WARPS 4
#define FA_THREADS (32 * FA_WARPS)

template <int D, int MT>
__global__ void __launch_bounds__(FA_THREADS)
    k_flash_bf16(const __nv_bfloat16 *__restrict__ q, int64_t ldq, int64_t q_batch,
                 const __nv_bfloat16 *__restrict__ k, int64_t ldk,
                 const __nv_bfloat16 *__restrict__ v, int64_t ldv, int64_t kv_batch,
                 __nv_bfloat16 *__restrict__ out, int64_t ldo, int64_t out_batch, int Tq, int Tk,
                 int rep, float scale_log2, bool causal) {
    constexpr int LD = D + 8;        /* padded shared row, elements */
    constexpr int KS = D / 16;       /* k-steps over the head for S */
    constexpr int NS = FA_KT / 8;    /* n-tiles of keys in S */
    constexpr int ND = D / 8;        /* n-tiles of values in O */
    constexpr int CH = D / 8;        /* 16-byte chunks per row */
    constexpr int BM = 16 * MT * FA_WARPS;
    __shared__ __align__(16) __nv_bfloat16 Ks[2][FA_KT * LD];
    __shared__ __align__(16) __nv_bfloat16 Vs[2][FA_KT * LD];

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int h = blockIdx.y, b = blockIdx.z, q0 = blockIdx.x * BM;
    const __nv_bfloat16 *qb = q + b * q_batch + (int64_t)h * D;
    const __nv_bfloat16 *kb = k + b * kv_batch + (int64_t)(h / rep) * D;
    const __nv_bfloat16 *vb = v + b * kv_batch + (int64_t)(h / rep) * D;

    /* The last key any row of this block sees, plus one. */
    int kend = Tk;
    if (causal) {
        int last = q0 + BM - 1 < Tq - 1 ? q0 + BM - 1 : Tq - 1;
        kend = last + (Tk - Tq) + 1;
        kend = kend < 0 ? 0 : (kend > Tk ? Tk : kend);
    }
    const int ntiles = (kend + FA_KT - 1) / FA_KT;

    auto load_tile = [&](int tile, int buf) {
        int key0 = tile * FA_KT;
        for (int c = threadIdx.x; c < FA_KT * CH; c += FA_THREADS) {
            int r = c / CH, col = (c % CH) * 8, key = key0 + r;
            bool in = key < Tk;
            int64_t kk = in ? key : 0;
            cp_async16(&Ks[buf][r * LD + col], kb + kk * ldk + col, in ? 16 : 0);
            cp_async16(&Vs[buf][r * LD + col], vb + kk * ldv + col, in ? 16 : 0);
        }
        cp_async_commit();
    };
    if (ntiles > 0) load_tile(0, 0);

    /* Q fragments straight from global memory (read once per block). */
    uint32_t qf[MT][KS][4];
    int row[MT][2];
#pragma unroll
    for (int m = 0; m < MT; m++) {
        row[m][0] = q0 + (warp * MT + m) * 16 + g;
        row[m][1] = row[m][0] + 8;
#pragma unroll
        for (int s = 0; s < KS; s++) {
#pragma unroll
            for (int i = 0; i < 4; i++) {
                int r = row[m][i & 1], col = s * 16 + 2 * t + (i >> 1) * 8;
                qf[m][s][i] = r < Tq ? *(const uint32_t *)(qb + (int64_t)r * ldq + col) : 0u;
            }
        }
    }

    float o[MT][ND][4];
    float mx[MT][2], sum[MT][2];
#pragma unroll
    for (int m = 0; m < MT; m++) {
#pragma unroll
        for (int j = 0; j < ND; j++) o[m][j][0] = o[m][j][1] = o[m][j][2] = o[m][j][3] = 0.0f;
        mx[m][0] = mx[m][1] = -INFINITY;
        sum[m][0] = sum[m][1] = 0.0f;
    }
    /* Rows i see keys < lim: i + (Tk - Tq) + 1 when causal. */
    int lim[MT][2];
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int r = 0; r < 2; r++) lim[m][r] = causal ? row[m][r] + (Tk - Tq) + 1 : Tk;

    for (int tile = 0; tile < ntiles; tile++) {
        const int buf = tile & 1;
        if (tile + 1 < ntiles) {
            load_tile(tile + 1, buf ^ 1);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const __nv_bfloat16 *Kt = Ks[buf], *Vt = Vs[buf];
        const int key0 = tile * FA_KT;

        float sc[MT][NS][4];
#pragma unroll
        for (int m = 0; m < MT; m++)
#pragma unroll
            for (int j = 0; j < NS; j++) sc[m][j][0] = sc[m][j][1] = sc[m][j][2] = sc[m][j][3] = 0.0f;
#pragma unroll
        for (int j = 0; j < NS; j++) {
            const __nv_bfloat16 *kr = Kt + (j * 8 + g) * LD + 2 * t;
#pragma unroll
            for (int s = 0; s < KS; s++) {
                uint32_t b0 = *(const uint32_t *)(kr + s * 16);
                uint32_t b1 = *(const uint32_t *)(kr + s * 16 + 8);
#pragma unroll
                for (int m = 0; m < MT; m++) mma_bf16(sc[m][j], qf[m][s], b0, b1);
            }
        }

        const bool edge = key0 + FA_KT > Tk || causal;
#pragma unroll
        for (int m = 0; m < MT; m++) {
            float tmax[2] = {-INFINITY, -INFINITY};
#pragma unroll
            for (int j = 0; j < NS; j++) {
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    float x = sc[m][j][i] * scale_log2;
                    if (edge) {
                        int key = key0 + j * 8 + 2 * t + (i & 1);
                        if (key >= lim[m][i >> 1] || key >= Tk) x = -INFINITY;
                    }
                    sc[m][j][i] = x;
                    tmax[i >> 1] = fmaxf(tmax[i >> 1], x);
                }
            }
#pragma unroll
            for (int r = 0; r < 2; r++) {
                tmax[r] = fmaxf(tmax[r], __shfl_xor_sync(0xffffffffu, tmax[r], 1));
                tmax[r] = fmaxf(tmax[r], __shfl_xor_sync(0xffffffffu, tmax[r], 2));
                float mnew = fmaxf(mx[m][r], tmax[r]);
                /* No key seen yet: keep everything at zero. */
                float base = mnew == -INFINITY ? 0.0f : mnew;
                float alpha = exp2f(mx[m][r] - base);
                mx[m][r] = mnew;
                sum[m][r] *= alpha;
#pragma unroll
                for (int j = 0; j < ND; j++) {
                    o[m][j][2 * r] *= alpha;
                    o[m][j][2 * r + 1] *= alpha;
                }
#pragma unroll
                for (int j = 0; j < NS; j++) {
                    float p0 = exp2f(sc[m][j][2 * r] - base), p1 = exp2f(sc[m][j][2 * r + 1] - base);
                    sc[m][j][2 * r] = p0;
                    sc[m][j][2 * r + 1] = p1;
                    sum[m][r] += p0 + p1;
                }
            }
        }

        /* O += P V: P's accumulator layout is the A fragment of the next
         * product; V's B fragments come transposed out of shared memory. */
#pragma unroll
        for (int s = 0; s < FA_KT / 16; s++) {
            uint32_t pa[MT][4];
#pragma unroll
            for (int m = 0; m < MT; m++) {
                pa[m][0] = pack_bf16(sc[m][2 * s][0], sc[m][2 * s][1]);
                pa[m][1] = pack_bf16(sc[m][2 * s][2], sc[m][2 * s][3]);
                pa[m][2] = pack_bf16(sc[m][2 * s + 1][0], sc[m][2 * s + 1][1]);
                pa[m][3] = pack_bf16(sc[m][2 * s + 1][2], sc[m][2 * s + 1][3]);
            }
            const int mat = lane >> 3, r = lane & 7;
            const __nv_bfloat16 *vr = Vt + (s * 16 + (mat & 1) * 8 + r) * LD + (mat >> 1) * 8;
#pragma unroll
            for (int j = 0; j < ND; j += 2) {
                uint32_t bf[4];
                ldmatrix_x4_trans(bf, vr + j * 8);
#pragma unroll
                for (int m = 0; m < MT; m++) {
                    mma_bf16(o[m][j], pa[m], bf[0], bf[1]);
                    mma_bf16(o[m][j + 1], pa[m], bf[2], bf[3]);
                }
            }
        }
        __syncthreads(); /* the buffer is refilled next iteration */
    }

    __nv_bfloat16 *ob = out + b * out_batch + (int64_t)h * D;
#pragma unroll
    for (int m = 0; m < MT; m++) {
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float l = sum[m][r];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            float inv = l > 0.0f ? 1.0f / l : 0.0f;
            int i = row[m][r];
            if (i >= Tq) continue;
            __nv_bfloat16 *orow = ob + (int64_t)i * ldo;
#pragma unroll
            for (int j = 0; j < ND; j++)
                *(uint32_t *)(orow + j * 8 + 2 * t) =
                    pack_bf16(o[m][j][2 * r] * inv, o[m][j][2 * r + 1] * inv);
        }
    }
}

/* The second kernel (6 Dec 2026), same contract, heads of 64 values:
 * the changes against k_flash_bf16 are what Nsight Compute and the
 * instruction count said bound it, the issue slots around the products:
 *  - K's B fragments come out of shared memory by ldmatrix.x4 (one
 *    instruction per two k-steps instead of four 4-byte loads);
 *  - the scale is folded into the exponent's argument (one FFMA per score,
 *    the maximum taken over the raw scores), and the exponent is ex2.approx
 *    with flush to zero, one MUFU instruction;
 *  - the output is rescaled only when a row's running maximum grows by more
 *    than 2^8 (warp-uniform test): until then the probabilities are taken
 *    against the stale maximum, at most 256, and both the sum and the output
 *    carry the same reference, so O / l is unchanged (the rescale, 64 FMULs
 *    per thread and tile, runs on a few tiles of a row instead of all);
 *  - WARPS (4 or 8) warps share each K/V tile (8: 256 query rows per block,
 *    half the tile traffic from L2). */
#define FA2_GROW 8.0f /* log2 of how far a row's maximum may run ahead of its reference */

template <int D, int MT, int WARPS>
__global__ void __launch_bounds__(32 * WARPS, MT == 1 ? 2 : 1)
    k_flash2_bf16(const __nv_bfloat16 *__restrict__ q, int64_t ldq, int64_t q_batch,
                  const __nv_bfloat16 *__restrict__ k, int64_t ldk,
                  const __nv_bfloat16 *__restrict__ v, int64_t ldv, int64_t kv_batch,
                  __nv_bfloat16 *__restrict__ out, int64_t ldo, int64_t out_batch, int Tq, int Tk,
                  int rep, float scale_log2, bool causal) {
    static_assert(D % 32 == 0, "two k-steps per ldmatrix.x4");
    constexpr int THREADS = 32 * WARPS;
    constexpr int LD = D + 8;        /* padded shared row, elements */
    constexpr int KS = D / 16;       /* k-steps over the head for S */
    constexpr int NS = FA_KT / 8;    /* n-tiles of keys in S */
    constexpr int ND = D / 8;        /* n-tiles of values in O */
    constexpr int CH = D / 8;        /* 16-byte chunks per row */
    constexpr int BM = 16 * MT * WARPS;
    __shared__ __align__(16) __nv_bfloat16 Ks[2][FA_KT * LD];
    __shared__ __align__(16) __nv_bfloat16 Vs[2][FA_KT * LD];

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int h = blockIdx.y, b = blockIdx.z, q0 = blockIdx.x * BM;
    const __nv_bfloat16 *qb = q + b * q_batch + (int64_t)h * D;
    const __nv_bfloat16 *kb = k + b * kv_batch + (int64_t)(h / rep) * D;
    const __nv_bfloat16 *vb = v + b * kv_batch + (int64_t)(h / rep) * D;

    int kend = Tk;
    if (causal) {
        int last = q0 + BM - 1 < Tq - 1 ? q0 + BM - 1 : Tq - 1;
        kend = last + (Tk - Tq) + 1;
        kend = kend < 0 ? 0 : (kend > Tk ? Tk : kend);
    }
    const int ntiles = (kend + FA_KT - 1) / FA_KT;

    auto load_tile = [&](int tile, int buf) {
        int key0 = tile * FA_KT;
#pragma unroll
        for (int c = threadIdx.x; c < FA_KT * CH; c += THREADS) {
            int r = c / CH, col = (c % CH) * 8, key = key0 + r;
            bool in = key < Tk;
            int64_t kk = in ? key : 0;
            cp_async16(&Ks[buf][r * LD + col], kb + kk * ldk + col, in ? 16 : 0);
            cp_async16(&Vs[buf][r * LD + col], vb + kk * ldv + col, in ? 16 : 0);
        }
        cp_async_commit();
    };
    if (ntiles > 0) load_tile(0, 0);

    uint32_t qf[MT][KS][4];
    int row[MT][2];
#pragma unroll
    for (int m = 0; m < MT; m++) {
        row[m][0] = q0 + (warp * MT + m) * 16 + g;
        row[m][1] = row[m][0] + 8;
#pragma unroll
        for (int s = 0; s < KS; s++) {
#pragma unroll
            for (int i = 0; i < 4; i++) {
                int r = row[m][i & 1], col = s * 16 + 2 * t + (i >> 1) * 8;
                qf[m][s][i] = r < Tq ? *(const uint32_t *)(qb + (int64_t)r * ldq + col) : 0u;
            }
        }
    }

    float o[MT][ND][4];
    float ref[MT][2], sum[MT][2]; /* ref: the rows' reference maximum, scaled by scale log2 e */
#pragma unroll
    for (int m = 0; m < MT; m++) {
#pragma unroll
        for (int j = 0; j < ND; j++) o[m][j][0] = o[m][j][1] = o[m][j][2] = o[m][j][3] = 0.0f;
        ref[m][0] = ref[m][1] = -INFINITY;
        sum[m][0] = sum[m][1] = 0.0f;
    }
    int lim[MT][2];
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int r = 0; r < 2; r++) lim[m][r] = causal ? row[m][r] + (Tk - Tq) + 1 : Tk;

    /* ldmatrix row addresses: lane l reads row (l & 7) of matrix (l >> 3). */
    const int lr = lane & 7, lm = lane >> 3;

    for (int tile = 0; tile < ntiles; tile++) {
        const int buf = tile & 1;
        if (tile + 1 < ntiles) {
            load_tile(tile + 1, buf ^ 1);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const __nv_bfloat16 *Kt = Ks[buf], *Vt = Vs[buf];
        const int key0 = tile * FA_KT;

        float sc[MT][NS][4];
#pragma unroll
        for (int m = 0; m < MT; m++)
#pragma unroll
            for (int j = 0; j < NS; j++) sc[m][j][0] = sc[m][j][1] = sc[m][j][2] = sc[m][j][3] = 0.0f;
#pragma unroll
        for (int j = 0; j < NS; j++) {
            const __nv_bfloat16 *kr = Kt + (j * 8 + lr) * LD + lm * 8;
#pragma unroll
            for (int s = 0; s < KS; s += 2) {
                uint32_t bf[4];
                ldmatrix_x4(bf, kr + s * 16);
#pragma unroll
                for (int m = 0; m < MT; m++) {
                    mma_bf16(sc[m][j], qf[m][s], bf[0], bf[1]);
                    mma_bf16(sc[m][j], qf[m][s + 1], bf[2], bf[3]);
                }
            }
        }

        const bool edge = key0 + FA_KT > Tk || causal;
        float tmax[MT][2];
        bool grow = false;
#pragma unroll
        for (int m = 0; m < MT; m++) {
            tmax[m][0] = tmax[m][1] = -INFINITY;
#pragma unroll
            for (int j = 0; j < NS; j++) {
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    float x = sc[m][j][i];
                    if (edge) {
                        int key = key0 + j * 8 + 2 * t + (i & 1);
                        if (key >= lim[m][i >> 1] || key >= Tk) x = -INFINITY;
                        sc[m][j][i] = x;
                    }
                    tmax[m][i >> 1] = fmaxf(tmax[m][i >> 1], x);
                }
            }
#pragma unroll
            for (int r = 0; r < 2; r++) {
                tmax[m][r] = fmaxf(tmax[m][r], __shfl_xor_sync(0xffffffffu, tmax[m][r], 1));
                tmax[m][r] = fmaxf(tmax[m][r], __shfl_xor_sync(0xffffffffu, tmax[m][r], 2));
                tmax[m][r] *= scale_log2;
                grow |= tmax[m][r] > ref[m][r] + FA2_GROW;
            }
        }
        if (__any_sync(0xffffffffu, grow)) {
#pragma unroll
            for (int m = 0; m < MT; m++)
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    float mnew = fmaxf(ref[m][r], tmax[m][r]);
                    float alpha = mnew == -INFINITY ? 1.0f : ex2_ftz(ref[m][r] - mnew);
                    ref[m][r] = mnew;
                    sum[m][r] *= alpha;
#pragma unroll
                    for (int j = 0; j < ND; j++) {
                        o[m][j][2 * r] *= alpha;
                        o[m][j][2 * r + 1] *= alpha;
                    }
                }
        }
#pragma unroll
        for (int m = 0; m < MT; m++)
#pragma unroll
            for (int r = 0; r < 2; r++) {
                /* No key seen yet: the scores are all -inf, exponents 0. */
                float nb = ref[m][r] == -INFINITY ? 0.0f : -ref[m][r];
#pragma unroll
                for (int j = 0; j < NS; j++) {
                    float p0 = ex2_ftz(fmaf(sc[m][j][2 * r], scale_log2, nb));
                    float p1 = ex2_ftz(fmaf(sc[m][j][2 * r + 1], scale_log2, nb));
                    sc[m][j][2 * r] = p0;
                    sc[m][j][2 * r + 1] = p1;
                    sum[m][r] += p0 + p1;
                }
            }

#pragma unroll
        for (int s = 0; s < FA_KT / 16; s++) {
            uint32_t pa[MT][4];
#pragma unroll
            for (int m = 0; m < MT; m++) {
                pa[m][0] = pack_bf16(sc[m][2 * s][0], sc[m][2 * s][1]);
                pa[m][1] = pack_bf16(sc[m][2 * s][2], sc[m][2 * s][3]);
                pa[m][2] = pack_bf16(sc[m][2 * s + 1][0], sc[m][2 * s + 1][1]);
                pa[m][3] = pack_bf16(sc[m][2 * s + 1][2], sc[m][2 * s + 1][3]);
            }
            const __nv_bfloat16 *vr = Vt + (s * 16 + (lm & 1) * 8 + lr) * LD + (lm >> 1) * 8;
#pragma unroll
            for (int j = 0; j < ND; j += 2) {
                uint32_t bf[4];
                ldmatrix_x4_trans(bf, vr + j * 8);
#pragma unroll
                for (int m = 0; m < MT; m++) {
                    mma_bf16(o[m][j], pa[m], bf[0], bf[1]);
                    mma_bf16(o[m][j + 1], pa[m], bf[2], bf[3]);
                }
            }
        }
        __syncthreads();
    }

    __nv_bfloat16 *ob = out + b * out_batch + (int64_t)h * D;
#pragma unroll
    for (int m = 0; m < MT; m++) {
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float l = sum[m][r];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            float inv = l > 0.0f ? 1.0f / l : 0.0f;
            int i = row[m][r];
            if (i >= Tq) continue;
            __nv_bfloat16 *orow = ob + (int64_t)i * ldo;
#pragma unroll
            for (int j = 0; j < ND; j++)
                *(uint32_t *)(orow + j * 8 + 2 * t) =
                    pack_bf16(o[m][j][2 * r] * inv, o[m][j][2 * r + 1] * inv);
        }
    }
}

template <int D, int MT, int WARPS>
static int flash2_launch(choir_cuda *cu, int64_t B, const uint16_t *q, int64_t ldq,
                         int64_t q_batch, const uint16_t *k, int64_t ldk, const uint16_t *v,
                         int64_t ldv, int64_t kv_batch, uint16_t *out, int64_t ldo,
                         int64_t out_batch, int64_t Tq, int64_t Tk, int n_head, int rep,
                         float scale, bool causal, choir_err *err) {
    constexpr int BM = 16 * MT * WARPS;
    dim3 grid((unsigned)((Tq + BM - 1) / BM), (unsigned)n_head, (unsigned)B);
    k_flash2_bf16<D, MT, WARPS><<<grid, 32 * WARPS, 0, cu->stream>>>(
        (const __nv_bfloat16 *)q, ldq, q_batch, (const __nv_bfloat16 *)k, ldk,
        (const __nv_bfloat16 *)v, ldv, kv_batch, (__nv_bfloat16 *)out, ldo, out_batch, (int)Tq,
        (int)Tk, rep, scale * 1.4426950408889634f, causal);
    return choir_cuda_check_launch(err, "bf16 flash attention");
}

template <int D, int MT>
static int flash_launch(choir_cuda *cu, int64_t B, const uint16_t *q, int64_t ldq,
                        int64_t q_batch, const uint16_t *k, int64_t ldk, const uint16_t *v,
                        int64_t ldv, int64_t kv_batch, uint16_t *out, int64_t ldo,
                        int64_t out_batch, int64_t Tq, int64_t Tk, int n_head, int rep,
                        float scale, bool causal, choir_err *err) {
    constexpr int BM = 16 * MT * FA_WARPS;
    dim3 grid((unsigned)((Tq + BM - 1) / BM), (unsigned)n_head, (unsigned)B);
    k_flash_bf16<D, MT><<<grid, FA_THREADS, 0, cu->stream>>>(
        (const __nv_bfloat16 *)q, ldq, q_batch, (const __nv_bfloat16 *)k, ldk,
        (const __nv_bfloat16 *)v, ldv, kv_batch, (__nv_bfloat16 *)out, ldo, out_batch, (int)Tq,
        (int)Tk, rep, scale * 1.4426950408889634f, causal);
    return choir_cuda_check_launch(err, "bf16 flash attention");
}

static int flash_mt = 2;
/* 1: k_flash_bf16; 2, 3, 4: k_flash2_bf16 with 4 warps of 32 rows, 8 of 32,
 * 8 of 16 (heads of 64 values; others take the first kernel). */
#define FLASH_DEFAULT 3
static int flash_kernel = FLASH_DEFAULT;

void choir_cuda_attention_bf16_set_rows(int rows_per_warp) {
    flash_mt = rows_per_warp == 16 ? 1 : 2;
}

int choir_cuda_attention_bf16_kernels(void) { return 4; }

void choir_cuda_attention_bf16_set_kernel(int kernel) {
    flash_kernel = kernel >= 1 && kernel <= 4 ? kernel : FLASH_DEFAULT;
}

int choir_cuda_attention_bf16(choir_cuda *cu, int64_t B, const uint16_t *q, int64_t ldq,
                              int64_t q_batch, const uint16_t *k, int64_t ldk, const uint16_t *v,
                              int64_t ldv, int64_t kv_batch, uint16_t *out, int64_t ldo,
                              int64_t out_batch, int64_t Tq, int64_t Tk, int n_head,
                              int n_kv_head, int64_t Dh, float scale, bool causal,
                              choir_err *err) {
    if (B <= 0 || Tq <= 0) return 0;
    int kvh = n_kv_head > 0 ? n_kv_head : n_head;
    if (n_head <= 0 || kvh > n_head || n_head % kvh || Tk < 0)
        return choir_err_set(err, CHOIR_EINVAL, "cuda: bf16 attention: %d heads over %d", n_head,
                             kvh);
    if (Dh != 16 && Dh != 32 && Dh != 64)
        return choir_err_set(err, CHOIR_EUNSUPPORTED,
                             "cuda: bf16 attention over heads of %lld values (16, 32 or 64)",
                             (long long)Dh);
    if (Tq > INT32_MAX || Tk > INT32_MAX || n_head > 65535 || B > 65535)
        return choir_err_set(err, CHOIR_ETOOBIG, "cuda: bf16 attention of %lld x %lld", (long long)Tq,
                             (long long)Tk);
    /* 16-byte rows for cp.async and the 4-byte fragment reads. */
    uintptr_t al = (uintptr_t)q | (uintptr_t)k | (uintptr_t)v | (uintptr_t)out;
    if ((al & 15) || (ldq | ldk | ldv | ldo | q_batch | kv_batch | out_batch) & 7)
        return choir_err_set(err, CHOIR_EINVAL,
                             "cuda: bf16 attention needs 16-byte aligned rows and strides");
    int rep = n_head / kvh;
#define CHOIR_FLASH(D, MT)                                                                     \
    flash_launch<D, MT>(cu, B, q, ldq, q_batch, k, ldk, v, ldv, kv_batch, out, ldo, out_batch, Tq, \
                        Tk, n_head, rep, scale, causal, err)
#define CHOIR_FLASH2(D, MT, W)                                                                 \
    flash2_launch<D, MT, W>(cu, B, q, ldq, q_batch, k, ldk, v, ldv, kv_batch, out, ldo, out_batch, \
                            Tq, Tk, n_head, rep, scale, causal, err)
    /* The second kernel takes the maximum over the raw scores: a positive scale. */
    if (flash_kernel > 1 && scale > 0.0f && Dh == 64)
        return flash_kernel == 2   ? CHOIR_FLASH2(64, 2, 4)
               : flash_kernel == 3 ? CHOIR_FLASH2(64, 2, 8)
                                   : CHOIR_FLASH2(64, 1, 8);
    if (Dh == 16) return CHOIR_FLASH(16, 2);
    if (Dh == 32) return CHOIR_FLASH(32, 2);
    return flash_mt == 1 ? CHOIR_FLASH(64, 1) : CHOIR_FLASH(64, 2);
#undef CHOIR_FLASH
#undef CHOIR_FLASH2
}
